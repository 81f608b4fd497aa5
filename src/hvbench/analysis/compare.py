"""Runs side by side: is B faster or slower than A, and is that more than noise?

Each metric's change mean(B)/mean(A) − 1 gets Fieller's interval at 1 − ``alpha`` (99%: a CI
gate must not cry wolf). What one observation is:

- **one run per side**: a repetition. Repetitions of one run share that run's host state, and
  whole runs on one host differ by a few %, so a run-to-run **allowance** (the relative standard
  deviation of a run's mean between runs, ``ALLOWANCE`` unless ``--allowance``) is added to each
  side's variance: without it two runs of the same thing read as a significant change.
- **several runs per side**: a run's mean; the runs' spread then measures the run-to-run
  variation itself, and is reported so that single-run comparisons can use it as allowance.

Verdicts: **regression** / **improvement** when Welch's test passes Holm's step-down at
``alpha`` within its family and the change exceeds the threshold (5%) in the metric's worse /
better direction; **no significant change** when the interval lies within ±threshold (**below
threshold** if the test passed nevertheless); **inconclusive** when the interval still admits a
change beyond the threshold; **not tested** with fewer than 2 observations on a side. Two
families: the headline metrics (those the workloads flag and the run's verdicts state: the cpu
composite, throughputs, kernbench's elapsed time) decide the exit code; the other metrics are
reported, never gating. Holm keeps the chance of any false regression in a family at most
``alpha``, however many metrics it holds.

Comparing two platforms interleaved in one study (A and B builds as two platforms) is sounder
than comparing runs: their repetitions share the host's state, and no allowance is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.stats import (
    INCONCLUSIVE,
    NOT_TESTED,
    PRACTICAL,
    Ratio,
    Resolutions,
    Summary,
    detectable,
    holm,
    ratios,
    summarize_many,
    within,
)
from hvbench.errors import HvbenchError

ALPHA = 0.01
"""Family-wise error: at most 1 A/A comparison in 100 calls a regression."""
THRESHOLD = PRACTICAL
ALLOWANCE = 0.03
"""Run-to-run standard deviation of a run's mean, relative, assumed when each side is one run:
a few % on shared hosts. Measure a host's own by comparing several runs per side."""

REGRESSION = "regression"
IMPROVEMENT = "improvement"
BELOW_THRESHOLD = "below threshold"
NO_CHANGE = "no significant change"
VERDICTS = (REGRESSION, IMPROVEMENT, INCONCLUSIVE, NOT_TESTED, BELOW_THRESHOLD, NO_CHANGE)
"""Every verdict, the most pressing first."""

Key = tuple[str, str, int, str]
"""(platform, workload, instance count, metric)."""


@dataclass(frozen=True)
class Judged:
    """One metric's statistics and verdict within its family."""

    ratio: Ratio
    """mean(B) / mean(A) with Fieller's interval at 1 − alpha."""
    p_holm: float
    """Welch's p-value adjusted by Holm's step-down over the family."""
    detectable: float
    """The smallest relative change that would be called a regression 80% of the time, were it
    the family's only one: at level alpha/m (Holm's first step) and beyond the threshold. It
    takes the data's standard error for the truth, so it is a little optimistic: at 10
    repetitions such a change was found 75% of the time in simulation."""
    verdict: str


def judge(
    r: Ratio,
    p_holm: float,
    higher_is_better: bool,
    alpha: float = ALPHA,
    threshold: float = THRESHOLD,
) -> str:
    """The verdict of one metric (see the module's docstring)."""
    if not r.tested:
        return NOT_TESTED
    change = r.estimate - 1
    if p_holm < alpha and r.bounded and abs(change) > threshold:
        worse = change < 0 if higher_is_better else change > 0
        return REGRESSION if worse else IMPROVEMENT
    if r.bounded and within(r.low, r.high, threshold):
        return BELOW_THRESHOLD if p_holm < alpha else NO_CHANGE
    return INCONCLUSIVE


def judge_family(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    higher_is_better: Sequence[bool],
    threshold: float = THRESHOLD,
    alpha: float = ALPHA,
    allowance: float = 0.0,
    resolutions: Sequence[Resolutions] | None = None,
) -> list[Judged]:
    """The statistical core of ``compare``: (A, B) observations of each metric of one family,
    judged together (Holm's step-down over the family); ``resolutions``: of each side's mean
    (``stats.fieller``)."""
    rs = ratios(pairs, 1 - alpha, allowance, resolutions)
    adjusted = holm([r.p_value for r in rs]).tolist()
    m = max(1, sum(math.isfinite(p) for p in adjusted))
    found = detectable(
        np.array([r.se for r in rs]), np.array([r.df for r in rs]), alpha / m, threshold
    ).tolist()
    return [
        Judged(r, p, d, judge(r, p, hib, alpha, threshold))
        for r, p, d, hib in zip(rs, adjusted, found, higher_is_better, strict=True)
    ]


