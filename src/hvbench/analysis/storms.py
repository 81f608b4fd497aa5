"""Boot storms as users read them: per instance count, the time until all instances are ready,
the median and p95 of each instance's ready time and the failures; over the counts, a fitted line
(seconds per added instance) and where the curve bends. A storm is judged by how its cost grows
with the count, which no single cell's figure shows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hvbench.analysis.aggregate import percentile_need
from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.stats import CONFIDENCE, quantile_test, scipy_stats
from hvbench.units import interval_strings

READY = "boot.ready_s"
"""Each instance's boot to ready."""
ALL_READY = "boot.storm.all_ready_s"
"""A storm's start to its last instance ready, one a repetition."""
FAILED = "boot.storm.failed"
"""A storm's failed boots, one count a repetition."""
PERCENTILES = (50, 95)
"""The percentiles of each instance's ready time a storm's table shows."""
BEND = 2.0
"""The curve bends where one more instance costs more than this many times the first."""


@dataclass(frozen=True)
class Percentile:
    """A percentile of every boot of every storm at one count, with its order-statistic
    interval (``stats.quantile_test``: no normal noise assumed), or why it is left out."""

    p: int
    estimate: float
    low: float
    high: float
    n: int
    """The boots it is read from (every instance of every repetition)."""
    shortfall: str | None = None
    """Why it is not shown: "a p95 needs 20 instances behind it, the storm has 8"; None where
    it is."""


@dataclass(frozen=True)
class StormCount:
    """One instance count of a storm: what a user asks of it first (how long until all are
    ready), then how the single boots spread, then what failed."""

    instances: int
    all_ready: MetricResult
    """Its repetitions' all-ready times, their mean and 95% interval in ``single``."""
    percentiles: tuple[Percentile, ...]
    failed: int | None
    """Failed boots over every repetition; None where not recorded."""
    boots: int
    """Boots tried over every repetition (instances × repetitions)."""


@dataclass(frozen=True)
class StormLine:
    """All-ready time against the count, fitted by least squares over every repetition: the
    seconds one more instance adds, with its 95% interval (Student's t, n − 2 degrees of
    freedom), and where the curve bends."""

    slope: float
    low: float
    high: float
    """NaN where n < 3 (no residual to judge the slope's noise by)."""
    intercept: float
    n: int
    """Repetitions fitted (of every count)."""
    bend: int | None
    """The smallest count from which one more instance costs more than ``BEND`` times the
    first (the slope between consecutive counts' mean all-ready against the slope between
    the two smallest); None: no bend within the counts measured."""
    bend_judged: bool
    """Whether a bend could be looked for: three counts or more, and a first slope above 0."""


@dataclass(frozen=True)
class Storm:
    """One platform's boot storm at every count it measured."""

    platform: str
    workload: str
    counts: tuple[StormCount, ...]
    line: StormLine | None
    """None with fewer than two counts (nothing to fit a line through)."""


def fit_line(counts: np.ndarray, values: np.ndarray) -> tuple[float, float, float, float]:
    """(slope, low, high, intercept) of values against counts by ordinary least squares, the
    slope's 95% interval from Student's t with n − 2 degrees of freedom (NaN bounds below 3
    points): every repetition a point, so the interval carries the storms' own noise."""
    x, y = np.asarray(counts, dtype=float), np.asarray(values, dtype=float)
    n = len(x)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    slope = float(dx @ (y - y.mean())) / sxx
    intercept = float(y.mean() - slope * x.mean())
    if n < 3:
        return slope, math.nan, math.nan, intercept
    residuals = y - (intercept + slope * x)
    se = math.sqrt(float(residuals @ residuals) / (n - 2) / sxx)
    t = float(scipy_stats().t.ppf(1 - (1 - CONFIDENCE) / 2, n - 2))
    return slope, slope - t * se, slope + t * se, intercept


def bend(counts: list[int], means: list[float]) -> tuple[int | None, bool]:
    """(the count at which the curve bends, whether a bend could be looked for): the smallest
    count from which the slope to the next count exceeds ``BEND`` times the slope between the
    two smallest. Not judged with fewer than three counts (no second slope), or where the first
    slope is not above 0 (nothing to be twice of)."""
    if len(counts) < 3:
        return None, False
    slopes = [
        (means[i + 1] - means[i]) / (counts[i + 1] - counts[i]) for i in range(len(counts) - 1)
    ]
    first = slopes[0]
    if not first > 0:
        return None, False
    for count, slope in zip(counts[1:], slopes[1:], strict=False):
        if slope > BEND * first:
            return count, True
    return None, True


