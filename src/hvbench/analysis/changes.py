"""Change points of a series of run means, each tested so that noise is not reported as one.

A history (``series``) is one figure's run means in order. Where its level moved, ruptures'
binary segmentation (``Binseg``, least-squares cost, on the logarithm of the means: a change is a
ratio) proposes the places, with a penalty of ``PENALTY``·σ²·log n, σ the run-to-run noise
estimated from successive differences (robust to the changes themselves). Binary segmentation
finds the same changes as ruptures' exact PELT on such series and costs a fraction of it (40 ms
against 2.5 s at 1000 runs), which a site of hundreds of series needs.

A proposal is only a candidate: a search over every place picks the largest split of pure
noise, whose two-sample statistic is far beyond Student's. Each candidate is therefore tested
against what a search finds in noise: its statistic (|t| of the log means on either side,
pooled variance, over the stretch between its neighbouring candidates) is set against the
largest such |t| over every split of that many normal values (at least ``MIN_SIDE`` a side),
drawn once per length by a seeded simulation (free of location and scale, like the outlier
rule's thresholds in ``stats``). Series judged together (the headline figures of a study, on
every host) are one family: each of S series is judged at ``ALPHA_ACROSS_RUNS``/S (a series
searched and found clean counts: testing only the survivors of a search would let 40 A/A series
give a false change point a third of the time), its own candidates by Holm's step-down, so that
the chance of any false change point in the family stays at most ``ALPHA_ACROSS_RUNS``, however
many metrics it holds. A candidate is a change point when it passes and its interval excludes no
change. The interval is of the ratio of the geometric means after/before: Welch's t interval of
the difference of the logs, at 1 − ``ALPHA_ACROSS_RUNS``. The null is normal run-to-run noise:
one run far off (a host busy that night) can still read as a change on a stretch of two runs.

A change needs ``MIN_SIDE`` runs after it to be told from one odd run, so a gate on the newest
runs sees it from the second run after it on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hvbench.analysis.holm import holm
from hvbench.analysis.ratios import welch_difference
from hvbench.analysis.stats import ALPHA_ACROSS_RUNS, SEED, scipy_stats

MIN_SIDE = 2
"""Runs on each side of a change point, at least: one run alone is an outlier, not a level."""
MIN_POINTS = 2 * MIN_SIDE
PENALTY = 2.0
"""Binary segmentation stops where a split gains less than PENALTY·σ²·log n (BIC's penalty
for one more mean): generous, since the test that follows judges each candidate."""
GRID = 100
"""Places binary segmentation considers, at most: a longer series is searched every n // GRID
points (ruptures' least-squares cost is quadratic in the length), and each candidate is then
moved to the best split of its stretch (``_tested``)."""
NULL_DRAWS = 20_000
"""Noise series drawn per length: p-values down to 5·10⁻⁵ (``ALPHA_ACROSS_RUNS`` over 200
series); beyond the draws, a bound (``p_value``)."""
MIN_DRAWS = 2_000
NULL_BATCH = 2_000_000
"""Values drawn at once (bounds the memory of a long series' null to 16 MB)."""
EXACT_LENGTHS = 64
"""Stretches up to this long get a null of their own length; longer ones that of the next
length of a grid 10% apart, which is conservative (the largest |t| grows with the length)."""


@dataclass(frozen=True)
class Candidate:
    """One tested candidate: the level of a series moves between ``index`` − 1 and ``index``."""

    index: int
    """The first point after the change."""
    ratio: float
    """Geometric mean of the stretch after / of the stretch before."""
    low: float
    high: float
    """Interval of ``ratio`` at 1 − ``ALPHA_ACROSS_RUNS``."""
    p_value: float
    """Against what a search finds in noise, before the family's adjustment."""
    p_holm: float = math.nan
    """Adjusted for every test of the family (``find``)."""

    @property
    def significant(self) -> bool:
        """Passes the family's adjustment, and the interval excludes no change."""
        return self.p_holm < ALPHA_ACROSS_RUNS and (self.high < 1 or self.low > 1)


def _split_t(x: np.ndarray) -> np.ndarray:
    """Per row of a (samples × m) array, |t| of the two-sample (pooled) statistic of each split
    into the first k and the last m − k values, k = ``MIN_SIDE`` … m − ``MIN_SIDE``."""
    m = x.shape[-1]
    c = x - x.mean(axis=-1, keepdims=True)
    s1 = np.cumsum(c, axis=-1)[..., MIN_SIDE - 1 : m - MIN_SIDE]
    total = np.sum(c * c, axis=-1, keepdims=True)
    k = np.arange(MIN_SIDE, m - MIN_SIDE + 1)
    within = total - s1**2 / k - s1**2 / (m - k)  # the second part's sum is −s1
    sd = np.sqrt(np.maximum(within, 0.0) / (m - 2))
    gap = np.abs(s1 / k + s1 / (m - k))  # mean before − mean after, in absolute value
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap > 0, gap / (sd * np.sqrt(1 / k + 1 / (m - k))), 0.0)


def _null_length(m: int) -> int:
    """The length whose null a stretch of m values is judged by (``EXACT_LENGTHS``)."""
    length = EXACT_LENGTHS
    while length < m:
        length = math.ceil(length * 1.1)
    return m if m <= EXACT_LENGTHS else length


@functools.cache
def _null(m: int) -> np.ndarray:
    """The largest |t| over the splits of m normal values, sorted: ``NULL_DRAWS`` of them up
    to ``EXACT_LENGTHS`` values, fewer beyond (down to ``MIN_DRAWS``), where the Bonferroni
    bound of ``p_value`` takes over sooner: a change in a long stretch stands far out."""
    draws = max(MIN_DRAWS, NULL_DRAWS * EXACT_LENGTHS // max(m, EXACT_LENGTHS))
    rng = np.random.default_rng(SEED + m)
    per_batch = max(1, NULL_BATCH // m)
    out = []
    for start in range(0, draws, per_batch):
        z = rng.normal(size=(min(per_batch, draws - start), m))
        out.append(_split_t(z).max(axis=-1))
    return np.sort(np.concatenate(out))


def p_value(t: float, m: int) -> float:
    """Chance that the best split of m values of pure noise reaches |t| ≥ ``t``. Beyond every
    draw, the Bonferroni bound over the splits (Student's tail times their count), which holds
    for any m."""
    null = _null(_null_length(m))
    beyond = len(null) - int(np.searchsorted(null, t, side="left"))
    if beyond:
        return (beyond + 1) / (len(null) + 1)
    splits = m - 2 * MIN_SIDE + 1
    bound = splits * 2 * float(scipy_stats().t.sf(t, m - 2))
    return min(bound, 1 / (len(null) + 1))


def _noise(y: np.ndarray) -> float:
    """Run-to-run standard deviation of y from its successive differences (median absolute
    deviation, scaled to a normal's σ): a change moves one difference, not the median."""
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return 1.4826 * mad / math.sqrt(2)


def candidates(y: np.ndarray) -> list[int]:
    """ruptures' binary segmentation of ``y``: the first index of each new level."""
    import ruptures

    n = len(y)
    sigma = _noise(y)
    if sigma == 0:  # most successive runs equal: the standard deviation, or nothing moves
        sigma = float(np.std(y, ddof=1))
    if n < MIN_POINTS or sigma == 0:
        return []
    algo = ruptures.Binseg(model="l2", min_size=MIN_SIDE, jump=max(1, n // GRID)).fit(y)
    return [int(b) for b in algo.predict(pen=PENALTY * sigma**2 * math.log(n))[:-1]]


def _tested(y: np.ndarray, lo: int, hi: int) -> Candidate:
    """The best split of the stretch y[lo:hi] between two neighbouring candidates (where the
    candidate between them lies, or has moved to once a neighbour was dropped), tested."""
    ts = _split_t(y[lo:hi][None, :])[0]
    k = int(np.argmax(ts))
    index = lo + MIN_SIDE + k
    before, after = y[lo:index], y[index:hi]
    diff, variance, df = welch_difference(before, after)
    half = 0.0
    if variance > 0:
        half = float(scipy_stats().t.ppf(1 - ALPHA_ACROSS_RUNS / 2, df)) * math.sqrt(variance)
    t = float(ts[k])
    return Candidate(
        index=index,
        ratio=math.exp(diff),
        low=math.exp(diff - half),
        high=math.exp(diff + half),
        p_value=p_value(t, hi - lo) if math.isfinite(t) else 0.0,
    )


def tested_candidates(
    means: Sequence[float] | np.ndarray, level: float = ALPHA_ACROSS_RUNS
) -> list[Candidate]:
    """The tested candidates of one series of run means (all positive), before any adjustment;
    none where it is too short or holds a value that is not above 0 (a ratio means nothing).

    Binary segmentation also splits noise; a false candidate shortens the stretches its
    neighbours are tested on, and costs them power. So the candidate with the largest p-value
    is dropped while that p-value is not below ``level`` (it could not pass), and the others
    tested again on the longer stretches, each at the best split of its stretch (what the null
    is drawn for)."""
    y = np.asarray(means, dtype=float)
    if not testable(y):
        return []
    y = np.log(y)
    found = candidates(y)
    while found:
        tested = []
        for i in range(len(found)):
            lo = found[i - 1] if i else 0
            hi = found[i + 1] if i + 1 < len(found) else len(y)
            tested.append(_tested(y, lo, hi))
            found[i] = tested[-1].index
        worst = max(range(len(tested)), key=lambda i: tested[i].p_value)
        if tested[worst].p_value < level:
            return tested
        del found[worst]
    return []


def testable(y: np.ndarray) -> bool:
    """Long enough, and every mean above 0."""
    return len(y) >= MIN_POINTS and bool(np.all(np.isfinite(y)) and np.all(y > 0))


def find(series: Sequence[Sequence[float]]) -> list[list[Candidate]]:
    """The tested change points of each series of run means, judged as one family: each of
    the S testable series at ``ALPHA_ACROSS_RUNS``/S (Bonferroni: a series searched and found
    clean is a test made too), its own candidates by Holm's step-down within it, so that the
    chance of any false change point among them all stays at most ``ALPHA_ACROSS_RUNS``."""
    arrays = [np.asarray(x, dtype=float) for x in series]
    count = max(1, sum(testable(y) for y in arrays))
    out = []
    for y in arrays:
        found = tested_candidates(y, ALPHA_ACROSS_RUNS / count)
        adjusted = np.minimum(holm([s.p_value for s in found]) * count, 1.0).tolist()
        out.append([replace(s, p_holm=p) for s, p in zip(found, adjusted, strict=True)])
    return out
