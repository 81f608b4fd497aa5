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
  where it is (``settling.detectable``, as ``compare`` says what would settle a change).

A bound on a mean is tested as a side of no variance: Welch's difference of the repetitions
from it (``ratios.ratios`` with ``difference``) is Student's one-sample interval and t test, the
metric's resolution a floor under its variance as everywhere else. A bound on the % of native is
Fieller's ratio against the baseline's repetitions scaled by the bound, whose test is that of
the ratio being exactly the bound and whose interval, scaled back, is the report's % of native.
The claims of a run are one family: an outcome other than inconclusive needs its test to pass
Holm's step-down over all of them at ``stats.ALPHA``, so that a run of true claims has one
refuted at most 5% of the time, however many it holds. An interval inside (or beyond) its bound
that does not pass Holm's step-down is inconclusive, "held (refuted) only before Holm's
correction".

A bound in % on a lower-is-better metric is a bound on the performance kept (native/value): at
most a % of it holds for any slowdown, so such a claim is not judged. A bare bound on the cpu
composite, itself a share of native, is judged as the % it is, with native's noise. A percentile
over too few instances (a boot storm's p99 at 1 instance) is not measured.

The consolidation's SLOs (each role's p95 limit, ``load.<role>.p95_ms``) are claims of the same
kind, made from the workload's settings (``slo_claims``), in the same family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import yaml
from pydantic import ValidationError

from hvbench.analysis import slo
from hvbench.analysis.aggregate import INSTANCE_PERCENTILES, percentile_shortfall
from hvbench.analysis.holm import holm
from hvbench.analysis.intervals import RESOLUTION_UNKNOWN
from hvbench.analysis.model import (
    BEFORE_HOLM,
    COMPOSITE,
    HELD,
    INCONCLUSIVE,
    NOT_MEASURED,
    REFUTED,
    STRADDLES,
    JudgedClaim,
    MetricResult,
    RunAnalysis,
    pick_baseline_cell,
)
from hvbench.analysis.normalize import from_ratio, signed
from hvbench.analysis.ratios import Ratio, Resolutions, ratios
from hvbench.analysis.settling import MAX_REPETITIONS, detectable
from hvbench.analysis.stats import ALPHA, CONFIDENCE, QuantileTest, quantile_test
from hvbench.claim_schema import ALL, NATIVE, Claim, ClaimModel
from hvbench.errors import HvbenchError
from hvbench.units import unit_scale

SLO_SOURCE = "SLO (load.{role}.p95_ms)"
REVERSED = (
    "a % of native is the performance kept (native/value), which any slowdown of a "
    "lower-is-better metric keeps under an at-most bound: bound it at_least in %, or at_most "
    "in its unit"
)


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
class ClaimEvidence:
    """What a claim is judged on: a platform's repetitions (and, for a % of native, the
    baseline's), with the resolution of each mean (None: unknown)."""

    values: np.ndarray
    baseline: np.ndarray | None
    higher_is_better: bool
    resolutions: tuple[float | None, float | None] = (None, None)
    """Of the baseline's mean and of the platform's."""
    quantile: float | None = None
    """Where the claim bounds a percentile over the cell's instances, its level (0.99), and
    ``values`` are every instance's figure in every repetition (``stats.quantile_test``)."""


class Tested(NamedTuple):
    """One claim as ``judge_claims`` finds it."""

    estimate: float
    low: float
    high: float
    """Of the mean in its unit, or of the share of native kept (1 = native)."""
    p_value: float
    p_holm: float
    outcome: str
    before: str
    """HELD or REFUTED where only Holm's correction keeps it from that outcome; else ""."""
    repetitions: int | None
    """That would settle it (``_repetitions``)."""
    n: int
    unresolved: bool
    """Within half its resolution of its bound (``_unresolved``)."""


