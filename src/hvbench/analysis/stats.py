"""Statistics a reader can defend: summaries with confidence intervals, outliers, significance.

The 95% interval is of the mean. From ``BOOTSTRAP_MIN_N`` repetitions on it is a BCa bootstrap
(scipy, a bounded number of resamples, fixed seed so that a report is reproducible), widened by
sqrt(n/(n−1))·t/z (Hesterberg's "expanded" bootstrap): the plain bootstrap is too narrow for
small n (measured here: 90% coverage at n = 10, 93% at 20 for a nominal 95%; expanded: 94–95%).
Below ``BOOTSTRAP_MIN_N`` resamples of so few values say little, and Student's t interval, exact
for normal noise, is used instead.

A ratio of two means (% of native, ``compare``'s change) gets Fieller's interval with Welch's
degrees of freedom, which carries the noise of both series (dividing one series' interval by
the other's mean leaves the divisor's out: 86% coverage at n = 10 for a nominal 95%). Its
reading is three-way (``reading``): a loss or gain when it excludes 1, "no significant
difference" only when it lies within ±``PRACTICAL``, else inconclusive. Welch's t test, which
needs no equal variances and, unlike a permutation test, can reach p < 0.01 with the 3
repetitions studies usually have (3 against 3 permutations cannot go below p = 0.1), is the
test; Holm's step-down keeps a family of them (``compare``'s metrics) from crying wolf.

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

A cell's repetitions in the order they ran are tested for a trend (Kendall's τ against the
repetition index, the Mann–Kendall test, exact without ties), from ``TREND_MIN_N`` repetitions,
with Holm's step-down over the run's headline figures: a figure that drifts as the run goes on
(a host warming up, throttling, load growing) has a mean that depends on when one stops.

Outliers and bimodal cells are judged by statistics whose distribution over clean (normal)
repetitions depends only on n; their thresholds are that distribution's upper quantile, drawn
once per n by a seeded simulation, so that a clean cell is flagged as rarely as ``OUTLIER_LEVEL``
and ``BIMODAL_LEVEL`` say at every n (a fixed threshold flags a fifth of clean cells at n = 5).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import NamedTuple

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_MIN_N = 10
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH = 250
"""Resamples computed at once: bounds memory at 250 × series × n floats."""
SEED = 20260521
OUTLIER_LEVEL = 0.01
"""Share of clean cells (normal noise) in which the outlier rule flags a repetition."""
OUTLIER_MIN_N = 5
"""Fewer repetitions than this have no outliers to speak of: the spread of the 2 or 3 others
is mostly noise."""
OUTLIER_MIN_REL = 0.02
"""...and only if it is also this far from the median, relative to it: with few repetitions
of a quiet cell the spread is tiny, and a 0.5% wobble is not worth a warning. The same floor
applies to the gap of a bimodal cell."""
BIMODAL_LEVEL = 0.02
"""Share of clean cells called bimodal. Twice ``OUTLIER_LEVEL``: at n = 5 one slow repetition
in five is then found 83% of the time rather than 63% (CV 2%, 30% slower)."""
BIMODAL_MIN_N = 4
"""At 3 repetitions the spread within a group rests on one degree of freedom: even a third of
them 30% slower is found no more often than a clean cell is flagged."""
NULL_SAMPLES = 20_000
NULL_VALUES = 1_000_000
"""Clean samples drawn per threshold: ``NULL_SAMPLES`` of n up to 50, this many values beyond
(a quantile of 20,000 draws flags clean cells within ±0.1 points of the level asked for)."""
CI_TARGET = 0.03
"""Default half-width a cell's interval should reach (relative to the mean): ±3%."""
MAX_REPETITIONS = 30
"""Most repetitions ``needs_more`` asks for, and the most the report advises."""
ADAPTIVE_MIN_N = 5
"""Repetitions before a narrow interval may stop adaptive repetitions: stopping at 3 when the
spread happens to be small takes the coverage of the 95% interval down to 90% (CV 5%, target
±3%, at most 10); from 5 it stays between 92% and 95% (simulated: tests/test_cell_statistics)."""
TREND_MIN_N = 5
"""Repetitions before the order is tested for a trend: Kendall's test of n values in order
cannot reach p < 0.05 below 5 (its smallest two-sided p is 1/3 at n = 3, 1/12 at 4; 1/60 at
5, 1/360 at 6), so with fewer there is no power at all; at 5 it can flag only in a run of at
most 2 headline figures (Holm), from 6 in runs of up to 17."""
BELOW_RESOLUTION = "below the measurement's resolution"
"""A cell whose repetitions are within half a resolution step of each other."""
RESOLUTION_UNKNOWN = "identical repetitions: resolution unknown"
"""A cell whose repetitions are exactly equal, with no resolution known: no interval."""
IDENTICAL_REL = 1e-9
"""Repetitions whose standard deviation is below this share of their mean are equal: what
remains is the float rounding of the same reading computed two ways (the "±7.43e-12" of three
equal tick counts)."""
NOISY_CV = 0.10
"""Coefficient of variation past which a cell is called noisy."""
ALPHA = 0.05
"""Significance level of the calls made within a run: the report's "differs from the baseline",
a claim settled, a trend, a disk figure above native."""
ALPHA_ACROSS_RUNS = 0.01
"""Family-wise error of the calls made across runs: at most 1 A/A comparison in 100 calls a
regression (``compare``), at most one family of A/A series in 100 gets a false change point
(``changes``, ``history``)."""
POWER = 0.8
"""Probability with which a change of the reported detectable size would be found."""
PRACTICAL = 0.05
"""Changes within ±5% are of no practical importance: a run's figures are called equivalent to
the baseline's only when their interval lies within it, and ``compare`` calls a regression only
beyond it (its ``--threshold``). Whole runs on one host differ by a few %, so a smaller change
is not one to act on from one study, and 5% is the margin compare has always used."""


