"""Intervals a reader can defend: a cell's summary with its 95% interval of the mean.

The 95% interval is of the mean. From ``BOOTSTRAP_MIN_N`` repetitions on it is a BCa bootstrap
(scipy, a bounded number of resamples, fixed seed so that a report is reproducible), widened by
sqrt(n/(n−1))·t/z (Hesterberg's "expanded" bootstrap): the plain bootstrap is too narrow for
small n (measured here: 90% coverage at n = 10, 93% at 20 for a nominal 95%; expanded: 94–95%).
Below ``BOOTSTRAP_MIN_N`` resamples of so few values say little, and Student's t interval, exact
for normal noise, is used instead.

No interval is narrower than the measurement can resolve. A value known to a resolution q (the
smallest change its measurement can show, ``Metric.resolution``) carries a rounding error of up
to ±q/2, and the repetitions of a cell may all carry the same one (a job steady to within a
tick of its clock reads the same tick count every time), so that averaging does not shrink it:
a mean's interval is at least mean ± q/2, q being the mean of its values' resolutions (the bound
of a mean of errors each within ±q_i/2). Repetitions within q/2 of each other are "below the
measurement's resolution". In a ratio the same rounding error is carried as a floor of q²/12
under the variance of each mean (a rounding error uniform over one step, common to the
repetitions, not divided by n), known rather than estimated (no degrees of freedom), like
``compare``'s allowance. Repetitions exactly equal (to the float's rounding) with no
resolution known show no spread to estimate a variance from, and nothing says how large it is:
they get no interval ("identical repetitions: resolution unknown"), and ratios with them are
not tested.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hvbench.analysis.outliers import bimodal, outliers
from hvbench.analysis.stats import (
    CONFIDENCE,
    SEED,
    identical,
    quantile_test,
    scipy_stats,
    t_quantile,
)

BOOTSTRAP_MIN_N = 10
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH = 250
"""Resamples computed at once: bounds memory at 250 × series × n floats."""
BELOW_RESOLUTION = "below the measurement's resolution"
"""A cell whose repetitions are within half a resolution step of each other."""
RESOLUTION_UNKNOWN = "identical repetitions: resolution unknown"
"""A cell whose repetitions are exactly equal, with no resolution known: no interval."""
NOISY_CV = 0.10
"""Coefficient of variation past which a cell is called noisy."""
MEDIAN_MIN_N = next(n for n in range(1, 64) if 2 * 0.5**n <= 1 - CONFIDENCE)
"""The fewest values whose order statistics bound their median at ``CONFIDENCE`` (6: all of
them fall on one side of it with probability 2 × 0.5⁶ = 3.1%; of 5, 6.2%)."""


@dataclass(frozen=True)
class SampleSummary:
    """One series of repetitions, summarized. ``ci_low``/``ci_high`` are NaN for n < 2."""

    n: int
    median: float
    mean: float
    std: float
    cv: float
    ci_low: float
    ci_high: float
    outliers: tuple[int, ...]
    """Indexes (into the series) of values flagged as outliers (see ``outliers``)."""
    bimodal: tuple[int, ...] = ()
    """Indexes of the smaller of two groups the values fall into (see ``bimodal``)."""
    resolution: float | None = None
    """The smallest change of the mean its measurement can show (the mean of its values'
    ``Metric.resolution``); None where unknown. The interval is at least mean ± resolution/2."""
    identical: str | None = None
    """``BELOW_RESOLUTION`` or ``RESOLUTION_UNKNOWN`` where the repetitions show no spread the
    measurement can resolve (n ≥ 2); None otherwise."""

    @property
    def ci_half_width(self) -> float:
        """Half the CI's width relative to the mean (0.03 = ±3%); NaN when undefined."""
        if self.n < 2 or self.mean == 0:
            return math.nan
        return (self.ci_high - self.ci_low) / 2 / abs(self.mean)

    @property
    def noisy(self) -> bool:
        return self.n >= 2 and self.cv > NOISY_CV


