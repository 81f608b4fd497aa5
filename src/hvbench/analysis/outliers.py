"""Outlier repetitions and bimodal cells.

Outliers and bimodal cells are judged by statistics whose distribution over clean (normal)
repetitions depends only on n; their thresholds are that distribution's upper quantile, drawn
once per n by a seeded simulation, so that a clean cell is flagged as rarely as ``OUTLIER_LEVEL``
and ``BIMODAL_LEVEL`` say at every n (a fixed threshold flags a fifth of clean cells at n = 5).
"""

from __future__ import annotations

import functools

import numpy as np

from hvbench.analysis.stats import SEED

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
