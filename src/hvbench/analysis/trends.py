"""Trends over a cell's repetitions.

A cell's repetitions in the order they ran are tested for a trend (Kendall's τ against the
repetition index, the Mann–Kendall test, exact without ties), from ``TREND_MIN_N`` repetitions,
with Holm's step-down over the run's headline figures: a figure that drifts as the run goes on
(a host warming up, throttling, load growing) has a mean that depends on when one stops.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hvbench.analysis.holm import holm
from hvbench.analysis.stats import ALPHA, scipy_stats

TREND_MIN_N = 5
"""Repetitions before the order is tested for a trend: Kendall's test of n values in order
cannot reach p < 0.05 below 5 (its smallest two-sided p is 1/3 at n = 3, 1/12 at 4; 1/60 at
5, 1/360 at 6), so with fewer there is no power at all; at 5 it can flag only in a run of at
most 2 headline figures (Holm), from 6 in runs of up to 17."""


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
    normal = 2 * scipy_stats().norm.sf(np.abs(s) / np.sqrt(var))
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