def confidence_intervals(
    series: Sequence[np.ndarray], confidence: float = CONFIDENCE
) -> list[tuple[float, float]]:
    """Interval of the mean of each series: t for small n, expanded BCa bootstrap from
    BOOTSTRAP_MIN_N on. Series of the same length are bootstrapped in one batched scipy call
    (a report has hundreds of them)."""
    out: list[tuple[float, float]] = [(math.nan, math.nan)] * len(series)
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, x in enumerate(series):
        n = len(x)
        if n < 2:
            continue
        if np.ptp(x) == 0:
            out[i] = (float(x[0]), float(x[0]))
        elif n < BOOTSTRAP_MIN_N:
            mean, sem = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
            half = sem * t_quantile((1 + confidence) / 2, n - 1)
            out[i] = (mean - half, mean + half)
        else:
            by_length[n].append(i)
    for n, idx in by_length.items():
        data = np.stack([series[i] for i in idx])
        low, high = _bootstrap(data, "BCa", confidence)
        bad = ~(np.isfinite(low) & np.isfinite(high))
        if bad.any():  # BCa undefined (e.g. an acceleration of 0/0): plain percentiles
            low[bad], high[bad] = _bootstrap(data[bad], "percentile", confidence)
        mean = data.mean(axis=1)
        q = (1 + confidence) / 2
        widen = math.sqrt(n / (n - 1)) * float(
            scipy_stats().t.ppf(q, n - 1) / scipy_stats().norm.ppf(q)
        )
        for k, i in enumerate(idx):
            out[i] = (
                float(mean[k] - (mean[k] - low[k]) * widen),
                float(mean[k] + (high[k] - mean[k]) * widen),
            )
    return out


def _bootstrap(data: np.ndarray, method: str, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """scipy's bootstrap of the mean along the last axis of a (series × n) array."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate cases come back as NaN, handled above
        res = scipy_stats().bootstrap(
            (data,),
            np.mean,
            confidence_level=confidence,
            n_resamples=BOOTSTRAP_RESAMPLES,
            batch=BOOTSTRAP_BATCH,
            method=method,
            vectorized=True,
            axis=-1,
            random_state=SEED,
        )
    ci = res.confidence_interval
    return np.atleast_1d(np.asarray(ci.low, dtype=float)), np.atleast_1d(
        np.asarray(ci.high, dtype=float)
    )


def confidence_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval of the mean of one series (see ``confidence_intervals``)."""
    return confidence_intervals([np.asarray(values, dtype=float)], confidence)[0]


def summarize_many(
    series: Sequence[Sequence[float] | np.ndarray],
    resolutions: Sequence[float | None] | None = None,
) -> list[SampleSummary]:
    """Median, mean, standard deviation (n − 1), CV, 95% CI of the mean, outliers and
    bimodality of each series; its interval no narrower than its resolution (the mean's, one
    per series, None where unknown: see the module's docstring). Bootstraps are batched, and
    identical series (the aggregate of a single instance is its single figure) are summarized
    once."""
    arrays = [np.asarray(v, dtype=float) for v in series]
    if any(len(x) == 0 for x in arrays):
        raise ValueError("summarize() needs at least one value per series")
    qs = list(resolutions) if resolutions is not None else [None] * len(arrays)
    unique: dict[bytes, int] = {}
    for x in arrays:
        unique.setdefault(x.tobytes(), len(unique))
    distinct = [np.frombuffer(k) for k in unique]
    cis = confidence_intervals(distinct)
    return [_summary(x, cis[unique[x.tobytes()]], q) for x, q in zip(arrays, qs, strict=True)]


def _summary(x: np.ndarray, ci: tuple[float, float], q: float | None) -> SampleSummary:
    n = len(x)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if n > 1 else 0.0
    flat = None
    if n >= 2 and q is not None:
        ci = (min(ci[0], mean - q / 2), max(ci[1], mean + q / 2))
        flat = BELOW_RESOLUTION if float(np.ptp(x)) <= q / 2 else None
    elif n >= 2 and identical(std, mean):
        ci, flat = (math.nan, math.nan), RESOLUTION_UNKNOWN
    return SampleSummary(
        n=n,
        median=float(np.median(x)),
        mean=mean,
        std=std,
        cv=std / abs(mean) if mean else math.nan,
        ci_low=ci[0],
        ci_high=ci[1],
        outliers=outliers(x),
        bimodal=bimodal(x),
        resolution=q,
        identical=flat,
    )


def summarize(
    values: Sequence[float] | np.ndarray, resolution: float | None = None
) -> SampleSummary:
    """``summarize_many`` of one series."""
    return summarize_many([values], [resolution])[0]


def mean_resolution(per_value: np.ndarray) -> float | None:
    """The resolution of a mean: the mean of its values' resolutions (its rounding error is
    within half of that); None if any of them is unknown (NaN)."""
    q = np.asarray(per_value, dtype=float)
    return float(np.mean(q)) if len(q) and np.isfinite(q).all() and (q > 0).all() else None


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of the median of values drawn independently from one law, between two of
    their order statistics (``stats.quantile_test``): it holds at least its level whatever the
    law, counts of steps with their ties included (ties only widen it), where an interval of
    the mean of a few equal counts would rest on a normal noise they do not have. NaN below
    ``MEDIAN_MIN_N`` values, which no order statistics bound at that level."""
    x = np.asarray(values, dtype=float)
    if len(x) < MEDIAN_MIN_N:
        return math.nan, math.nan
    q = quantile_test(x, 0.5, confidence=confidence)
    return q.low, q.high
