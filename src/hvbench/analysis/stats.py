"""The ground of the statistics: the levels every call is made at (confidence, significance,
power, the practical margin), scipy loaded once, equal repetitions told apart from float
rounding, and the small tests that belong to no family (a count's interval, a quantile's test,
the geometric mean).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np

CONFIDENCE = 0.95
SEED = 20260521
IDENTICAL_REL = 1e-9
"""Repetitions whose standard deviation is below this share of their mean are equal: what
remains is the float rounding of the same reading computed two ways (the "±7.43e-12" of three
equal tick counts)."""
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


def scipy_stats() -> ModuleType:
    """scipy.stats, imported on first use: it takes about a second to import, which every
    hvbench command (``hvbench version`` included) would otherwise pay."""
    import scipy.stats

    return scipy.stats


@functools.cache
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile, remembered: adaptive repetitions and the simulations that check
    them ask for the same few thousands of times."""
    return float(scipy_stats().t.ppf(q, df))


def identical(std: float | np.ndarray, mean: float | np.ndarray) -> bool | np.ndarray:
    """Repetitions equal but for float rounding (``IDENTICAL_REL``)."""
    return np.asarray(std) <= IDENTICAL_REL * np.abs(mean)


def geometric_mean(values: Sequence[float] | np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Geometric mean; NaN if any value is not positive (a score of 0 has no ratio)."""
    x = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.exp(np.mean(np.log(np.where(x > 0, x, np.nan)), axis=axis))
    return float(out) if np.ndim(out) == 0 else out


BURSTY_MIN_N = 12
"""The fewest repetitions from which counts that vary no more than Poisson's are given Poisson's
interval as theirs: below, bursts of the kind retransmits come in (negative binomial, k 0.2–0.5,
means 3–10 a repetition) pass the test of dispersion too often, on a run of zeros and ones, for
any interval tight enough for Poisson counts to hold them (``count_interval``)."""


class CountInterval(NamedTuple):
    """The interval of a mean count a repetition, and what it rests on (``count_interval``)."""

    low: float
    high: float
    """Poisson's; NaN where the counts are bursty."""
    dispersion: float
    """Variance over mean of the repetitions: about 1 for Poisson counts; NaN below 2 values or
    at a mean of 0."""
    bursty: bool
    """The repetitions vary more than Poisson counts do, at ``ALPHA``: no interval."""
    too_few: bool = False
    """Fewer than ``BURSTY_MIN_N`` repetitions, which cannot tell Poisson counts from bursty
    ones: the interval holds only if the events are independent."""


def count_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> CountInterval:
    """Interval of the mean count a repetition (events: failures, retransmits): Poisson's exact
    (Garwood's) interval of the total, a repetition, which never reaches below 0 and is not
    empty at a count of 0 (0 in 5 repetitions: 0–0.74), and holds for independent events. None
    where the repetitions vary more than Poisson counts do (the index of dispersion, Σ(x −
    x̄)²/x̄, beyond its χ²(n − 1) law at ``ALPHA``): for bursts (0, 3, 0, 0, 12) no interval of
    so few repetitions holds its level (negative binomial counts of k 0.2–0.5, means 3–10:
    Student's covers 65–83% at 3–5 repetitions, the expanded bootstrap 91–93% at 30 and 60).
    Nor does a test of so few tell bursts from Poisson counts: (0, 0, 1) is as likely of either,
    and Poisson's interval, given where the test passed such bursts, missed their mean in 41%,
    34% and 28% of runs at 3, 4 and 5 repetitions (the worst of k 0.2–0.5, means 3–10; 4000
    seeded runs each), 6.5% at 10, 4.3% at 12: below ``BURSTY_MIN_N`` it is marked
    ``too_few``. Milder bursts (k 1–5) it still misses in up to 8% of runs at 12, 5% at 20."""
    x = np.asarray(values, dtype=float)
    n, total = len(x), float(np.sum(x))
    if n == 0:
        return CountInterval(math.nan, math.nan, math.nan, False)
    mean = total / n
    dispersion = float(np.var(x, ddof=1)) / mean if n >= 2 and mean > 0 else math.nan
    if math.isfinite(dispersion) and scipy_stats().chi2.sf(dispersion * (n - 1), n - 1) < ALPHA:
        return CountInterval(math.nan, math.nan, dispersion, True)
    tail = (1 - confidence) / 2
    chi2 = scipy_stats().chi2
    low = float(chi2.ppf(tail, 2 * total)) / 2 / n if total > 0 else 0.0
    high = float(chi2.ppf(1 - tail, 2 * total + 2)) / 2 / n
    return CountInterval(low, high, dispersion, False, n < BURSTY_MIN_N)


class QuantileTest(NamedTuple):
    """A quantile of pooled values with its distribution-free interval, and the test of a bound
    on it (``quantile_test``)."""

    estimate: float
    low: float
    high: float
    """Order statistics; −∞/∞ where too few values lie beyond the quantile to bound it."""
    p_value: float
    """Two-sided, equal-tailed, of the quantile being the bound: at most 1 − confidence exactly
    when the interval excludes it; NaN where no bound was given."""
    n: int


def quantile_test(
    values: np.ndarray, q: float, bound: float = math.nan, confidence: float = CONFIDENCE
) -> QuantileTest:
    """The q-quantile of values drawn independently from one distribution (the ready times of
    every boot of every storm), its interval between two order statistics and the test of a
    bound on it, from nothing but the binomial law of how many values fall below it: of n values,
    K ≤ the quantile is Binomial(n, q), so x_(l) ≤ ξ < x_(u) with probability F(u − 1) − F(l −
    1), and K at the bound tests it exactly (no normal noise assumed; the mean of a few storms'
    own p99s of 100, by contrast, is nearer their p98.5). The estimate is numpy's linear one;
    the p-value NaN without a bound."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    binom = scipy_stats().binom
    tail = (1 - confidence) / 2
    first = int(binom.ppf(tail, n, q))  # the smallest k with F(k) ≥ tail
    l_1 = first if binom.cdf(first, n, q) <= tail else first - 1  # the largest, F(l − 1) ≤ tail
    u_1 = int(binom.ppf(1 - tail, n, q))  # u − 1: the smallest with F(u − 1) ≥ 1 − tail
    low = float(x[l_1]) if l_1 >= 0 else -math.inf  # x_(l), counted from 1
    high = float(x[u_1]) if u_1 < n else math.inf  # x_(u)
    p = math.nan
    if not math.isnan(bound):
        k = int(np.searchsorted(x, bound, side="right"))  # values ≤ the bound
        p = min(1.0, 2 * min(float(binom.cdf(k, n, q)), float(binom.sf(k - 1, n, q))))
    return QuantileTest(float(np.quantile(x, q)), low, high, p, n)
