"""Runs side by side: is B faster or slower than A, and is that more than noise?

Each metric's change mean(B)/mean(A) − 1 gets Fieller's interval at 1 − ``alpha`` (99%: a CI
gate must not cry wolf); a signed figure (``normalize.signed``: a difference by definition, or
one measured below 0) gets mean(B) − mean(A) in its unit with Welch's instead, its threshold
relative to |mean(A)|. What one observation is:

- **one run per side**: a repetition. Repetitions of one run share that run's host state, and
  whole runs on one host differ by a few %, so a run-to-run **allowance** (the relative standard
  deviation of a run's mean between runs) is added to each side's variance: without it two runs
  of the same thing read as a significant change. It is, in this order: ``--allowance``; 0 when
  both sides are the same run (nothing varies between a run and itself); measured from earlier
  runs of the same study on the same host in the store (``history``: the spread of their run
  means beyond what their repetitions carry, pooled per workload over its headline metrics, its
  degrees of freedom carried into the interval's); else ``ALLOWANCE``, assumed and said to be.
- **several runs per side**: a run's mean; the runs' spread then measures the run-to-run
  variation itself, and is reported so that single-run comparisons can use it as allowance.

Verdicts: **regression** / **improvement** when Welch's test passes Holm's step-down at
``alpha`` within its family and the change exceeds the threshold (5%) in the metric's worse /
better direction; **no significant change** when the interval lies within ±threshold (**below
threshold** if the test passed nevertheless); **inconclusive** when the interval still admits a
change beyond the threshold; **not tested** with fewer than 2 observations on a side. Two
families: the headline metrics (those the workloads flag and the run's verdicts state:
throughputs, kernbench's elapsed time; for a cpu cell, the sub-scores of its composite, see
``gates``) decide the exit code; the other metrics are reported, never gating. Holm keeps the
chance of any false regression in a family at most ``alpha``, however many metrics it holds. The
printed interval is each metric's own (what "no significant change" reads, an intersection–union
test that needs no correction); one that excludes no change while Holm's step-down does not pass
is marked "significant only before correction" (``JudgedMetric.before_correction``), so that no
line reads as a change its verdict denies. Where a verdict is not settled, ``JudgedMetric`` says
what would settle an unchanged metric 80% of the time: repetitions a run, or runs a side.

Comparing two platforms interleaved in one study (A and B builds as two platforms) is sounder
than comparing runs: their repetitions share the host's state, and no allowance is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hvbench.analysis.holm import holm
from hvbench.analysis.intervals import SampleSummary, summarize_many
from hvbench.analysis.model import COMPOSITE, MetricKey, MetricResult, RunAnalysis
from hvbench.analysis.normalize import signed
from hvbench.analysis.ratios import Ratio, Resolutions, moments, ratios
from hvbench.analysis.readings import Reading, within
from hvbench.analysis.settling import detectable, repetitions_to_settle, runs_to_settle
from hvbench.analysis.stats import ALPHA_ACROSS_RUNS, PRACTICAL
from hvbench.errors import HvbenchError

THRESHOLD = PRACTICAL
ALLOWANCE = 0.01
"""Run-to-run standard deviation of a run's mean, relative, assumed when each side is one run
and no earlier run of the study on the host measures it: the largest at which identical data of
a metric with a CV of 1% at 5 repetitions still shows no change beyond 5% (3% would forbid it
for any data: 2.576·√2·3% = 10.9%). It reads the interval and a pass; a regression (or an
improvement) must hold at ``ALARM`` as well."""
ALARM = 0.03
"""Run-to-run standard deviation an assumed allowance's regressions must also hold at: whole
runs on a shared host commonly differ by a few %, and at 1% a host whose runs differ by 3%
would call a false regression in 7 of 10 A/A comparisons of 10 metrics (at 3%: 1 in 100)."""

FEWEST = 3
"""Earlier runs it takes to measure the allowance. Two measure it with 1 degree of freedom
(``settling.run_to_run``), and where their means happen to agree better than their repetitions
say, as 2 runs whose offsets are 3% apart do in 1 comparison of 10, it comes out 0: A/A
comparisons of 10 metrics at a shared 3% then called false regressions in 2.1% (± 0.2%, 5000
simulated); assumed instead (1%, regressions held at 3%), 0.2%."""

OPTION = "--allowance"
MEASURED = "measured"
ASSUMED = "assumed"
SAME_RUN = "same run"
RUNS = "runs"
"""Where an allowance comes from (``Allowance.source``)."""

REGRESSION = "regression"
IMPROVEMENT = "improvement"
BELOW_THRESHOLD = "below threshold"
"""A change the interval shows, wholly within ±threshold: a run's matrix and verdict call it a
small loss or gain by the same rule (``readings.reading``)."""
NO_CHANGE = "no significant change"
VERDICTS = (
    REGRESSION,
    IMPROVEMENT,
    Reading.INCONCLUSIVE,
    Reading.NOT_TESTED,
    BELOW_THRESHOLD,
    NO_CHANGE,
)
"""Every verdict, the most pressing first."""


@dataclass(frozen=True)
class Allowance:
    """The run-to-run allowance a comparison of one run a side adds to each side's variance,
    and where it comes from (``source``: ``OPTION``, ``MEASURED``, ``ASSUMED``, ``SAME_RUN``,
    or ``RUNS`` where runs are the observations and none is added)."""

    value: float
    """Relative standard deviation of a run's mean, for workloads not in ``workloads``."""
    source: str
    df: float = math.inf
    """Degrees of freedom of ``value``: infinite where known (given, assumed)."""
    workloads: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Workload -> (allowance, degrees of freedom) measured from earlier runs."""
    runs: tuple[str, ...] = ()
    """The earlier runs it was measured from."""
    note: str = ""
    """Which runs measured it, or why nothing did."""
    alarm: float | None = None
    """Where ``value`` is assumed: the allowance a regression must hold at as well (``ALARM``)."""

    def of(self, workload: str) -> tuple[float, float]:
        """The allowance of a workload's metrics and its degrees of freedom."""
        return self.workloads.get(workload, (self.value, self.df))

    def alarm_of(self, workload: str) -> float | None:
        """The allowance a regression of a workload's metric must hold at too, where its own
        is assumed; None where it is measured or given."""
        return None if workload in self.workloads else self.alarm