def judge_claims(
    figures: Sequence[ClaimEvidence], bounds: Sequence[float], at_most: Sequence[bool]
) -> list[Tested]:
    """The statistical core, one family of claims, each ``Tested``. ``bounds``: in the metric's
    unit, or the share of native for a figure with a baseline."""
    pairs, diff, scales = [], [], []
    resolutions: list[Resolutions] = []
    quantiles = {
        i: quantile_test(f.values, f.quantile, b)
        for i, (f, b) in enumerate(zip(figures, bounds, strict=True))
        if f.quantile is not None
    }
    for f, b in zip(figures, bounds, strict=True):
        if f.quantile is not None:
            continue
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
    found = iter(ratios(pairs, CONFIDENCE, resolutions=resolutions, difference=diff))
    tests = [quantiles[i] if i in quantiles else next(found) for i in range(len(figures))]
    adjusted = holm([t.p_value for t in tests]).tolist()
    m = max(1, sum(math.isfinite(p) for p in adjusted))
    out = []
    scale = iter(scales)
    for f, b, most, r, p in zip(figures, bounds, at_most, tests, adjusted, strict=True):
        if isinstance(r, QuantileTest):
            out.append(_quantile_tested(r, b, most, p))
            continue
        est, low, high = _interval(r, f, b, next(scale))
        inside, outside = (high < b, low > b) if most else (low > b, high < b)
        settled = math.isfinite(p) and p < ALPHA and r.bounded
        outcome = HELD if settled and inside else REFUTED if settled and outside else INCONCLUSIVE
        before = ""
        if outcome == INCONCLUSIVE and r.tested and r.bounded and (inside or outside):
            before = HELD if inside else REFUTED
        need, unresolved = None, False
        if outcome == INCONCLUSIVE and r.tested and not before:
            unresolved = _unresolved(f, est, b)
            if not unresolved:
                need = _repetitions(r, min(r.n_a, r.n_b) if f.baseline is not None else r.n_b, m)
        n = r.n_b if f.baseline is None else min(r.n_a, r.n_b)
        out.append(Tested(est, low, high, r.p_value, p, outcome, before, need, n, unresolved))
    return out


def _quantile_tested(t: QuantileTest, bound: float, at_most: bool, p_holm: float) -> Tested:
    """A claim on a percentile, read off its order-statistic interval and its binomial test,
    bounded or not (its test excludes the bound exactly when the interval does)."""
    below, above = t.high < bound, t.low > bound
    inside, outside = (below, above) if at_most else (above, below)
    settled = p_holm < ALPHA
    outcome = HELD if settled and inside else REFUTED if settled and outside else INCONCLUSIVE
    before = ""
    if outcome == INCONCLUSIVE and (inside or outside):
        before = HELD if inside else REFUTED
    return Tested(t.estimate, t.low, t.high, t.p_value, p_holm, outcome, before, None, t.n, False)


def _unresolved(f: ClaimEvidence, estimate: float, bound: float) -> bool:
    """Whether the figure is within half its mean's resolution of its bound (relative, for a
    share of native: the two sides' half-steps): no interval is narrower than that, so no count
    of repetitions on the same clock would settle it."""
    q_base, q = f.resolutions
    if q is None:
        return False
    if f.baseline is None:
        return abs(estimate - bound) <= q / 2 * (1 + 1e-9)
    mean, base = abs(float(np.mean(f.values))), abs(float(np.mean(f.baseline)))
    if not (mean > 0 and base > 0 and bound > 0):
        return False
    rel = q / 2 / mean + (q_base or 0.0) / 2 / base
    return abs(estimate / bound - 1) <= rel * (1 + 1e-9)


