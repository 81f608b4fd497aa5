"""Claims: what a study expects (``expect:``), judged with the interval, never the bare mean.

A claim bounds a metric's mean ("boot.ready_s at most 60 s") or its % of native ("cpu at least
95% of native"), ``at_most`` or ``at_least``, on one platform or on every platform that ran it
(each then a claim of its own), at the workload's smallest instance count unless it names one.
Its outcome is read off its 95% interval:

- **held**: the whole interval is inside the bound;
- **refuted**: the whole interval is outside it;
- **inconclusive**: the interval straddles the bound (or there is none: one repetition,
  identical repetitions of unknown resolution, a figure not measured). Where the spread is
  known, it says about how many repetitions would settle it 80% of the time, were the mean
  where it is (``stats.detectable``, as ``compare`` says what would settle a change).

A bound on a mean is tested as a side of no variance: Welch's difference of the repetitions
from it (``stats.ratios`` with ``difference``) is Student's one-sample interval and t test, the
metric's resolution a floor under its variance as everywhere else. A bound on the % of native is
Fieller's ratio against the baseline's repetitions scaled by the bound, whose test is that of
the ratio being exactly the bound and whose interval, scaled back, is the report's % of native.
The claims of a run are one family: an outcome other than inconclusive needs its test to pass
Holm's step-down over all of them at ``stats.ALPHA``, so that a run of true claims has one
refuted at most 5% of the time, however many it holds. An interval beyond its bound that does
not pass Holm's step-down is inconclusive, "beyond its bound only before Holm's correction".

The consolidation's SLOs (each role's p95 limit, ``load.<role>.p95_ms``) are claims of the same
kind, made from the workload's settings (``slo_claims``), in the same family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from hvbench.analysis import slo
from hvbench.analysis.model import MetricResult, RunAnalysis, pick_baseline_cell
from hvbench.analysis.normalize import decimals_for, from_ratio, rounded
from hvbench.analysis.stats import (
    ALPHA,
    CONFIDENCE,
    MAX_REPETITIONS,
    RESOLUTION_UNKNOWN,
    Ratio,
    Resolutions,
    detectable,
    holm,
    ratios,
)
from hvbench.errors import HvbenchError
from hvbench.units import parse_quantity, unit_scale

HELD = "held"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (REFUTED, INCONCLUSIVE, HELD)
"""Every outcome, the most pressing first."""
ALL = "all"
"""A claim's platform when it is every platform's that ran its workload."""
NATIVE = "%"
"""The unit of a bound on the % of native."""
SLO_SOURCE = "SLO (load.{role}.p95_ms)"


class ClaimModel(BaseModel):
    """One entry of a study's ``expect:`` as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    platform: str = ALL
    workload: str = Field(min_length=1)
    """A workload's name (boot) or its cells' label (disk fio ...)."""
    metric: str = Field(min_length=1)
    at_most: str | float | None = None
    at_least: str | float | None = None
    source: str = ""
    """A URL or a document's name: where the claim comes from."""
    instances: PositiveInt | None = None
    """The instance count it is about (default: the workload's smallest)."""

    @model_validator(mode="after")
    def _one_bound(self) -> ClaimModel:
        bounds = [b for b in (self.at_most, self.at_least) if b is not None]
        if len(bounds) != 1:
            raise ValueError("exactly one of at_most and at_least (such as at_most: 125ms)")
        parse_quantity(bounds[0])
        return self


@dataclass(frozen=True)
class Claim:
    """A claim, its bound parsed."""

    platform: str
    workload: str
    metric: str
    bound: float
    """As written: in ``unit``, or in % of native."""
    unit: str | None
    """The bound's unit as written; None: the metric's own; ``NATIVE``: % of native."""
    at_most: bool
    source: str = ""
    instances: int | None = None
    slo: bool = False
    """Made from the consolidation's SLO, not written in ``expect:``."""

    @property
    def of_native(self) -> bool:
        return self.unit == NATIVE

    @classmethod
    def of(cls, m: ClaimModel) -> Claim:
        bound, unit = parse_quantity(m.at_most if m.at_most is not None else m.at_least)
        return cls(
            m.platform,
            m.workload,
            m.metric,
            bound,
            unit,
            m.at_most is not None,
            m.source,
            m.instances,
        )

    @property
    def relation(self) -> str:
        return "at most" if self.at_most else "at least"

    @property
    def text(self) -> str:
        """ "boot.ready_s at most 60 s", "cpu.composite.score at least 95% of native"."""
        if self.of_native:
            return f"{self.metric} {self.relation} {self.bound:g}% of native"
        return f"{self.metric} {self.relation} {self.bound:g}{_space(self.unit)}".rstrip()