def _percentiles(ready: MetricResult | None, instances: int) -> tuple[Percentile, ...]:
    every = ready.every if ready is not None else None
    values = every[np.isfinite(every)] if every is not None else np.array([])
    out = []
    for p in PERCENTILES:
        need = percentile_need(p)
        why = None
        if not len(values):
            why = "no instance's ready time recorded"
        elif instances < need:
            why = f"a p{p} needs {need} instances behind it, the storm has {instances}"
        if why is not None:
            out.append(Percentile(p, math.nan, math.nan, math.nan, len(values), why))
            continue
        t = quantile_test(values, p / 100)
        out.append(Percentile(p, t.estimate, t.low, t.high, t.n))
    return tuple(out)


def storms(a: RunAnalysis) -> list[Storm]:
    """Every platform's boot storm in the run (a workload with all-ready times at some count
    above 1), in the run's order of platforms and workloads."""
    out = []
    for w in a.workloads():
        for p in a.platforms:
            cells = []
            for count in a.counts(w):
                r = a.result(p, w, ALL_READY, count)
                values = r.single_values[np.isfinite(r.single_values)] if r is not None else None
                if r is None or values is None or not len(values):
                    continue
                failed = a.result(p, w, FAILED, count)
                cells.append(
                    StormCount(
                        count,
                        r,
                        _percentiles(a.result(p, w, READY, count), count),
                        None if failed is None else int(np.nansum(failed.single_values)),
                        len(values) * count,
                    )
                )
            if not cells or max(c.instances for c in cells) < 2:
                continue
            out.append(Storm(p, w, tuple(cells), _line(cells)))
    return out


def _line(cells: list[StormCount]) -> StormLine | None:
    if len(cells) < 2:
        return None
    xs, ys = [], []
    for c in cells:
        values = c.all_ready.single_values[np.isfinite(c.all_ready.single_values)]
        xs.extend([c.instances] * len(values))
        ys.extend(values)
    slope, low, high, intercept = fit_line(np.array(xs), np.array(ys))
    at, judged = bend([c.instances for c in cells], [c.all_ready.single.mean for c in cells])
    return StormLine(slope, low, high, intercept, len(xs), at, judged)


def estimate_text(estimate: float, low: float, high: float, unit: str = "") -> str:
    """ "3.6 [2.9–4.4]" ("3.6 s [2.9–4.4]" with a unit) by the one rule every figure is printed
    by (``units.interval_strings``); the estimate alone where there is no interval."""
    after = f" {unit}" if unit else ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{estimate:.3g}{after}"
    est, lo, hi = interval_strings(estimate, low, high)
    return f"{est}{after} [{lo}–{hi}]"


def bend_text(line: StormLine) -> str:
    """ "bends at 32", "no bend within the counts measured", or why none was looked for."""
    if line.bend is not None:
        return f"bends at {line.bend}"
    if line.bend_judged:
        return "no bend within the counts measured"
    return "no bend judged (it needs three counts and a first slope above 0)"


def sentence(a: RunAnalysis, storm: Storm) -> str:
    """ "boot storm of container: all ready 3.6 s [2.9–4.4] at 64; 0.052 s [0.047–0.057] per
    added instance; bends at 32": the largest storm, the cost of one more instance, the bend."""
    largest = storm.counts[-1]
    s = largest.all_ready.single
    parts = [f"all ready {estimate_text(s.mean, s.ci_low, s.ci_high, 's')} at {largest.instances}"]
    failed = sum(c.failed or 0 for c in storm.counts)
    if failed:
        boots = sum(c.boots for c in storm.counts)
        parts.append(f"{failed} of {boots} boots failed, over every count")
    if (line := storm.line) is not None:
        per = estimate_text(line.slope, line.low, line.high, "s")
        parts.append(f"{per} per added instance")
        parts.append(bend_text(line))
    return f"{a.title(storm.workload)} storm of {a.label(storm.platform)}: " + "; ".join(parts)


def lines(a: RunAnalysis, workload: str) -> list[str]:
    """A sentence per platform with a storm of this workload (``sentence``)."""
    return [sentence(a, s) for s in storms(a) if s.workload == workload]