@dataclass
class Change:
    """One metric of one (platform, workload, instance count) on both sides."""

    platform: str
    workload: str
    instances: int
    name: str
    unit: str
    higher_is_better: bool
    a: Summary
    b: Summary
    """The observations of each side: repetitions of one run, or several runs' means."""
    headline: bool
    """In the gating family."""
    judged: Judged

    @property
    def verdict(self) -> str:
        return self.judged.verdict

    @property
    def change(self) -> float:
        """mean(B) / mean(A) − 1."""
        return self.judged.ratio.estimate - 1

    @property
    def ci_low(self) -> float:
        return self.judged.ratio.low - 1

    @property
    def ci_high(self) -> float:
        return self.judged.ratio.high - 1

    @property
    def better(self) -> float:
        """The change in the metric's good direction (+0.10 = 10% better)."""
        return self.change if self.higher_is_better else -self.change


@dataclass
class Comparison:
    a: list[RunAnalysis]
    b: list[RunAnalysis]
    alpha: float
    threshold: float
    allowance: float
    """The allowance used (0 when runs are the unit)."""
    changes: list[Change]
    only_a: list[str]
    only_b: list[str]
    work_apart: dict[str, str] = field(default_factory=dict)
    """Per workload (label) whose settings differ between A and B, what differs: the work a
    calibration sized for each run's host (``scale: auto``), or a study edited between runs.
    Its changes then measure the work as well as the platforms."""
    run_spread: float | None = None
    """With several runs per side: the median over metrics of the runs' pooled relative standard
    deviation (an upper bound of the run-to-run allowance, within-run noise included)."""

    @property
    def by_run(self) -> bool:
        return len(self.a) > 1

    @staticmethod
    def label(runs: list[RunAnalysis]) -> str:
        return ",".join(r.run_id for r in runs)

    def family(self, headline: bool) -> list[Change]:
        return [c for c in self.changes if c.headline == headline]

    @property
    def regressions(self) -> list[Change]:
        """Regressions of headline metrics: what fails the gate."""
        return [c for c in self.family(True) if c.verdict == REGRESSION]

    @property
    def unsettled(self) -> list[Change]:
        """Headline metrics that are inconclusive or not tested."""
        return [c for c in self.family(True) if c.verdict in (INCONCLUSIVE, NOT_TESTED)]

    @property
    def exit_code(self) -> int:
        """1: a headline regression; 3: none, but a headline metric inconclusive; else 0."""
        return 1 if self.regressions else 3 if self.unsettled else 0


def _index(runs: list[RunAnalysis]) -> dict[Key, list[MetricResult]]:
    """The metrics every run of a side has, each with its result in every run."""
    keyed = [
        {(r.cell.platform, r.cell.workload, r.cell.instances, r.name): r for r in run.results}
        for run in runs
    ]
    return {k: [d[k] for d in keyed] for k in keyed[0] if all(k in d for d in keyed)}


def _work_apart(runs_a: list[RunAnalysis], runs_b: list[RunAnalysis]) -> dict[str, str]:
    """The workloads whose settings differ between the two sides' runs, each with the first
    settings that differ ("work.xz 3 → 4"), from the cells both sides measured."""

    def settings(runs: list[RunAnalysis]) -> dict[str, list[dict]]:
        seen: dict[str, list[dict]] = {}
        for run in runs:
            for cell in run.cells:
                found = seen.setdefault(cell.workload, [])
                if cell.workload_settings not in found:
                    found.append(cell.workload_settings)
        return seen

    in_a, in_b = settings(runs_a), settings(runs_b)
    apart = {}
    for workload in in_a.keys() & in_b.keys():
        a, b = in_a[workload], in_b[workload]
        if a == b:
            continue
        flat_a, flat_b = _flat(a[0]), _flat(b[0])
        keys = sorted(k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k) != flat_b.get(k))
        shown = [f"{k} {flat_a.get(k, '-')} → {flat_b.get(k, '-')}" for k in keys[:4]]
        more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
        within = " (and between runs of one side)" if len(a) > 1 or len(b) > 1 else ""
        apart[workload] = ", ".join(shown) + more + within if keys else "within a side"
    return dict(sorted(apart.items()))