def _space(unit: str | None) -> str:
    return f" {unit}" if unit else ""


def parse_claims(raw: object) -> list[Claim]:
    """The claims of a study's ``expect:`` (validated: a study's loader checks them against
    what it produces first, with the line of each)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"expect: a list of claims, found {raw!r}")
    return [Claim.of(ClaimModel.model_validate(item)) for item in raw]


def stored_claims(study_text: str) -> list[Claim]:
    """The claims of a run's stored study (only ``expect:`` is read, as ``run.baseline_of``
    reads only the baseline)."""
    try:
        doc = yaml.safe_load(study_text)
        return parse_claims(doc.get("expect") if isinstance(doc, dict) else None)
    except (yaml.YAMLError, ValueError, ValidationError) as e:
        raise HvbenchError(f"the run's study has claims that do not read: {e}") from None


def slo_claims(a: RunAnalysis) -> list[Claim]:
    """The consolidation's SLOs as claims: each role's p95 at most its limit, on every platform,
    for each workload whose cells hold a role's p95 (the roles of its mix)."""
    out: list[Claim] = []
    for workload in a.workloads():
        cells = [c for c in a.cells if c.workload == workload]
        load = cells[0].workload_settings.get("load") or {}
        names = set(a.metric_names(workload))
        for role, settings in load.items():
            metric = f"consolidation.{role}{slo.P95}"
            if metric in names and (settings or {}).get("p95_ms") is not None:
                source = SLO_SOURCE.format(role=role)
                bound = float(settings["p95_ms"])
                out.append(Claim(ALL, workload, metric, bound, "ms", True, source, slo=True))
    return out


# --- judging -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One claim on one platform, judged within the run's family."""

    claim: Claim
    platform: str
    label: str
    """The platform as reports name it (``RunAnalysis.label``)."""
    workload: str
    """The cells' workload label."""
    instances: int | None
    estimate: float
    low: float
    high: float
    """The mean (or % of native) and its 95% interval, in ``unit``; NaN where not measured or
    not tested."""
    unit: str
    """What they are in: the bound's unit, else the metric's; % for a % of native."""
    n: int
    """Repetitions of the platform (the smaller side's for a % of native)."""
    p_value: float
    p_holm: float
    """The test of the mean being exactly at the bound, raw and by Holm's step-down over the
    run's claims (NaN where not tested)."""
    outcome: str
    why: str = ""
    """Why an inconclusive claim is: straddles its bound, 1 repetition, not measured, ..."""
    before_correction: bool = False
    """Its interval is beyond the bound, but Holm's step-down over the family does not pass."""
    repetitions: int | None = None
    """Repetitions that would settle an inconclusive claim 80% of the time, were its mean where
    it is; None where none up to ``stats.MAX_REPETITIONS`` would or nothing says."""

    def figure(self) -> tuple[str, str]:
        """ "52.3 s", "[49.1–55.5 s]"; "9.81%", "[9.52–10.1%]" (of native): rounded outward,
        with the digits to show on which side of the bound each end lies; no interval ("")
        where none was computed."""
        if math.isnan(self.estimate):
            return NOT_MEASURED, ""
        unit = "%" if self.claim.of_native else _space(self.unit)
        d = decimals_for(self.estimate, self.claim.bound)
        if math.isnan(self.low):
            return f"{self.estimate:.{d}f}{unit}", ""
        est, low, high = rounded(self.estimate, self.low, self.high, self.claim.bound, d)
        return f"{est}{unit}", f"[{low}–{high}{unit}]"

    def measured(self) -> str:
        """ "52.3 s [49.1–55.5 s]", "9.81% [9.52–10.1%] of native"."""
        text = " ".join(x for x in self.figure() if x)
        return text + (" of native" if self.claim.of_native and self.figure()[1] else "")

    def settle(self) -> str:
        """What an inconclusive claim needs, in words; "" for a settled one."""
        if self.outcome != INCONCLUSIVE:
            return ""
        what = self.why
        if self.before_correction:
            what += " only before Holm's correction"
        if self.repetitions is not None:
            what += f"; about {self.repetitions} repetitions would settle it"
        elif self.why == STRADDLES:
            what += (
                f"; no count up to {MAX_REPETITIONS} repetitions would, were its mean where it is"
            )
        return what

    def line(self) -> str:
        """The claim's line: "claim: tcg / cpu / 1 inst.: cpu.composite.score at least 95% of
        native: 9.81% [9.52–10.1%] of native: refuted (source)"."""
        where = f"{self.label} / {self.workload}" + (
            f" / {self.instances} inst." if self.instances else ""
        )
        source = f" (source: {self.claim.source})" if self.claim.source else ""
        tail = f" ({s})" if (s := self.settle()) else ""
        return f"claim: {where}: {self.claim.text}: {self.measured()}: {self.outcome}{tail}{source}"


