"""How much more data would settle a figure: adaptive repetitions' stopping rule
(``needs_more``), the repetitions or runs an inconclusive figure or comparison needs, the change a
test of this power detects, the run-to-run spread a comparison of single runs allows for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hvbench.analysis.intervals import confidence_interval
from hvbench.analysis.stats import CONFIDENCE, POWER, scipy_stats, t_quantile

CI_TARGET = 0.03
"""Default half-width a cell's interval should reach (relative to the mean): ±3%."""
MAX_REPETITIONS = 30
"""Most repetitions ``needs_more`` asks for, and the most the report advises."""
ADAPTIVE_MIN_N = 5
"""Repetitions before a narrow interval may stop adaptive repetitions: stopping at 3 when the
spread happens to be small takes the coverage of the 95% interval down to 90% (CV 5%, target
±3%, at most 10); from 5 it stays between 92% and 95% (simulated: tests/test_cell_statistics)."""


def detectable(
    se: np.ndarray, df: np.ndarray, alpha: float, threshold: float = 0.0, power: float = POWER
) -> np.ndarray:
    """The smallest relative change found with probability ``power`` by a two-sided test at
    level ``alpha`` whose estimate must also exceed ``threshold``, given the standard error
    ``se`` and degrees of freedom ``df`` of a ``Ratio``: the larger of ncp·se, ncp being the
    noncentrality at which the t test has that power (normal approximation of the noncentral
    t: t·(1 − 1/4df) + z·sqrt(1 + t²/2df), within 2% of the exact value from 2 degrees of
    freedom on), and threshold + z·se. NaN where nothing was tested."""
    t = scipy_stats().t.ppf(1 - alpha / 2, df)
    z = float(scipy_stats().norm.ppf(power))
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
    t = scipy_stats().t.ppf((1 + confidence) / 2, df)
    z = scipy_stats().norm.ppf((1 + POWER) / 2)
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
    z = scipy_stats().norm.ppf([(1 + confidence) / 2, (1 + POWER) / 2]).sum()
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
    while t_quantile((1 + confidence) / 2, n - 1) * cv / math.sqrt(n) > ci_target:
        n += 1
    return n