def _interval(r: Ratio, f: ClaimEvidence, bound: float, s: float) -> tuple[float, float, float]:
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
    ``settling.detectable`` change is within its distance from the bound."""
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


def judged(a: RunAnalysis, claims: Sequence[Claim] | None = None) -> list[JudgedClaim]:
    """A run's claims judged as one family: those its study expects (``claims``: others, such
    as another study's, for ``hvbench claims --expect``) and its consolidation's SLOs."""
    wanted = [*(stored_claims(a.study_text) if claims is None else claims), *slo_claims(a)]
    rows: list[tuple[Claim, str, str, int | None, MetricResult | None, ClaimEvidence | None]] = []
    for claim in wanted:
        rows += _targets(a, _as_share(claim))
    live = {
        i: figure
        for i, (claim, *_, r, figure) in enumerate(rows)
        if figure is not None and not _reversed(claim, r)
    }
    tested = judge_claims(
        list(live.values()),
        [_bound(rows[i][0], rows[i][4]) for i in live],
        [rows[i][0].at_most for i in live],
    )
    results = dict(zip(live, tested, strict=True))
    out = []
    for i, (claim, platform, workload, count, r, figure) in enumerate(rows):
        head = (claim, platform, a.label(platform), workload, count)
        if i not in results:
            nan = math.nan
            why = _unjudged(claim, r, count)
            figures = (nan, nan, nan, claim.unit or "", 0, nan, nan, INCONCLUSIVE, why)
            j = JudgedClaim(*(head + figures), title=a.title(workload))
            if _reversed(claim, r) and r is not None and (v := r.vs_baseline) is not None:
                # not judged, but measured: its % of native, as the matrix gives it
                j = replace(
                    j,
                    estimate=v.pct_of_native,
                    low=v.pct_low,
                    high=v.pct_high,
                    unit="%",
                    n=min(v.n, v.n_baseline),
                    judged=False,
                    lower=_lower(claim, r),
                )
            out.append(j)
            continue
        t = results[i]
        assert r is not None
        factor, unit = _display(claim, r)
        lower = _lower(claim, r)
        floored = (
            t.low < 0 <= t.estimate and not claim.of_native and not signed(r.name, r.single_values)
        )
        out.append(
            JudgedClaim(
                *head,
                t.estimate * factor,
                max(t.low, 0.0) * factor if floored else t.low * factor,
                t.high * factor,
                unit,
                t.n,
                t.p_value,
                t.p_holm,
                t.outcome,
                _why(t, r),
                before_correction=bool(t.before),
                repetitions=t.repetitions,
                unresolved=t.unresolved,
                title=a.title(workload),
                lower=lower,
                floored=floored,
                pooled=_pooled(claim, t.n) if figure is not None and figure.quantile else "",
            )
        )
    return out


def _pooled(claim: Claim, n: int) -> str:
    """What a percentile over a cell's instances is judged on: "p99 of the 500 boot.ready_s of
    every instance in every repetition"."""
    p, of = INSTANCE_PERCENTILES[claim.metric]
    return f"p{p} of the {n} {of} of every instance in every repetition"


def _as_share(claim: Claim) -> Claim:
    """A bare bound on the cpu composite, a share of native by its making (0.95), as the % of
    native it is (95%): judged against native's repetitions, with their noise, not as a mean
    against a side known exactly (which, at the bound, refutes 3 times as often as it should)."""
    if claim.metric == COMPOSITE and claim.unit is None:
        return replace(claim, bound=100 * claim.bound, unit=NATIVE)
    return claim


def _lower(claim: Claim, r: MetricResult) -> str:
    """For a % of native on a lower-is-better metric, what that metric is (``JudgedClaim.lower``):
    "time", else "figure"; "" for any other claim."""
    if not claim.of_native or r.higher_is_better:
        return ""
    scale = unit_scale(r.unit)
    return "time" if scale is not None and scale.kind == "time" else "figure"


def _reversed(claim: Claim, r: MetricResult | None) -> bool:
    """An at-most bound in % on a lower-is-better metric (``REVERSED``)."""
    return claim.of_native and claim.at_most and r is not None and not r.higher_is_better