STRADDLES = "the interval straddles its bound"
BEYOND = "the interval is beyond its bound"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Figure:
    """What a claim is judged on: a platform's repetitions (and, for a % of native, the
    baseline's), with the resolution of each mean (None: unknown)."""

    values: np.ndarray
    baseline: np.ndarray | None
    higher_is_better: bool
    resolutions: tuple[float | None, float | None] = (None, None)
    """Of the baseline's mean and of the platform's."""


def judge_claims(
    figures: Sequence[Figure], bounds: Sequence[float], at_most: Sequence[bool]
) -> list[tuple[float, float, float, float, float, str, bool, int | None, int]]:
    """The statistical core, one family of claims: per figure its estimate, low, high (of the
    mean in its unit, or of the share of native kept: 1 = native), p-value, Holm's p-value,
    outcome, whether it was beyond its bound only before Holm's correction, the repetitions
    that would settle it and its repetitions (``n``). ``bounds``: in the metric's unit, or the
    share of native for a figure with a baseline."""
    pairs, diff, scales = [], [], []
    resolutions: list[Resolutions] = []
    for f, b in zip(figures, bounds, strict=True):
        if f.baseline is None:  # the bound as a side with no variance, known exactly
            pairs.append((np.full(2, b), f.values))
            resolutions.append((0.0, f.resolutions[1]))
            diff.append(True)
            scales.append(1.0)
        else:  # θ = mean/baseline against s: the baseline scaled by s, its ratio 1 at the bound
            s = b if f.higher_is_better else 1 / b
            q_base = f.resolutions[0]
            pairs.append((f.baseline * s, f.values))
            resolutions.append((None if q_base is None else q_base * s, f.resolutions[1]))
            diff.append(False)
            scales.append(s)
    found = ratios(pairs, CONFIDENCE, resolutions=resolutions, difference=diff) if pairs else []
    adjusted = holm([r.p_value for r in found]).tolist()
    m = max(1, sum(math.isfinite(p) for p in adjusted))
    out = []
    for f, b, most, r, p, s in zip(figures, bounds, at_most, found, adjusted, scales, strict=True):
        est, low, high = _interval(r, f, b, s)
        inside, outside = (high < b, low > b) if most else (low > b, high < b)
        settled = math.isfinite(p) and p < ALPHA and r.bounded
        outcome = HELD if settled and inside else REFUTED if settled and outside else INCONCLUSIVE
        before = outcome == INCONCLUSIVE and r.tested and r.bounded and (inside or outside)
        need = None
        if outcome == INCONCLUSIVE and r.tested and not before:
            need = _repetitions(r, min(r.n_a, r.n_b) if f.baseline is not None else r.n_b, m)
        n = r.n_b if f.baseline is None else min(r.n_a, r.n_b)
        out.append((est, low, high, r.p_value, p, outcome, before, need, n))
    return out


