"""Statistics a reader can defend: summaries with confidence intervals, outliers, significance.

The 95% interval is of the mean. From ``BOOTSTRAP_MIN_N`` repetitions on it is a BCa bootstrap
(scipy, a bounded number of resamples, fixed seed so that a report is reproducible), widened by
sqrt(n/(n−1))·t/z (Hesterberg's "expanded" bootstrap): the plain bootstrap is too narrow for
small n (measured here: 90% coverage at n = 10, 93% at 20 for a nominal 95%; expanded: 94–95%).
Below ``BOOTSTRAP_MIN_N`` resamples of so few values say little, and Student's t interval, exact
for normal noise, is used instead. Differences are tested with Welch's t test, which needs no
equal variances and, unlike a permutation test, can reach p < 0.01 with the 3 repetitions
studies usually have (3 against 3 permutations cannot go below p = 0.1).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_MIN_N = 10
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH = 250
"""Resamples computed at once: bounds memory at 250 × series × n floats."""
SEED = 20260521
OUTLIER_Z = 3.5
"""Modified z-score (Iglewicz and Hoaglin) past which a value is flagged as an outlier."""
OUTLIER_MIN_N = 5
"""Fewer repetitions than this have no outliers to speak of: the MAD of 3 values is mostly
noise."""
OUTLIER_MIN_REL = 0.02
"""...and only if it is also this far from the median, relative to it: with few repetitions
of a quiet cell the MAD is tiny, and a 0.5% wobble is not worth a warning."""
NOISY_CV = 0.10
"""Coefficient of variation past which a cell is called noisy."""
ALPHA = 0.05
"""Significance level of the report's "differs from the baseline" calls."""


def _scipy() -> ModuleType:
    """scipy.stats, imported on first use: it takes about a second to import, which every
    hvbench command (``hvbench version`` included) would otherwise pay."""
    import scipy.stats

    return scipy.stats


@dataclass(frozen=True)
class Summary:
    """One series of repetitions, summarized. ``ci_low``/``ci_high`` are NaN for n < 2."""

    n: int
    median: float
    mean: float
    std: float
    cv: float
    ci_low: float
    ci_high: float
    outliers: tuple[int, ...]
    """Indexes (into the series) of values flagged by the MAD rule."""

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
            mean, sem = float(np.mean(x)), float(_scipy().sem(x))
            half = sem * float(_scipy().t.ppf((1 + confidence) / 2, n - 1))
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
        widen = math.sqrt(n / (n - 1)) * float(_scipy().t.ppf(q, n - 1) / _scipy().norm.ppf(q))
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
        res = _scipy().bootstrap(
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


def mad_outliers(values: np.ndarray, threshold: float = OUTLIER_Z) -> tuple[int, ...]:
    """Indexes whose modified z-score 0.6745·|x − median| / MAD exceeds ``threshold`` and that
    are more than OUTLIER_MIN_REL away from the median.

    The median absolute deviation is not pulled by the outliers themselves as the standard
    deviation is; with MAD = 0 (most values identical) any far value is flagged.
    """
    if len(values) < OUTLIER_MIN_N:
        return ()
    med = np.median(values)
    dev = np.abs(values - med)
    far = dev > OUTLIER_MIN_REL * abs(med)
    mad = np.median(dev)
    z = np.where(far, np.inf, 0.0) if mad == 0 else 0.6745 * dev / mad
    return tuple(int(i) for i in np.flatnonzero((z > threshold) & far))


def summarize_many(series: Sequence[Sequence[float] | np.ndarray]) -> list[Summary]:
    """Median, mean, standard deviation (n − 1), CV, 95% CI of the mean and MAD outliers of
    each series. Bootstraps are batched, and identical series (the aggregate of a single
    instance is its single figure) are summarized once."""
    arrays = [np.asarray(v, dtype=float) for v in series]
    if any(len(x) == 0 for x in arrays):
        raise ValueError("summarize() needs at least one value per series")
    unique: dict[bytes, int] = {}
    for x in arrays:
        unique.setdefault(x.tobytes(), len(unique))
    distinct = [np.frombuffer(k) for k in unique]
    summaries = [
        _summary(x, ci) for x, ci in zip(distinct, confidence_intervals(distinct), strict=True)
    ]
    return [summaries[unique[x.tobytes()]] for x in arrays]


def _summary(x: np.ndarray, ci: tuple[float, float]) -> Summary:
    n = len(x)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if n > 1 else 0.0
    return Summary(
        n=n,
        median=float(np.median(x)),
        mean=mean,
        std=std,
        cv=std / abs(mean) if mean else math.nan,
        ci_low=ci[0],
        ci_high=ci[1],
        outliers=mad_outliers(x),
    )


def summarize(values: Sequence[float] | np.ndarray) -> Summary:
    """``summarize_many`` of one series."""
    return summarize_many([values])[0]


@dataclass(frozen=True)
class Difference:
    """B against A: relative change of the mean, its CI, and Welch's two-sided p-value."""

    change: float
    """mean(B) / mean(A) − 1."""
    ci_low: float
    ci_high: float
    p_value: float

    def significant(self, alpha: float = ALPHA) -> bool:
        return math.isfinite(self.p_value) and self.p_value < alpha


def welch(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE
) -> Difference:
    """Welch's t test of B against A, the change and its CI relative to mean(A).

    The CI is Welch's interval of mean(B) − mean(A) divided by mean(A) (A's own uncertainty
    is in the test, not in the scale). With fewer than 2 values on a side there is no test and
    the p-value is NaN: such a difference is never called significant.
    """
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    base = float(np.mean(xa))
    delta = float(np.mean(xb)) - base
    change = delta / base if base else math.nan
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2 or not base:
        return Difference(change, math.nan, math.nan, math.nan)
    va, vb = float(np.var(xa, ddof=1)) / na, float(np.var(xb, ddof=1)) / nb
    if va + vb == 0:
        p = 1.0 if delta == 0 else 0.0
        return Difference(change, change, change, p)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))  # Welch-Satterthwaite
    p = float(2 * _scipy().t.sf(abs(delta) / se, df))
    half = float(_scipy().t.ppf((1 + confidence) / 2, df)) * se
    return Difference(change, (delta - half) / base, (delta + half) / base, p)


def needs_more(
    values: Sequence[float],
    ci_target: float = 0.03,
    *,
    min_count: int = 3,
    max_count: int = 30,
    elapsed_s: float = 0.0,
    budget_s: float = math.inf,
) -> bool:
    """Should the runner measure this cell once more? Never unbounded.

    Yes while fewer than ``min_count`` values exist; otherwise yes only while the CI half-width
    exceeds ``ci_target`` (relative to the mean) AND another repetition fits: fewer than
    ``max_count`` values, and ``elapsed_s`` plus one more repetition at the average duration so
    far stays within ``budget_s``.
    """
    n = len(values)
    if n >= max_count:
        return False
    if n > 0 and elapsed_s + elapsed_s / n > budget_s:
        return False
    if n < min_count:
        return True
    half = summarize(values).ci_half_width
    return math.isfinite(half) and half > ci_target


def geometric_mean(values: Sequence[float] | np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Geometric mean; NaN if any value is not positive (a score of 0 has no ratio)."""
    x = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.exp(np.mean(np.log(np.where(x > 0, x, np.nan)), axis=axis))
    return float(out) if np.ndim(out) == 0 else out