def _scipy() -> ModuleType:
    """scipy.stats, imported on first use: it takes about a second to import, which every
    hvbench command (``hvbench version`` included) would otherwise pay."""
    import scipy.stats

    return scipy.stats


@functools.cache
def _t_quantile(q: float, df: int) -> float:
    """Student's t quantile, remembered: adaptive repetitions and the simulations that check
    them ask for the same few thousands of times."""
    return float(_scipy().t.ppf(q, df))


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
            half = sem * _t_quantile((1 + confidence) / 2, n - 1)
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


def _left_out_t(x: np.ndarray) -> np.ndarray:
    """Per row of a (samples × n) array, each value's distance from the mean of the others in
    units of their standard deviation (n − 2 degrees of freedom), signed (below them: < 0):
    the suspect does not widen the yardstick it is measured with. Infinite when the others are
    all equal."""
    n = x.shape[-1]
    c = x - x.mean(axis=-1, keepdims=True)  # centred: the others' sum is −c
    others_mean = -c / (n - 1)
    others_ss = np.sum(c * c, axis=-1, keepdims=True) - c * c - c * c / (n - 1)
    sd = np.sqrt(np.maximum(others_ss, 0.0) / (n - 2))
    dist = c - others_mean
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dist != 0, dist / sd, 0.0)


def _gap_t(x: np.ndarray) -> np.ndarray:
    """Per row of a (samples × n) array of sorted values, for each split into the k lowest and
    the n − k highest (k = 1 … n − 1): the gap between the two groups in units of their pooled
    standard deviation (n − 2 degrees of freedom); infinite when both groups are constant."""
    n = x.shape[-1]
    c = x - x.mean(axis=-1, keepdims=True)  # centred: sums of squares without cancellation
    s1, q1 = np.cumsum(c, axis=-1)[..., :-1], np.cumsum(c * c, axis=-1)[..., :-1]
    total_q = np.sum(c * c, axis=-1, keepdims=True)
    k = np.arange(1, n)
    within = q1 - s1**2 / k + (total_q - q1) - s1**2 / (n - k)  # the high group's sum is −s1
    sd = np.sqrt(np.maximum(within, 0.0) / (n - 2))
    gap = np.diff(x, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap > 0, gap / sd, 0.0)