def _interval(r: Ratio, f: Figure, bound: float, s: float) -> tuple[float, float, float]:
    """The claim's figure and its interval: the mean (the bound plus the difference), or the
    share of native kept (``normalize.from_ratio`` of the ratio scaled back by ``s``)."""
    if f.baseline is None:
        return bound + r.estimate, bound + r.low, bound + r.high
    v = from_ratio(
        replace(r, estimate=r.estimate * s, low=r.low * s, high=r.high * s), f.higher_is_better
    )
    return v.pct_of_native / 100, v.pct_low / 100, v.pct_high / 100


def _repetitions(r: Ratio, n: int, family: int) -> int | None:
    """Repetitions (a side) at which the test would pass Holm's first step 80% of the time, were
    the mean (or the ratio) where it is and its spread as measured: the first count whose
    ``stats.detectable`` change is within its distance from the bound."""
    if r.difference and not r.scale > 0:
        return None
    gap = abs(r.estimate / r.scale if r.difference else r.estimate - 1)
    if not (math.isfinite(gap) and math.isfinite(r.se)) or gap == 0:
        return None
    counts = np.arange(2, MAX_REPETITIONS + 1, dtype=float)
    per_side = r.df / max(n - 1, 1)  # 1 for a mean, about 2 for a ratio of two sides
    found = detectable(r.se * np.sqrt(n / counts), per_side * (counts - 1), ALPHA / family)
    ok = np.flatnonzero(found <= gap)
    return int(counts[ok[0]]) if len(ok) else None


def judged(a: RunAnalysis, claims: Sequence[Claim] | None = None) -> list[Judged]:
    """A run's claims judged as one family: those its study expects (``claims``: others, such
    as another study's, for ``hvbench claims --expect``) and its consolidation's SLOs."""
    wanted = [*(stored_claims(a.study_text) if claims is None else claims), *slo_claims(a)]
    rows: list[tuple[Claim, str, str, int | None, MetricResult | None, Figure | None]] = []
    for claim in wanted:
        rows += _targets(a, claim)
    live = {i: figure for i, (*_, figure) in enumerate(rows) if figure is not None}
    tested = judge_claims(
        list(live.values()),
        [_bound(rows[i][0], rows[i][4]) for i in live],
        [rows[i][0].at_most for i in live],
    )
    results = dict(zip(live, tested, strict=True))
    out = []
    for i, (claim, platform, workload, count, r, _) in enumerate(rows):
        head = (claim, platform, a.label(platform), workload, count)
        if i not in results:
            nan = math.nan
            figures = (nan, nan, nan, claim.unit or "", 0, nan, nan, INCONCLUSIVE, NOT_MEASURED)
            out.append(Judged(*(head + figures)))
            continue
        est, low, high, p, p_holm, outcome, before, need, n = results[i]
        assert r is not None
        factor, unit = _display(claim, r)
        why = _why(outcome, before, n, r)
        measured = (est * factor, low * factor, high * factor, unit, n, p, p_holm, outcome, why)
        out.append(Judged(*(head + measured), before, need))
    return out


def _why(outcome: str, before: bool, n: int, r: MetricResult) -> str:
    if outcome != INCONCLUSIVE:
        return ""
    if n < 2:
        return f"not tested: {n} repetition{'s' * (n != 1)}"
    if r.single.identical == RESOLUTION_UNKNOWN or (
        r.vs_baseline is not None and r.vs_baseline.unresolved
    ):
        return f"not tested: {RESOLUTION_UNKNOWN}"
    return BEYOND if before else STRADDLES


def _bound(claim: Claim, r: MetricResult | None) -> float:
    """The bound in the metric's unit, or as a share of native (0.95)."""
    if claim.of_native:
        return claim.bound / 100
    if claim.unit is None or r is None:
        return claim.bound
    return claim.bound * _factor(claim.unit) / _factor(r.unit)


def _factor(unit: str) -> float:
    scale = unit_scale(unit)
    if scale is None:
        raise HvbenchError(f"claim: unit {unit!r} cannot be converted")
    return scale[1]