@dataclass(frozen=True)
class JudgedMetric:
    """One metric's statistics and verdict within its family."""

    ratio: Ratio
    """mean(B) / mean(A) with Fieller's interval at 1 − alpha (or, signed, their difference)."""
    p_holm: float
    """Welch's p-value adjusted by Holm's step-down over the family."""
    detectable: float
    """The smallest relative change that would be called a regression 80% of the time, were it
    the family's only one: at level alpha/m (Holm's first step) and beyond the threshold. It
    takes the data's standard error for the truth, so it is a little optimistic: at 10
    repetitions such a change was found 75% of the time in simulation."""
    verdict: str
    before_correction: bool = False
    """The interval excludes no change (Welch's p < alpha) but Holm's step-down over the family
    does not pass: significant only before correction."""
    repetitions: int | None = None
    """Repetitions a run (one run a side, this allowance) that would show this metric, were it
    unchanged, within ±threshold 80% of the time; None where no count up to
    ``settling.MAX_REPETITIONS`` would, or where runs are the observations."""
    runs: int | None = None
    """Runs a side (at this many repetitions each) that would, as ``repetitions``."""
    assumed_only: bool = False
    """Significant (Holm) at the assumed allowance but not at ``ALARM``: a regression or an
    improvement there is inconclusive until the host's run-to-run variation is measured, and
    any other line says that its interval excludes no change only at the assumed allowance."""

    @property
    def settled(self) -> bool:
        """The verdict says what changed, or that nothing did beyond the threshold."""
        return self.verdict not in (Reading.INCONCLUSIVE, Reading.NOT_TESTED)


@dataclass(frozen=True)
class Observed:
    """What one metric brings to its family's judgement (``judge_family``)."""

    a: np.ndarray
    b: np.ndarray
    """Its observations on each side: repetitions of one run, or several runs' means."""
    higher_is_better: bool
    allowance: float = 0.0
    """The run-to-run allowance added to each side's variance (relative)."""
    allowance_df: float = math.inf
    """The allowance's degrees of freedom."""
    resolutions: Resolutions = (None, None)
    """Of each side's mean (``ratios.fieller``)."""
    difference: bool = False
    """Signed: judged by its difference, not its ratio (``normalize.signed``)."""
    alarm: float | None = None
    """Where the allowance is assumed, the one a regression or improvement must hold at too."""