def behind_most(x: np.ndarray) -> np.ndarray:
    """Per (repetitions × instances) table in the last two axes, how far the instance furthest
    below the others of its repetition is, in their standard deviations (``_left_out_t``), in
    more than half of the repetitions: the largest value that most repetitions reach. Starvation
    that rotates puts some instance far below the others in most repetitions; clean instances
    rarely do."""
    per_repetition = (-_left_out_t(x)).max(axis=-1)
    n = x.shape[-2]
    return np.sort(per_repetition, axis=-1)[..., n - (n // 2 + 1)]


_NULL_STATISTICS = {
    "outlier": lambda z: np.abs(_left_out_t(z)).max(axis=-1),
    "bimodal": lambda z: _gap_t(np.sort(z, axis=-1)).max(axis=-1),
    "rotating": behind_most,
}


@functools.cache
def null_threshold(statistic: str, n: int, level: float, k: int = 1) -> float:
    """The value of ``statistic`` ("outlier": the largest ``_left_out_t``; "bimodal": the
    largest ``_gap_t``; "rotating": ``behind_most`` of n repetitions of k instances) that clean
    samples of n normal values (n × k) exceed with probability ``level``. Each is free of
    location and scale (the rotating one per repetition), so one seeded simulation per size
    serves every cell, and a report is the same each time it is made."""
    draws = max(2000, min(NULL_SAMPLES, NULL_VALUES // (n * k)))
    shape = (draws, n) if statistic != "rotating" else (draws, n, k)
    z = np.random.default_rng(SEED + n + 1000 * (k - 1)).normal(size=shape)
    return float(np.quantile(_NULL_STATISTICS[statistic](z), 1 - level))


def outliers(values: np.ndarray) -> tuple[int, ...]:
    """Indexes of values further from the mean of the others, in units of their standard
    deviation, than the furthest of n clean values is with probability ``OUTLIER_LEVEL`` (11.5
    at n = 5, 5.2 at 10), and more than OUTLIER_MIN_REL away from the median.

    A fixed threshold on the modified z-score (3.5, from the median absolute deviation) flagged
    a fifth of clean cells at n = 5; calibrated to 1% it would miss half of the values 20
    standard deviations off, for the MAD of 5 values is itself very noisy. Left out of its own
    yardstick, such a value is found 97% of the time.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < OUTLIER_MIN_N:
        return ()
    far = np.abs(x - np.median(x)) > OUTLIER_MIN_REL * abs(float(np.median(x)))
    t = np.abs(_left_out_t(x))
    return tuple(
        int(i) for i in np.flatnonzero((t > null_threshold("outlier", n, OUTLIER_LEVEL)) & far)
    )


def bimodal(values: np.ndarray) -> tuple[int, ...]:
    """Indexes of the smaller of two groups the values fall into, if they do: the widest gap
    between the sorted values, in units of the spread within the groups on either side of it,
    exceeds what clean normal samples of this size reach with probability ``BIMODAL_LEVEL``,
    and is more than OUTLIER_MIN_REL of the median. A host busy during some repetitions makes
    such a cell (a fifth of them 30% slower: found in 83% of cells at n = 5, all from 8)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < BIMODAL_MIN_N:
        return ()
    order = np.argsort(x, kind="stable")
    t = _gap_t(x[order])
    k = int(np.argmax(t))
    gap = x[order[k + 1]] - x[order[k]]
    if t[k] <= null_threshold("bimodal", n, BIMODAL_LEVEL):
        return ()
    if gap <= OUTLIER_MIN_REL * abs(float(np.median(x))):
        return ()
    low, high = order[: k + 1], order[k + 1 :]
    return tuple(sorted(int(i) for i in (low if len(low) <= len(high) else high)))


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


def identical(std: float | np.ndarray, mean: float | np.ndarray) -> bool | np.ndarray:
    """Repetitions equal but for float rounding (``IDENTICAL_REL``)."""
    return np.asarray(std) <= IDENTICAL_REL * np.abs(mean)


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


@dataclass(frozen=True)
class Trend:
    """The repetitions of a cell against the order they ran in (``trends``)."""

    tau: float
    """Kendall's τ of the values against the repetition index."""
    p_value: float
    """Two-sided, of no trend (exact without ties)."""
    slope: float
    """Theil–Sen's slope relative to the mean: the change a repetition (+0.02 = +2%)."""
    p_holm: float = math.nan
    """``p_value`` adjusted by Holm's step-down over the run's headline figures."""

    @property
    def flagged(self) -> bool:
        return self.p_holm < ALPHA


def trends(series: Sequence[Sequence[float] | np.ndarray]) -> list[Trend | None]:
    """Mann–Kendall's test of each series in the order it ran, as one family: p-values
    adjusted by Holm's step-down over those tested, so that a run of clean series is flagged
    at most ``ALPHA`` of the time. None for a series shorter than ``TREND_MIN_N`` or whose
    values are all equal. Rank-based: one slow repetition does not make a trend, and the test
    holds whatever the noise's distribution (repetitions exchangeable under no trend)."""
    arrays = [np.asarray(x, dtype=float) for x in series]
    found: list[Trend | None] = [None] * len(arrays)
    by_length: dict[int, list[int]] = defaultdict(list)
    for k, x in enumerate(arrays):
        if len(x) >= TREND_MIN_N and np.ptp(x) > 0:
            by_length[len(x)].append(k)
    for idx in by_length.values():
        for k, t in zip(idx, _mann_kendall(np.stack([arrays[k] for k in idx])), strict=True):
            found[k] = t
    adjusted = iter(holm([t.p_value for t in found if t is not None]).tolist())
    return [None if t is None else replace(t, p_holm=next(adjusted)) for t in found]


def _mann_kendall(x: np.ndarray) -> list[Trend]:
    """Kendall's τ-b of each row of a (series × n) array against its index, with the p-value
    of S (pairs in order minus pairs out of it): exact without ties (``_kendall_tail``), else
    normal with the variance less what the ties take; matches scipy's kendalltau (to 1e-15
    from 5 to 30 values, with and without ties), in one call for a run's many cells."""
    n = x.shape[1]
    i, j = np.triu_indices(n, 1)
    s = np.sign(x[:, j] - x[:, i]).sum(axis=1).astype(int)
    pairs = n * (n - 1) // 2
    c = (x[:, :, None] == x[:, None, :]).sum(axis=2) - 1  # others equal to each value
    tied_pairs = c.sum(axis=1) // 2  # Σ t(t − 1)/2 over groups of t equal values
    ties = (2 * c * (c - 1) + 9 * c).sum(axis=1)  # Σ t(t − 1)(2t + 5)
    tau = s / np.sqrt(pairs * (pairs - tied_pairs))
    var = (n * (n - 1) * (2 * n + 5) - ties) / 18
    normal = 2 * _scipy().norm.sf(np.abs(s) / np.sqrt(var))
    exact = np.minimum(1.0, 2 * _kendall_tail(n)[(pairs - np.abs(s)) // 2])
    p = np.where(tied_pairs > 0, normal, exact)
    mean = x.mean(axis=1)
    slope = np.median((x[:, j] - x[:, i]) / (j - i), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mean != 0, slope / np.abs(mean), np.nan)
    return [Trend(*v) for v in zip(tau.tolist(), p.tolist(), rel.tolist(), strict=True)]


@functools.cache
def _kendall_tail(n: int) -> np.ndarray:
    """P(S ≥ pairs − 2k), k = 0 … pairs: Kendall's S of n distinct values in random order, S
    being pairs − 2 × the permutation's inversions, whose counts are the coefficients of
    ∏ (1 + z + … + z^(k−1)), k = 2 … n (each factor normalised): the exact null."""
    p = np.ones(1)
    for k in range(2, n + 1):
        p = np.convolve(p, np.full(k, 1.0 / k))
    return np.cumsum(p)


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Welch's two-sided p-value for mean(A) = mean(B): no equal variances assumed. NaN with
    fewer than 2 values on a side (nothing was tested: never call that significant)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) < 2 or len(xb) < 2:
        return math.nan
    delta, variance, df = welch_difference(xa, xb)
    if variance == 0:
        return 1.0 if delta == 0 else 0.0
    return float(2 * _scipy().t.sf(abs(delta) / math.sqrt(variance), df))


class WelchDifference(NamedTuple):
    """A difference of two means, its variance and Welch–Satterthwaite's degrees of freedom."""

    delta: float
    variance: float
    df: float


def welch_difference(a: np.ndarray, b: np.ndarray) -> WelchDifference:
    """mean(B) − mean(A) of two series of at least 2 values, the variance of that difference
    (no equal variances assumed) and Welch–Satterthwaite's degrees of freedom for it (NaN where
    the variance is 0): what Welch's test (``welch``) and a change point's interval
    (``changes``) are made of."""
    na, nb = len(a), len(b)
    delta = float(np.mean(b) - np.mean(a))
    va, vb = float(np.var(a, ddof=1)) / na, float(np.var(b, ddof=1)) / nb
    if va + vb == 0:
        return WelchDifference(delta, 0.0, math.nan)
    return WelchDifference(delta, va + vb, (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)))


@dataclass(frozen=True)
class Ratio:
    """mean(B) / mean(A) of two independent series, with Fieller's interval; or, for a signed
    metric (``difference``), mean(B) − mean(A) in its unit, with Welch's.

    ``low``/``high`` are NaN when a side has fewer than 2 values (not tested), infinite when
    mean(A) is not significantly different from 0 (the ratio is then unbounded).
    """

    estimate: float
    low: float
    high: float
    p_value: float
    """Test of no change (a ratio of 1, a difference of 0) that the interval inverts: p < 1 −
    confidence exactly when the (bounded) interval excludes it."""
    se: float
    """Standard error of mean(B) − mean(A) relative to mean(A): what a change is measured
    against (``detectable``)."""
    df: float
    n_a: int
    n_b: int
    confidence: float
    unresolved: bool = False
    """A side's repetitions are identical and its resolution unknown: its noise cannot be
    told, so nothing was tested (``RESOLUTION_UNKNOWN``)."""
    clipped: bool = False
    """Fieller's set reached below 0, which a ratio of figures that cannot be negative cannot:
    ``low`` is 0 instead (the set within the ratio's possible values holds the truth as often)."""
    difference: bool = False
    """mean(B) − mean(A) rather than their ratio: a signed figure, whose ratio means nothing."""
    scale: float = math.nan
    """|mean(A)|: what a difference is relative to (``relative``)."""

    @property
    def tested(self) -> bool:
        return self.n_a >= 2 and self.n_b >= 2 and not self.unresolved

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def null(self) -> float:
        """The value of no change: a ratio of 1, a difference of 0."""
        return 0.0 if self.difference else 1.0

    def relative(self, x: float) -> float:
        """A value of the estimate as a ratio to mean(A): itself for a ratio, 1 + x/|mean(A)|
        for a difference (a change of 3 MiB from −5 MiB is 1.6)."""
        if not self.difference:
            return x
        return 1 + x / self.scale if self.scale > 0 else math.nan

    @property
    def significant(self) -> bool:
        """The interval excludes no change (the two means differ at 1 − confidence)."""
        return self.tested and self.bounded and (self.low > self.null or self.high < self.null)


def _variances(
    ma: np.ndarray,
    var_a: np.ndarray,
    na: np.ndarray,
    ra: np.ndarray,
    mb: np.ndarray,
    var_b: np.ndarray,
    nb: np.ndarray,
    rb: np.ndarray,
    allowance: float | np.ndarray,
) -> dict[str, np.ndarray]:
    """The variance of each side's mean, as Fieller's interval and the difference's use it: the
    estimated part (sample variance / n; 0 where the resolution's floor binds), the known part
    (the floor resolution²/12 where it binds, the run-to-run allowance), and which pairs can be
    tested at all (2 values a side, neither identical with no resolution known). A side of
    zeros alone is not unresolved: a throughput of 0 is no work done, exactly, whatever the
    tool's resolution, and against a baseline that did work it is a loss of 100%."""
    with np.errstate(invalid="ignore"):
        sa, sb = np.sqrt(var_a), np.sqrt(var_b)
    unresolved = ((na >= 2) & np.isnan(ra) & identical(sa, ma) & (ma != 0)) | (
        (nb >= 2) & np.isnan(rb) & identical(sb, mb) & (mb != 0)
    )
    tested = (na >= 2) & (nb >= 2) & ~unresolved
    with np.errstate(divide="ignore", invalid="ignore"):
        qa = np.where(tested, var_a / na, 0.0)
        qb = np.where(tested, var_b / nb, 0.0)
        fa, fb = np.nan_to_num(ra**2 / 12), np.nan_to_num(rb**2 / 12)
        qa, qb = np.where(qa >= fa, qa, 0.0), np.where(qb >= fb, qb, 0.0)  # estimated parts
        aa, ab = (allowance * ma) ** 2, (allowance * mb) ** 2
    return {
        "va": np.maximum(qa, fa) + aa,
        "vb": np.maximum(qb, fb) + ab,
        "qa": qa,
        "qb": qb,
        "aa": aa,
        "ab": ab,
        "tested": tested,
        "unresolved": unresolved,
    }


def _welch_df(
    v: dict[str, np.ndarray],
    na: np.ndarray,
    nb: np.ndarray,
    theta: np.ndarray,
    allowance_df: float | np.ndarray,
) -> np.ndarray:
    """Welch–Satterthwaite's degrees of freedom of V_B + θ²·V_A: each estimated part has n − 1,
    the allowance its own (infinite where it is given rather than measured), the floors none."""
    with np.errstate(divide="ignore", invalid="ignore"):
        estimated = (
            v["qb"] ** 2 / np.maximum(nb - 1, 1)
            + theta**4 * v["qa"] ** 2 / np.maximum(na - 1, 1)
            + np.where(np.isfinite(allowance_df), (v["ab"] + theta**2 * v["aa"]) ** 2, 0.0)
            / allowance_df
        )
        total = v["vb"] + theta**2 * v["va"]
        return np.where(estimated > 0, total**2 / estimated, np.inf)


def fieller(
    mean_a: np.ndarray,
    var_a: np.ndarray,
    n_a: np.ndarray,
    mean_b: np.ndarray,
    var_b: np.ndarray,
    n_b: np.ndarray,
    confidence: float = CONFIDENCE,
    allowance: float | np.ndarray = 0.0,
    resolution_a: np.ndarray | None = None,
    resolution_b: np.ndarray | None = None,
    allowance_df: float | np.ndarray = math.inf,
    difference: bool | np.ndarray = False,
) -> dict[str, np.ndarray]:
    """Fieller's interval of mean(B)/mean(A), vectorised over arrays of series' statistics;
    where ``difference``, Welch's interval of mean(B) − mean(A) instead (a signed figure).

    ``var_*`` are the series' sample variances (n − 1). The interval is every θ for which
    (mean(B) − θ·mean(A))² ≤ t²·(V_B + θ²·V_A), V being the variance of each mean, t Student's
    quantile at Welch–Satterthwaite's degrees of freedom for that variance at the estimated
    ratio: unlike dividing B's interval by mean(A), it carries both series' noise. It is
    unbounded when mean(A)² ≤ t²·V_A (the denominator is not significantly non-zero).
    ``allowance`` adds a relative standard deviation of each mean (run-to-run variation,
    ``compare``) to V_A and V_B: known where ``allowance_df`` is infinite, else estimated with
    that many degrees of freedom (measured from earlier runs), which enter Welch's. A
    difference's variance is V_B + V_A, its allowance relative to each side's mean too.
    ``resolution_*`` (of each mean; NaN where unknown) floor V at resolution²/12, known too
    where it binds; a side whose values are identical with no resolution is not tested
    (``unresolved``). Returns arrays estimate, low, high, p_value, se, df and unresolved; NaN
    where a side has fewer than 2 values or is unresolved.
    """
    ma, mb = np.asarray(mean_a, dtype=float), np.asarray(mean_b, dtype=float)
    na, nb = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    unknown = np.full(np.shape(ma), np.nan)
    ra = unknown if resolution_a is None else np.asarray(resolution_a, dtype=float)
    rb = unknown if resolution_b is None else np.asarray(resolution_b, dtype=float)
    v = _variances(
        ma,
        np.asarray(var_a, dtype=float),
        na,
        ra,
        mb,
        np.asarray(var_b, dtype=float),
        nb,
        rb,
        np.asarray(allowance, dtype=float),
    )
    va, vb, tested = v["va"], v["vb"], v["tested"]
    diff = np.broadcast_to(np.asarray(difference, dtype=bool), np.shape(ma))
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(ma != 0, mb / ma, np.nan)
        th = np.where(diff, 1.0, np.nan_to_num(theta, nan=1.0))
        df = _welch_df(v, na, nb, th, np.asarray(allowance_df, dtype=float))
        t = _scipy().t.ppf((1 + confidence) / 2, df)
        quad = ma**2 - t**2 * va  # > 0: mean(A) is significantly non-zero, the set is bounded
        root = np.sqrt(np.maximum(t**2 * (vb * quad + mb**2 * va), 0.0))
        spread = np.sqrt(va + vb)
        low = np.where(
            diff, mb - ma - t * spread, np.where(quad > 0, (ma * mb - root) / quad, -np.inf)
        )
        high = np.where(
            diff, mb - ma + t * spread, np.where(quad > 0, (ma * mb + root) / quad, np.inf)
        )
        stat = np.where(spread > 0, np.abs(mb - ma) / spread, np.where(mb == ma, 0.0, np.inf))
        p = 2 * _scipy().t.sf(stat, df)
        se = np.abs(spread / ma)
    nan = np.full(np.shape(ma), np.nan)
    return {
        "estimate": np.where(diff, mb - ma, theta),
        "low": np.where(tested, low, nan),
        "high": np.where(tested, high, nan),
        "p_value": np.where(tested, p, nan),
        "se": np.where(tested, se, nan),
        "df": np.where(tested, df, nan),
        "unresolved": v["unresolved"],
    }


Resolutions = tuple[float | None, float | None]
"""The resolution of each side's mean (A, B); None where unknown."""


def ratios(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    confidence: float = CONFIDENCE,
    allowance: float | Sequence[float] = 0.0,
    resolutions: Sequence[Resolutions] | None = None,
    allowance_df: float | Sequence[float] = math.inf,
    difference: bool | Sequence[bool] = False,
) -> list[Ratio]:
    """``Ratio`` of mean(B)/mean(A) for each (A, B) pair of series, in one vectorised call
    (``difference``: mean(B) − mean(A), for the signed ones). A ratio of series that cannot be
    negative (no value below 0 on either side) is never below 0: Fieller's lower bound is
    clipped there, and said to be (``Ratio.clipped``)."""
    if not pairs:
        return []
    arrays = [(np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for a, b in pairs]
    (mean_a, var_a, n_a), (mean_b, var_b, n_b) = (
        moments([pair[side] for pair in arrays]) for side in (0, 1)
    )
    res = np.array(
        [(math.nan, math.nan)] * len(pairs) if resolutions is None else resolutions,
        dtype=float,  # None becomes NaN: unknown
    ).reshape(len(pairs), 2)
    diff = np.broadcast_to(np.asarray(difference, dtype=bool), (len(pairs),))
    out = fieller(
        mean_a,
        var_a,
        n_a,
        mean_b,
        var_b,
        n_b,
        confidence,
        np.broadcast_to(np.asarray(allowance, dtype=float), (len(pairs),)),
        res[:, 0],
        res[:, 1],
        np.broadcast_to(np.asarray(allowance_df, dtype=float), (len(pairs),)),
        diff,
    )
    clipped = ~diff & (out["low"] < 0)
    for i in np.flatnonzero(clipped):  # rare: only where Fieller's set reaches below 0
        clipped[i] = not any((x < 0).any() for x in arrays[i])
    out["low"] = np.where(clipped, 0.0, out["low"])
    keys = ("estimate", "low", "high", "p_value", "se", "df", "unresolved")
    columns = [out[k].tolist() for k in keys]
    extra = zip(
        n_a.tolist(),
        n_b.tolist(),
        clipped.tolist(),
        diff.tolist(),
        np.abs(mean_a).tolist(),
        strict=True,
    )
    return [
        Ratio(
            estimate,
            low,
            high,
            p,
            se,
            df,
            n_a=int(na),
            n_b=int(nb),
            confidence=confidence,
            unresolved=unresolved,
            clipped=clip,
            difference=d,
            scale=scale,
        )
        for (estimate, low, high, p, se, df, unresolved), (na, nb, clip, d, scale) in zip(
            zip(*columns, strict=True), extra, strict=True
        )
    ]


class Moments(NamedTuple):
    """Per series: mean, sample variance and length."""

    mean: np.ndarray
    var: np.ndarray
    n: np.ndarray


def moments(series: list[np.ndarray]) -> Moments:
    """Mean, sample variance (NaN below 2 values) and length of each series, computed at once
    on a NaN-padded matrix (``compare`` and its simulations judge hundreds at a time)."""
    n = np.array([len(x) for x in series])
    table = np.full((len(series), max(1, int(n.max()))), np.nan)
    for i, x in enumerate(series):
        table[i, : len(x)] = x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # empty or single-value rows: NaN
        mean = np.nanmean(table, axis=1)
        var = np.where(n > 1, np.nanvar(table, axis=1, ddof=1), np.nan)
    return Moments(mean, var, n)


def ratio(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    allowance: float = 0.0,
    resolutions: Resolutions = (None, None),
    difference: bool = False,
) -> Ratio:
    """mean(B)/mean(A) with Fieller's interval, or mean(B) − mean(A) with Welch's where
    ``difference`` (see ``fieller``)."""
    pair = (np.asarray(a), np.asarray(b))
    return ratios([pair], confidence, allowance, [resolutions], difference=difference)[0]


NOT_TESTED = "not tested"
LOSS = "loss"
GAIN = "gain"
EQUIVALENT = "no significant difference"
INCONCLUSIVE = "inconclusive"


def reading(low: float, high: float, tested: bool, threshold: float = PRACTICAL) -> str:
    """What an interval of a ratio (1 = no change, above 1 = better) lets one say.

    A loss or a gain when it excludes 1; no significant difference only when it lies within
    1 ± ``threshold`` (an equivalence test read off the interval, like TOST); otherwise it
    still admits a change that matters and is inconclusive. Fewer than 2 values a side:
    nothing was tested.
    """
    if not tested:
        return NOT_TESTED
    if not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE
    if high < 1:
        return LOSS
    if low > 1:
        return GAIN
    return EQUIVALENT if within(low, high, threshold) else INCONCLUSIVE


def within(low: float, high: float, threshold: float) -> bool:
    """The interval of a ratio lies within 1 ± threshold: any change it admits is negligible."""
    return 1 - threshold <= low and high <= 1 + threshold


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest of m is multiplied by m − k + 1,
    then made non-decreasing. Rejecting where the adjusted p < α keeps the chance of any false
    call in the family at most α, whatever the dependence between the tests. NaN (untested)
    stays NaN and is not counted in m."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if len(idx) == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = len(order)
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out[order] = np.minimum(stepped, 1.0)
    return out


def detectable(
    se: np.ndarray, df: np.ndarray, alpha: float, threshold: float = 0.0, power: float = POWER
) -> np.ndarray:
    """The smallest relative change found with probability ``power`` by a two-sided test at
    level ``alpha`` whose estimate must also exceed ``threshold``, given the standard error
    ``se`` and degrees of freedom ``df`` of a ``Ratio``: the larger of ncp·se, ncp being the
    noncentrality at which the t test has that power (normal approximation of the noncentral
    t: t·(1 − 1/4df) + z·sqrt(1 + t²/2df), within 2% of the exact value from 2 degrees of
    freedom on), and threshold + z·se. NaN where nothing was tested."""
    t = _scipy().t.ppf(1 - alpha / 2, df)
    z = float(_scipy().norm.ppf(power))
    with np.errstate(divide="ignore", invalid="ignore"):
        ncp = t * (1 - 1 / (4 * df)) + z * np.sqrt(1 + t**2 / (2 * df))
    smallest: np.ndarray = np.maximum(ncp * se, threshold + z * se)
    return smallest


MAX_RUNS = 20
"""Most runs a side ``runs_to_settle`` considers."""


class RunToRun(NamedTuple):
    """A run's relative run-to-run standard deviation and its degrees of freedom."""

    sd: float
    df: float


def run_to_run(means: np.ndarray, variances: np.ndarray) -> RunToRun:
    """The run-to-run standard deviation of a run's mean, relative, from earlier runs: a
    (runs × metrics) array of each run's mean of each metric (NaN where a run lacks one) and the
    variance of each of those means from its own repetitions (NaN where unknown: counted as 0).
    Per metric, the variance of its run means less what their repetitions already carry (one
    way ANOVA's between-run component), relative to its mean squared; pooled over the metrics,
    each weighted by its runs − 1, and not below 0. Its degrees of freedom are the runs' − 1,
    not the metrics' sum: a run's offset is mostly shared by its metrics (the host was slower
    for the whole run), so 10 metrics of 2 runs measure it once, not 10 times (counted per
    metric, A/A comparisons of 10 metrics called false regressions in 4.6% with 2 earlier runs
    at a shared 3%). Returns (standard deviation, degrees of freedom); (NaN, 0) where no metric
    has 2 runs."""
    y = np.asarray(means, dtype=float)
    w = np.nan_to_num(np.asarray(variances, dtype=float))
    total, weight = 0.0, 0
    runs = np.zeros(len(y), dtype=bool)
    for col, var in zip(y.T, w.T, strict=True):
        have = np.isfinite(col)
        k = int(have.sum())
        centre = float(np.mean(col[have])) if k else 0.0
        if k < 2 or centre == 0:
            continue
        between = float(np.var(col[have], ddof=1)) - float(np.mean(var[have]))
        total += (k - 1) * between / centre**2
        weight += k - 1
        runs |= have
    if not weight:
        return RunToRun(math.nan, 0.0)
    return RunToRun(math.sqrt(max(total / weight, 0.0)), float(runs.sum() - 1))


def _first_settled(
    se: np.ndarray, df: np.ndarray, counts: np.ndarray, threshold: float, confidence: float
) -> list[int | None]:
    """Per row of (figures × counts) standard errors and degrees of freedom, the first count at
    which an unchanged figure's interval lies within ±threshold with probability ``POWER`` (the
    estimate strays from 0 by less than threshold − t·se that often); None where none does."""
    t = _scipy().t.ppf((1 + confidence) / 2, df)
    z = _scipy().norm.ppf((1 + POWER) / 2)
    with np.errstate(invalid="ignore"):
        ok = (t + z) * se <= threshold
    return [int(counts[row.argmax()]) if row.any() else None for row in ok]


def repetitions_to_settle(
    within: Sequence[float] | np.ndarray,
    allowance: Sequence[float] | np.ndarray,
    threshold: float,
    confidence: float,
    allowance_df: Sequence[float] | np.ndarray | float = math.inf,
) -> list[int | None]:
    """Per figure, the repetitions a run, one run a side, that would show it, were it unchanged,
    within ±threshold ``POWER`` of the time, at a relative standard deviation ``within`` of a
    repetition and the run-to-run ``allowance`` (``fieller``'s variance and degrees of
    freedom); None where no count up to ``MAX_REPETITIONS`` would (the allowance alone forbids
    it) or the spread is unknown."""
    n = np.arange(2, MAX_REPETITIONS + 1, dtype=float)
    w = np.asarray(within, dtype=float)
    a = np.asarray(allowance, dtype=float)
    a_df = np.broadcast_to(np.asarray(allowance_df, dtype=float), w.shape)
    z = _scipy().norm.ppf([(1 + confidence) / 2, (1 + POWER) / 2]).sum()
    hope = np.flatnonzero(z * np.sqrt(2) * a < threshold)  # else no n would: not even ∞
    out: list[int | None] = [None] * len(w)
    if not len(hope):
        return out
    w, a, a_df = w[hope, None], a[hope, None], a_df[hope, None]
    part = w**2 / n
    total = 2 * part + 2 * a**2
    with np.errstate(divide="ignore", invalid="ignore"):
        estimated = 2 * part**2 / (n - 1) + np.where(np.isfinite(a_df), (2 * a**2) ** 2 / a_df, 0.0)
        df = np.where(estimated > 0, total**2 / estimated, np.inf)
    for i, k in zip(
        hope, _first_settled(np.sqrt(total), df, n, threshold, confidence), strict=True
    ):
        out[int(i)] = k
    return out


def runs_to_settle(
    per_run: Sequence[float] | np.ndarray, threshold: float, confidence: float
) -> list[int | None]:
    """Per figure, the runs a side, each one observation (its mean), that would show it, were it
    unchanged, within ±threshold ``POWER`` of the time, at a relative standard deviation
    ``per_run`` of a run's mean; None where no count up to ``MAX_RUNS`` would."""
    k = np.arange(2, MAX_RUNS + 1, dtype=float)
    se = np.asarray(per_run, dtype=float)[:, None] * np.sqrt(2 / k)
    return _first_settled(se, 2 * k - 2, k, threshold, confidence)


def needs_more(
    values: Sequence[float],
    ci_target: float = CI_TARGET,
    *,
    min_count: int = ADAPTIVE_MIN_N,
    max_count: float = MAX_REPETITIONS,
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
    x = np.asarray(values, dtype=float)
    low, high = confidence_interval(x)
    mean = abs(float(np.mean(x)))
    return mean > 0 and math.isfinite(low) and (high - low) / 2 / mean > ci_target


def repetitions_for(cv: float, ci_target: float, confidence: float = CONFIDENCE) -> int:
    """About how many repetitions bring Student's interval of the mean to ±``ci_target`` at
    this CV (the smallest n with t(n − 1)·CV/√n ≤ target); at least 2."""
    if not math.isfinite(cv) or cv <= 0:
        return 2
    n = max(2, math.ceil((1.96 * cv / ci_target) ** 2))
    while _t_quantile((1 + confidence) / 2, n - 1) * cv / math.sqrt(n) > ci_target:
        n += 1
    return n


def geometric_mean(values: Sequence[float] | np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Geometric mean; NaN if any value is not positive (a score of 0 has no ratio)."""
    x = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.exp(np.mean(np.log(np.where(x > 0, x, np.nan)), axis=axis))
    return float(out) if np.ndim(out) == 0 else out


def count_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval of the mean count a repetition (events: failures, retransmits): Poisson's exact
    (Garwood's) interval of the total, a repetition, which never reaches below 0 and is not
    empty at a count of 0 (0 in 5 repetitions: 0–0.74); widened to Student's, floored at 0,
    where the repetitions vary more than Poisson counts do (bursts: 0, 3, 0, 0, 12)."""
    x = np.asarray(values, dtype=float)
    n, total = len(x), float(np.sum(x))
    if n == 0:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    chi2 = _scipy().chi2
    low = float(chi2.ppf(tail, 2 * total)) / 2 / n if total > 0 else 0.0
    high = float(chi2.ppf(1 - tail, 2 * total + 2)) / 2 / n
    if n >= 2 and np.ptp(x) > 0:
        t_low, t_high = confidence_interval(x, confidence)
        low, high = min(low, max(t_low, 0.0)), max(high, t_high)
    return low, high