def _unjudged(claim: Claim, r: MetricResult | None, count: int | None) -> str:
    """Why a claim has no figure to be judged on."""
    if _reversed(claim, r):
        return REVERSED
    short = percentile_shortfall(claim.metric, count) if count is not None else None
    return f"{NOT_MEASURED}: {short}" if short else NOT_MEASURED


def _why(t: Tested, r: MetricResult) -> str:
    if t.outcome != INCONCLUSIVE:
        return ""
    if t.n < 2:
        return f"not tested: {t.n} repetition{'s' * (t.n != 1)}"
    if r.single.identical == RESOLUTION_UNKNOWN or (
        r.vs_baseline is not None and r.vs_baseline.unresolved
    ):
        return f"not tested: {RESOLUTION_UNKNOWN}"
    return BEFORE_HOLM.format(outcome=t.before) if t.before else STRADDLES


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
    return scale.factor


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
) -> list[tuple[Claim, str, str, int | None, MetricResult | None, ClaimEvidence | None]]:
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
        short = count is not None and percentile_shortfall(claim.metric, count)
        if figure is None and claim.platform == ALL and not short:
            continue
        workload = cell.workload if cell else claim.workload
        out.append((claim, platform, workload, count, r, figure))
    return out


def instance_percentile(a: RunAnalysis, r: MetricResult) -> tuple[int, np.ndarray] | None:
    """For a percentile over a cell's instances (``aggregate.INSTANCE_PERCENTILES``), its level
    and what it is read from: the figure of every instance in every repetition (every boot of
    every storm), not the mean of each storm's percentile; None for any other figure, or where
    those were not measured."""
    percentile = INSTANCE_PERCENTILES.get(r.name)
    if percentile is None:
        return None
    each = a.result(r.cell.platform, r.cell.workload, percentile.of, r.cell.instances)
    return None if each is None or each.every is None else (percentile.p, each.every)


def _figure(a: RunAnalysis, claim: Claim, r: MetricResult | None) -> ClaimEvidence | None:
    """The repetitions a claim is judged on; None where there are none (or, for a % of
    native, no baseline's)."""
    if r is None or not len(r.single_values):
        return None
    pooled = instance_percentile(a, r)
    if claim.metric in INSTANCE_PERCENTILES and not claim.of_native:  # every boot of every storm
        if pooled is None:
            return None
        p, values = pooled
        return ClaimEvidence(values, None, r.higher_is_better, quantile=p / 100)
    if not claim.of_native:
        return ClaimEvidence(r.single_values, None, r.higher_is_better, (None, r.single.resolution))
    base_cells = [c for c in a.cells if c.platform == a.baseline]
    pick = pick_baseline_cell(base_cells, r.cell.workload, r.cell.instances)
    base = a.result(pick.platform, pick.workload, r.name, pick.instances) if pick else None
    if base is None or base is r:
        return None
    resolutions = (base.single.resolution, r.single.resolution)
    return ClaimEvidence(r.single_values, base.single_values, r.higher_is_better, resolutions)


# --- what a run says of them ---------------------------------------------------------------


def lines(a: RunAnalysis) -> list[str]:
    """The verdict's line per claim the study wrote (the SLOs are on their workload's line)."""
    return [j.line() for j in a.claims if not j.claim.slo]


def slo_part(j: JudgedClaim) -> str:
    """ "web 5.0 [4.8–5.2 ms] ≤ 50 ms: held": an SLO claim within its workload's line."""
    role = j.claim.metric.split(".")[1]
    tail = f" ({s})" if (s := j.settle()) else ""
    return f"{role} {j.measured()} ≤ {j.claim.bound:g} ms: {j.outcome}{tail}"


def as_json(j: JudgedClaim) -> dict:
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
        "judged": j.judged,
        "why": j.why or None,
        "significant_before_correction": j.before_correction,
        "repetitions_to_settle": j.repetitions,
    }