def judge(
    r: Ratio,
    p_holm: float,
    higher_is_better: bool,
    alpha: float = ALPHA_ACROSS_RUNS,
    threshold: float = THRESHOLD,
) -> str:
    """The verdict of one metric (see the module's docstring)."""
    if not r.tested:
        return Reading.NOT_TESTED
    change = r.relative(r.estimate) - 1
    low, high = r.relative(r.low), r.relative(r.high)
    bounded = math.isfinite(low) and math.isfinite(high)
    if p_holm < alpha and bounded and abs(change) > threshold:
        worse = change < 0 if higher_is_better else change > 0
        return REGRESSION if worse else IMPROVEMENT
    if bounded and within(low, high, threshold):
        return BELOW_THRESHOLD if p_holm < alpha else NO_CHANGE
    return Reading.INCONCLUSIVE


def _settle(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    allowance: np.ndarray,
    allowance_df: np.ndarray,
    resolutions: Sequence[Resolutions],
    by_run: bool,
    threshold: float,
    confidence: float,
) -> list[tuple[int | None, int | None]]:
    """Per pair, (repetitions a run, runs a side) that would settle it were it unchanged
    (``JudgedMetric``): from the relative spread of one observation on each side, the allowance, and
    the rounding error of each mean (resolution²/12, which more repetitions do not shrink)."""
    (mean_a, var_a, n_a), (_, var_b, n_b) = (
        moments([np.asarray(pair[side], dtype=float) for pair in pairs]) for side in (0, 1)
    )
    pair_resolutions = np.array(resolutions, dtype=float).reshape(len(pairs), 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.where(mean_a != 0, np.abs(mean_a), np.nan)
        spread = np.sqrt((var_a + var_b) / 2) / centre
        floor = np.nanmax(np.nan_to_num(pair_resolutions) ** 2, axis=1) / 12 / centre**2
    fixed = np.sqrt((0.0 if by_run else allowance**2) + floor)
    if by_run:
        return [
            (None, k) for k in runs_to_settle(np.sqrt(spread**2 + floor), threshold, confidence)
        ]
    reps = repetitions_to_settle(spread, fixed, threshold, confidence, allowance_df)
    count = (n_a + n_b) / 2
    runs = runs_to_settle(np.sqrt(fixed**2 + spread**2 / count), threshold, confidence)
    return list(zip(reps, runs, strict=True))


def judge_family(
    metrics: Sequence[Observed],
    threshold: float = THRESHOLD,
    alpha: float = ALPHA_ACROSS_RUNS,
    by_run: bool = False,
) -> list[JudgedMetric]:
    """The statistical core of ``compare``: the metrics of one family, judged together (Holm's
    step-down over the family); ``by_run``: the observations are runs' means (what would
    settle them is then more runs). A metric with an ``alarm`` is judged at it too (Holm's
    step-down over the family again): a regression or improvement that does not hold there is
    inconclusive (``JudgedMetric.assumed_only``)."""
    pairs = [(m.a, m.b) for m in metrics]
    allowance = [m.allowance for m in metrics]
    allowance_df = [m.allowance_df for m in metrics]
    resolutions = [m.resolutions for m in metrics]
    difference = [m.difference for m in metrics]
    rs = ratios(pairs, 1 - alpha, allowance, resolutions, allowance_df, difference)
    adjusted = holm([r.p_value for r in rs]).tolist()
    tested = max(1, sum(math.isfinite(p) for p in adjusted))
    found = detectable(
        np.array([r.se for r in rs]), np.array([r.df for r in rs]), alpha / tested, threshold
    ).tolist()
    k = len(rs)
    verdicts = [
        judge(r, p, m.higher_is_better, alpha, threshold)
        for r, p, m in zip(rs, adjusted, metrics, strict=True)
    ]
    allow = np.asarray(allowance, dtype=float)
    alarms = [m.alarm for m in metrics]
    assumed_only = [False] * k
    if any(x is not None for x in alarms):
        strict = [allow[i] if x is None else max(x, allow[i]) for i, x in enumerate(alarms)]
        rs_alarm = ratios(pairs, 1 - alpha, strict, resolutions, allowance_df, difference)
        held = holm([r.p_value for r in rs_alarm]).tolist()
        for i, v in enumerate(verdicts):
            if adjusted[i] < alpha and not held[i] < alpha:
                assumed_only[i] = True
                verdicts[i] = Reading.INCONCLUSIVE if v in (REGRESSION, IMPROVEMENT) else v
    unsettled = [i for i, v in enumerate(verdicts) if v == Reading.INCONCLUSIVE]
    allow_df = np.asarray(allowance_df, dtype=float)
    needs: dict[int, tuple[int | None, int | None]] = {}
    if unsettled:
        found_needs = _settle(
            [pairs[i] for i in unsettled],
            allow[unsettled],
            allow_df[unsettled],
            [resolutions[i] for i in unsettled],
            by_run,
            threshold,
            1 - alpha,
        )
        needs = dict(zip(unsettled, found_needs, strict=True))
    out = []
    for i, (r, p, d, v) in enumerate(zip(rs, adjusted, found, verdicts, strict=True)):
        raw = r.p_value < alpha and not p < alpha
        out.append(JudgedMetric(r, p, d, v, raw, *needs.get(i, (None, None)), assumed_only[i]))
    return out


@dataclass
class MetricChange:
    """One metric of one (platform, workload, instance count) on both sides."""

    platform: str
    workload: str
    instances: int
    name: str
    unit: str
    higher_is_better: bool
    a: SampleSummary
    b: SampleSummary
    """The observations of each side: repetitions of one run, or several runs' means."""
    headline: bool
    """In the gating family."""
    judged: JudgedMetric
    allowance: float = 0.0
    """The run-to-run allowance added to each side (relative)."""

    @property
    def verdict(self) -> str:
        return self.judged.verdict

    @property
    def signed(self) -> bool:
        """Judged by mean(B) − mean(A) in its unit (``difference``), not by a ratio."""
        return self.judged.ratio.difference

    @property
    def change(self) -> float:
        """mean(B) / mean(A) − 1 (a signed figure's difference relative to |mean(A)|)."""
        r = self.judged.ratio
        return r.relative(r.estimate) - 1

    @property
    def ci_low(self) -> float:
        r = self.judged.ratio
        return r.relative(r.low) - 1

    @property
    def ci_high(self) -> float:
        r = self.judged.ratio
        return r.relative(r.high) - 1

    @property
    def better(self) -> float:
        """The change in the metric's good direction (+0.10 = 10% better)."""
        return self.change if self.higher_is_better else -self.change

    @property
    def settled(self) -> bool:
        return self.judged.settled


@dataclass
class Comparison:
    a: list[RunAnalysis]
    b: list[RunAnalysis]
    alpha: float
    threshold: float
    allowance: Allowance
    """The run-to-run allowance used, and its source (none when runs are the unit)."""
    changes: list[MetricChange]
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

    def family(self, headline: bool) -> list[MetricChange]:
        return [c for c in self.changes if c.headline == headline]

    @property
    def regressions(self) -> list[MetricChange]:
        """Regressions of headline metrics: what fails the gate."""
        return [c for c in self.family(True) if c.verdict == REGRESSION]

    @property
    def unsettled(self) -> list[MetricChange]:
        """Headline metrics that are inconclusive or not tested."""
        return [c for c in self.family(True) if not c.settled]

    @property
    def assumed(self) -> list[MetricChange]:
        """Headline metrics judged at the assumed allowance (``ALLOWANCE``, not measured): a
        regression there must hold at ``ALARM`` too, but a pass cannot be held so (no interval
        at 3% lies within ±5%), and a host whose runs differ by more than 1% can pass a
        regression unseen."""
        return [c for c in self.family(True) if self.allowance.alarm_of(c.workload) is not None]

    @property
    def cannot_gate(self) -> list[MetricChange]:
        """Inconclusive headline metrics that these data could not have settled even unchanged
        (not 80% of the time): more repetitions a run, or more runs a side, than were given
        are needed to gate them at all (``JudgedMetric.repetitions``, ``JudgedMetric.runs``)."""
        out = []
        for c in self.family(True):
            have = len(self.a) if self.by_run else min(c.a.n, c.b.n)
            need = c.judged.runs if self.by_run else c.judged.repetitions
            if c.verdict == Reading.INCONCLUSIVE and (need is None or need > have):
                out.append(c)
        return out


def gates(result: MetricResult) -> bool:
    """Whether a metric is in the gating family. A cpu cell gates on its composite's sub-scores,
    not on the composite: that is normalised by its own run's baseline means, so the baseline's
    reads 1 in every run (a slower host CPU would pass unseen), and the noise of both runs'
    baseline means, which moves every platform's composite, is in none of its repetitions."""
    return result.composite or (result.headline and result.name != COMPOSITE)


def _index(runs: list[RunAnalysis]) -> dict[MetricKey, list[MetricResult]]:
    """The metrics every run of a side has, each with its result in every run."""
    keyed = [{r.key: r for r in run.results} for run in runs]
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
    alpha: float = ALPHA_ACROSS_RUNS,
    allowance: float | Allowance | None = None,
) -> Comparison:
    """Compare every metric both sides share (per-instance figures). One run a side: the
    repetitions, with ``allowance`` (a number: given; an ``Allowance``: measured, see
    ``history``; None: 0 for a run against itself, else ``ALLOWANCE`` assumed); several: the
    runs' means."""
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
    allowed = _allowance(runs_a, runs_b, by_run, allowance)
    in_a, in_b = _index(runs_a), _index(runs_b)
    shared = [k for k in in_a if k in in_b]
    headline = {k for k, rs in in_a.items() if gates(rs[0])}

    def observations(rs: list[MetricResult]) -> np.ndarray:
        return np.array([r.single.mean for r in rs]) if by_run else rs[0].single_values

    def resolution(rs: list[MetricResult]) -> float | None:
        """Of a side's mean: one run's, or the mean of the runs' (their means' mean)."""
        known = [r.single.resolution for r in rs if r.single.resolution is not None]
        return float(np.mean(known)) if len(known) == len(rs) else None

    obs = {k: (observations(in_a[k]), observations(in_b[k])) for k in shared}
    resolutions = {k: (resolution(in_a[k]), resolution(in_b[k])) for k in shared}
    if by_run:
        summaries = iter(
            summarize_many(
                [x for k in shared for x in obs[k]], [q for k in shared for q in resolutions[k]]
            )
        )
        sides = {k: (next(summaries), next(summaries)) for k in shared}
    else:
        sides = {k: (in_a[k][0].single, in_b[k][0].single) for k in shared}

    def observed(k: MetricKey) -> Observed:
        share, df = allowed.of(k.workload)
        return Observed(
            *obs[k],
            in_a[k][0].higher_is_better,
            allowance=share,
            allowance_df=df,
            resolutions=resolutions[k],
            difference=signed(k.metric, *obs[k]),
            alarm=allowed.alarm_of(k.workload),
        )

    judged: dict[MetricKey, JudgedMetric] = {}
    for gating in (True, False):
        keys = [k for k in shared if (k in headline) == gating]
        family = judge_family([observed(k) for k in keys], threshold, alpha, by_run)
        judged.update(zip(keys, family, strict=True))
    changes = [
        MetricChange(
            platform=k.platform,
            workload=k.workload,
            instances=k.instances,
            name=k.metric,
            unit=in_a[k][0].unit,
            higher_is_better=in_a[k][0].higher_is_better,
            a=sides[k][0],
            b=sides[k][1],
            headline=k in headline,
            judged=judged[k],
            allowance=allowed.of(k.workload)[0],
        )
        for k in shared
    ]
    spreads = [_spread(*obs[k]) for k in shared] if by_run else []
    spreads = [s for s in spreads if np.isfinite(s)]

    def label(runs: list[RunAnalysis], k: MetricKey) -> str:
        return f"{runs[0].label(k.platform)} / {k.workload} / {k.instances} inst. / {k.metric}"

    return Comparison(
        a=runs_a,
        b=runs_b,
        alpha=alpha,
        threshold=threshold,
        allowance=allowed,
        changes=changes,
        only_a=[label(runs_a, k) for k in in_a if k not in in_b],
        only_b=[label(runs_b, k) for k in in_b if k not in in_a],
        work_apart=_work_apart(runs_a, runs_b),
        run_spread=float(np.median(spreads)) if spreads else None,
    )


def _allowance(
    runs_a: list[RunAnalysis],
    runs_b: list[RunAnalysis],
    by_run: bool,
    given: float | Allowance | None,
) -> Allowance:
    """The allowance a comparison uses (see the module's docstring)."""
    if by_run:
        return Allowance(0.0, RUNS)
    if isinstance(given, Allowance):
        return given
    if given is not None:
        if not (math.isfinite(given) and given >= 0):
            raise HvbenchError(f"compare: --allowance {given}: give a share of 0 or more (0.02)")
        return Allowance(given, OPTION)
    if runs_a[0].run_id == runs_b[0].run_id:
        return Allowance(0.0, SAME_RUN)
    return Allowance(ALLOWANCE, ASSUMED, note="no earlier run measures it", alarm=ALARM)