def _flat(settings: dict, prefix: str = "") -> dict[str, object]:
    """Nested settings as dotted keys: {"work": {"xz": 3}} → {"work.xz": 3}."""
    out: dict[str, object] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _spread(a: np.ndarray, b: np.ndarray) -> float:
    """Pooled standard deviation of two sides' run means, relative to A's mean."""
    pooled = ((len(a) - 1) * np.var(a, ddof=1) + (len(b) - 1) * np.var(b, ddof=1)) / (
        len(a) + len(b) - 2
    )
    return float(np.sqrt(pooled) / abs(np.mean(a))) if np.mean(a) else np.nan


def compare(
    a: RunAnalysis | Sequence[RunAnalysis],
    b: RunAnalysis | Sequence[RunAnalysis],
    threshold: float = THRESHOLD,
    alpha: float = ALPHA,
    allowance: float | None = None,
) -> Comparison:
    """Compare every metric both sides share (per-instance figures). One run a side: the
    repetitions with ``allowance`` (default ``ALLOWANCE``); several: the runs' means."""
    runs_a = [a] if isinstance(a, RunAnalysis) else list(a)
    runs_b = [b] if isinstance(b, RunAnalysis) else list(b)
    if not runs_a or not runs_b:
        raise HvbenchError("compare: name at least one run on each side")
    by_run = max(len(runs_a), len(runs_b)) > 1
    if by_run and min(len(runs_a), len(runs_b)) < 2:
        raise HvbenchError(
            f"compare: {len(runs_a)} run(s) against {len(runs_b)}: give one run per side, or at "
            "least two per side (each run then counts as one observation)"
        )
    if by_run and allowance is not None:
        raise HvbenchError(
            "compare: --allowance is for one run per side; with several runs per side their "
            "own spread measures the run-to-run variation"
        )
    allowance = 0.0 if by_run else ALLOWANCE if allowance is None else allowance
    in_a, in_b = _index(runs_a), _index(runs_b)
    shared = [k for k in in_a if k in in_b]
    headline = {k for k, rs in in_a.items() if rs[0].headline}

    def observations(rs: list[MetricResult]) -> np.ndarray:
        return np.array([r.single.mean for r in rs]) if by_run else rs[0].single_values

    def resolution(rs: list[MetricResult]) -> float | None:
        """Of a side's mean: one run's, or the mean of the runs' (their means' mean)."""
        steps = [r.single.resolution for r in rs]
        return None if None in steps else float(np.mean(steps))

    obs = {k: (observations(in_a[k]), observations(in_b[k])) for k in shared}
    steps = {k: (resolution(in_a[k]), resolution(in_b[k])) for k in shared}
    if by_run:
        summaries = iter(
            summarize_many(
                [x for k in shared for x in obs[k]], [q for k in shared for q in steps[k]]
            )
        )
        sides = {k: (next(summaries), next(summaries)) for k in shared}
    else:
        sides = {k: (in_a[k][0].single, in_b[k][0].single) for k in shared}
    judged: dict[Key, Judged] = {}
    for gating in (True, False):
        keys = [k for k in shared if (k in headline) == gating]
        family = judge_family(
            [obs[k] for k in keys],
            [in_a[k][0].higher_is_better for k in keys],
            threshold,
            alpha,
            allowance,
            [steps[k] for k in keys],
        )
        judged.update(zip(keys, family, strict=True))
    changes = [
        Change(
            platform=k[0],
            workload=k[1],
            instances=k[2],
            name=k[3],
            unit=in_a[k][0].unit,
            higher_is_better=in_a[k][0].higher_is_better,
            a=sides[k][0],
            b=sides[k][1],
            headline=k in headline,
            judged=judged[k],
        )
        for k in shared
    ]
    spreads = [_spread(*obs[k]) for k in shared] if by_run else []
    spreads = [s for s in spreads if np.isfinite(s)]

    def label(runs: list[RunAnalysis], k: Key) -> str:
        return f"{runs[0].label(k[0])} / {k[1]} / {k[2]} inst. / {k[3]}"

    return Comparison(
        a=runs_a,
        b=runs_b,
        alpha=alpha,
        threshold=threshold,
        allowance=allowance,
        changes=changes,
        only_a=[label(runs_a, k) for k in in_a if k not in in_b],
        only_b=[label(runs_b, k) for k in in_b if k not in in_a],
        work_apart=_work_apart(runs_a, runs_b),
        run_spread=float(np.median(spreads)) if spreads else None,
    )