def _display(claim: Claim, r: MetricResult) -> tuple[float, str]:
    """The factor from what ``judge_claims`` returns to what a claim's line shows, and its
    unit: % for a share of native, the bound's unit, else the metric's."""
    if claim.of_native:
        return 100.0, "%"
    if claim.unit is None:
        return 1.0, r.unit
    return _factor(r.unit) / _factor(claim.unit), claim.unit


def _targets(
    a: RunAnalysis, claim: Claim
) -> list[tuple[Claim, str, str, int | None, MetricResult | None, Figure | None]]:
    """Each (platform, cell) a claim is about, with its figure; a platform named but with no
    such figure is there with none (not measured); "all" takes the platforms that have it
    (for a % of native, all but the baseline)."""
    cells = [c for c in a.cells if claim.workload in (c.workload, c.workload_name)]
    platforms = (
        [claim.platform]
        if claim.platform != ALL
        else list(dict.fromkeys(c.platform for c in cells))
    )
    if claim.of_native and claim.platform == ALL:
        platforms = [p for p in platforms if p != a.baseline]
    out = []
    for platform in platforms:
        mine = [c for c in cells if c.platform == platform]
        count = claim.instances or (min(c.instances for c in mine) if mine else None)
        cell = next((c for c in mine if c.instances == count), None)
        r = a.result(platform, cell.workload, claim.metric, cell.instances) if cell else None
        figure = _figure(a, claim, r)
        if figure is None and claim.platform == ALL:
            continue
        workload = cell.workload if cell else claim.workload
        out.append((claim, platform, workload, count, r, figure))
    return out


def _figure(a: RunAnalysis, claim: Claim, r: MetricResult | None) -> Figure | None:
    """The repetitions a claim is judged on; None where there are none (or, for a % of
    native, no baseline's)."""
    if r is None or not len(r.single_values):
        return None
    if not claim.of_native:
        return Figure(r.single_values, None, r.higher_is_better, (None, r.single.resolution))
    base_cells = [c for c in a.cells if c.platform == a.baseline]
    pick = pick_baseline_cell(base_cells, r.cell.workload, r.cell.instances)
    base = a.result(pick.platform, pick.workload, r.name, pick.instances) if pick else None
    if base is None or base is r:
        return None
    resolutions = (base.single.resolution, r.single.resolution)
    return Figure(r.single_values, base.single_values, r.higher_is_better, resolutions)


# --- what a run says of them ---------------------------------------------------------------


def lines(a: RunAnalysis) -> list[str]:
    """The verdict's line per claim the study wrote (the SLOs are on their workload's line)."""
    return [j.line() for j in a.claims if not j.claim.slo]


def slo_part(j: Judged) -> str:
    """ "web 5.0 [4.8–5.2 ms] ≤ 50 ms: held": an SLO claim within its workload's line."""
    role = j.claim.metric.split(".")[1]
    tail = f" ({s})" if (s := j.settle()) else ""
    return f"{role} {j.measured()} ≤ {j.claim.bound:g} ms: {j.outcome}{tail}"


def exit_code(found: Sequence[Judged]) -> int:
    """``hvbench claims``: 1 a claim refuted, 3 none, but one inconclusive, else 0."""
    outcomes = {j.outcome for j in found}
    return 1 if REFUTED in outcomes else 3 if INCONCLUSIVE in outcomes else 0


def as_json(j: Judged) -> dict:
    """A judged claim for ``--json``, the JSON lines export and the history."""

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    c = j.claim
    return {
        "claim": c.text,
        "platform": j.platform,
        "label": j.label,
        "workload": j.workload,
        "instances": j.instances,
        "metric": c.metric,
        "relation": "at_most" if c.at_most else "at_least",
        "bound": c.bound,
        "of_native": c.of_native,
        "source": c.source or None,
        "slo": c.slo,
        "estimate": num(j.estimate),
        "ci_low": num(j.low),
        "ci_high": num(j.high),
        "unit": j.unit,
        "confidence": CONFIDENCE,
        "n": j.n,
        "p_value": num(j.p_value),
        "p_holm": num(j.p_holm),
        "correction": "holm",
        "outcome": j.outcome,
        "why": j.why or None,
        "significant_before_correction": j.before_correction,
        "repetitions_to_settle": j.repetitions,
    }
