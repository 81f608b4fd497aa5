"""The report's first lines: each workload class's answer in plain words.

A figure is stated with its 95% interval when that interval excludes native; "no significant
difference" only when the interval lies within ±5% of native (``stats.PRACTICAL``);
"inconclusive: between −x% and +y%" when it admits more; "not tested (1 repetition)" when a
side has a single repetition. Each workload is judged at its smallest instance count (usually
1, the seeds' "single" figures); scaling has a line of its own, with the interval of its gain.
Every figure with its interval is printed to the digits that interval supports
(``units.interval_strings``), and each workload is named for people (``RunAnalysis.title``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hvbench.analysis import claims, slo, storms
from hvbench.analysis.cost import FAR_FROM_BUSY, work_shortfall
from hvbench.analysis.intervals import MEDIAN_MIN_N, RESOLUTION_UNKNOWN
from hvbench.analysis.model import (
    COMPOSITE,
    Climb,
    Density,
    MetricResult,
    RunAnalysis,
    pick_baseline_cell,
)
from hvbench.analysis.normalize import Normalized, apart, figure, normalize, rounded
from hvbench.analysis.ratios import Ratio, ratio
from hvbench.analysis.readings import Reading, reading
from hvbench.analysis.stats import PRACTICAL
from hvbench.metrics import DENSITY, OVERHEAD
from hvbench.store import CellView
from hvbench.store.ascent import AscentStop

DOWN, UP = (Reading.LOSS, Reading.SMALL_LOSS), (Reading.GAIN, Reading.SMALL_GAIN)
SAME_WORK = "host CPU for the same work"
"""What a workload of fixed-rate clients (consolidation) is read on in place of its metrics."""
SHORT = {"inbound": "in", "outbound": "out"}


def headline(a: RunAnalysis, workload: str) -> str | None:
    """The one metric that stands for a workload where one is needed (cost, scaling): its
    first headline metric, else its first metric."""
    rs = [r for r in a.results if r.cell.workload == workload]
    first = next((r.name for r in rs if r.headline), None)
    return first or (rs[0].name if rs else None)


def _headlines(rs: list[MetricResult]) -> list[MetricResult]:
    """What a workload's verdict is judged on: its headline metrics (disk read and write,
    network in and out, the cpu composite), so that side figures (context switches, %CPU,
    spreads) do not dilute it, and figures above native that cannot be wins
    (``suspect_line``) do not inflate it."""
    return [r for r in rs if r.headline and not r.suspect]


def _at(a: RunAnalysis, workload: str, count: int) -> dict[str, list[MetricResult]]:
    """Results of one workload and instance count, per platform, in the run's platform order."""
    out: dict[str, list[MetricResult]] = {p: [] for p in a.platforms}
    for r in a.results:
        if r.cell.workload == workload and r.cell.instances == count:
            out[r.cell.platform].append(r)
    return {p: rs for p, rs in out.items() if rs}


def _pct(x: float) -> str:
    return f"{x:.0f}%" if math.isfinite(x) else "n/a"


def _per_repetition(rs: list[MetricResult], up: bool) -> np.ndarray:
    """Per repetition that every one of ``rs`` measured, the geometric mean of their figures,
    each turned the way ``up`` says (1/x for a time among throughputs). A figure of 0 makes its
    repetition's mean 0, the limit, rather than leaving the repetition out: a time of 0 among
    times, or a throughput of 0, is a figure like any other."""
    values = [
        dict(
            zip(
                r.repetitions.tolist(),
                r.single_values ** (1 if r.higher_is_better == up else -1),
                strict=True,
            )
        )
        for r in rs
    ]
    common = sorted(set.intersection(*(set(v) for v in values)))
    table = np.array([[v[rep] for rep in common] for v in values], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = −∞: a mean of 0
        gm = np.exp(np.mean(np.log(table), axis=0)) if common else np.empty(0)
    return gm[np.isfinite(gm)]


def combined(a: RunAnalysis, workload: str, used: list[MetricResult]) -> Normalized | None:
    """The figure a platform's verdict states: its one headline metric's % of the baseline, or,
    for several (throughput in and out, read and write), the ratio of their per-repetition
    geometric means on each side with its interval, read in their direction (times among
    throughputs turned). Taken per repetition, the metrics measured together keep their shared
    noise in the interval."""
    if len(used) == 1:
        return used[0].vs_baseline
    cell = used[0].cell
    base_cells = [c for c in a.cells if c.platform == a.baseline]
    pick = pick_baseline_cell(base_cells, workload, cell.instances)
    if pick is None:
        return None
    found = [a.result(pick.platform, workload, r.name, pick.instances) for r in used]
    bases = [b for b in found if b is not None]
    if len(bases) < len(found):
        return None
    up = any(r.higher_is_better for r in used)
    values, base_values = _per_repetition(used, up), _per_repetition(bases, up)
    resolutions = (_resolution(bases, base_values), _resolution(used, values))
    return normalize(values, base_values, up, resolutions)


def _resolution(rs: list[MetricResult], gm: np.ndarray) -> float | None:
    """The resolution of ``_per_repetition``'s mean: a geometric mean moves by the mean of its
    factors' relative moves, so its resolution relative to it is the mean of theirs."""
    rel = [
        q / abs(r.single.mean)
        for r in rs
        if (q := r.single.resolution) is not None and r.single.mean
    ]
    if not len(gm) or len(rel) < len(rs):
        return None
    return float(np.mean(gm) * np.mean(rel))


def _no_repetition(used: list[MetricResult]) -> str:
    """Why no repetition has a figure over several headline metrics: one of them was never
    above 0, which a geometric mean cannot hold, or they were measured in different ones."""
    never = [r.name for r in used if not (r.single_values > 0).any()]
    if never:
        were = "was" if len(never) == 1 else "were"
        return (
            f"{', '.join(never)} {were} 0 or less in every repetition (a geometric mean cannot "
            "hold it)"
        )
    return "no repetition in which all of its headline figures were measured above 0"


@dataclass(frozen=True)
class Headline:
    """A platform's figure of a workload against the baseline, as its verdict states it
    (``keeps_line``) and the run's matrix shows it (``report.summary``): one source for both."""

    platform: str
    figure: Normalized | None
    """None where it was left out (``why``)."""
    why: str | None
    metrics: int
    """How many headline metrics stand behind the figure (``combined``)."""
    parts: tuple[Part, ...] = ()
    """Each headline metric's own figure where they read in opposite directions
    (``Reading.MIXED``)."""
    same_work: bool = False
    """The figure is the host CPU for the same work (``SAME_WORK``), not the metrics'."""

    @property
    def reading(self) -> str:
        return Reading.MIXED if self.parts else self.figure.reading() if self.figure else ""


class Part(NamedTuple):
    """One headline metric of a mixed reading: its short name ("in", "read") and figure."""

    name: str
    figure: Normalized


def _part_name(r: MetricResult) -> str:
    """A headline metric's name within its workload: "in" or "out" for a direction, else its
    name's last part without the unit ("read" of disk.dd.read_mbps)."""
    if r.direction in SHORT:
        return SHORT[r.direction]
    return r.name.rsplit(".", 1)[-1].rsplit("_", 1)[0]


def _mixed(used: list[MetricResult]) -> tuple[Part, ...]:
    """Each of ``used``'s figures where one reads as a loss and another as a gain; none where
    they do not move apart."""
    parts = tuple(Part(_part_name(r), r.vs_baseline) for r in used if r.vs_baseline is not None)
    readings = {p.figure.reading() for p in parts}
    return () if readings.isdisjoint(DOWN) or readings.isdisjoint(UP) else parts


def mixed_text(parts: tuple[Part, ...]) -> str:
    """ "in 92.0% [91.6–92.4%] (loss), out 108.0% [107.6–108.4%] (gain)"."""
    return ", ".join(
        f"{p.name} {' '.join(x for x in figure(p.figure, 'pct', '%') if x)} ({p.figure.reading()})"
        for p in parts
    )


def headlines(a: RunAnalysis, workload: str) -> list[Headline]:
    """Each platform's headline figure (the baseline's left out) at the workload's smallest
    instance count, in the run's platform order; a platform with neither a figure nor a reason
    it has none is not listed. For fixed-rate clients (consolidation), the host CPU for the same
    work (``same_work``)."""
    if a.baseline is None:
        return []
    count = min(a.counts(workload))
    cells = _same_work_cells(a, workload)
    if cells is not None and (base := cells.get(a.baseline)) is not None:
        figures = {p: same_work(a, c, base) for p, c in cells.items() if c is not base}
        return [
            Headline(p, v, _same_work(a, cells[p], base) if v is None else None, 0, same_work=True)
            for p, v in figures.items()
        ]
    out = []
    for platform, rs in _at(a, workload, count).items():
        if platform == a.baseline:
            continue
        used = [r for r in _headlines(rs) if r.vs_baseline is not None]
        v = combined(a, workload, used) if used else None
        why = a.missing.get((platform, workload, count))
        if why is None and v is not None and v.n == 0:
            why = _no_repetition(used)
        if why is not None or v is not None:
            figure = None if why is not None else v
            parts = _mixed(used) if figure is not None else ()
            out.append(Headline(platform, figure, why, len(used), parts))
    return out


def keeps_line(a: RunAnalysis, workload: str) -> str | None:
    """ "disk: kvm-virtio keeps 92% [90–94%] of native; emulated 41% [39–43%]; uml: not tested
    (1 repetition)", over the workload's headline metrics (``combined``)."""
    if a.baseline is None:
        return None
    count = min(a.counts(workload))
    found = headlines(a, workload)
    texts: list[str] = []
    said = False
    for h in found:
        name, v = a.label(h.platform), h.figure
        if v is None:
            texts.append(f"{name}: left out: {h.why}")
            continue
        text = " ".join(x for x in figure(v, "pct", "%") if x)
        kind = h.reading
        base = a.label(a.baseline)
        if kind == Reading.MIXED:
            texts.append(f"{name} {Reading.MIXED}: {mixed_text(h.parts)}")
        elif kind in (Reading.LOSS, Reading.GAIN) and (distance := apart(v)) is not None:
            texts.append(f"{name} {distance[0]} {distance[1]} {base}")
        elif kind in (Reading.LOSS, Reading.GAIN):
            texts.append(f"{name} {text}" if said else f"{name} keeps {text} of {base}")
            said = True
        elif kind == Reading.INCONCLUSIVE:
            texts.append(f"{name}: {v.describe()}")
        else:
            texts.append(f"{name} {text}: {v.describe()}")
    # a mixed figure is each metric's own, not their geometric mean
    n_metrics = max((h.metrics for h in found if h.figure is not None and not h.parts), default=0)
    if not texts:
        return None
    names = a.metric_names(workload)
    if COMPOSITE in names:
        what = "composite score"
    elif n_metrics > 1:
        what = f"geometric mean of {n_metrics} throughput metrics"
    elif any(h.parts for h in found):
        what = "each headline metric"
    else:
        what = headline(a, workload) or ""
    where = f"{count} instance{'s' if count > 1 else ''}" + (f", {what}" if what else "")
    return f"{a.title(workload)} ({where}): " + "; ".join(texts)


def same_work_lines(a: RunAnalysis, workload: str) -> list[str] | None:
    """For a workload of fixed-rate clients (consolidation), the seeds' figure of merit in
    place of ``keeps_line``: the host CPU for the same work against the baseline's, with its
    interval, then each platform's SLOs (claims, ``claims.slo_claims``); None for any other
    workload. The achieved
    rates only check that the work was the same (``work_shortfall``)."""
    cells = _same_work_cells(a, workload)
    if cells is None:
        return None
    count = min(a.counts(workload))
    base = cells.get(a.baseline) if a.baseline else None
    costs = [_same_work(a, c, base) for p, c in cells.items() if base is None or c is not base]
    where = f"{count} instance{'s' if count > 1 else ''}"
    slos = [j for j in a.claims if j.claim.slo and j.workload == workload]
    levels = [
        f"{a.label(p)}: " + ", ".join(claims.slo_part(j) for j in slos if j.platform == p)
        for p in cells
        if any(j.platform == p for j in slos)
    ]
    out = [f"{a.title(workload)} ({where}, host CPU for the same work): " + "; ".join(costs)]
    if levels:  # the SLOs are claims (``claims.slo_claims``), judged with the run's others
        out.append(
            f"{a.title(workload)} SLOs (mean p95 over the repetitions, 95% interval, against its "
            "limit): " + "; ".join(levels)
        )
    return out


def _same_work_cells(a: RunAnalysis, workload: str) -> dict[str, CellView] | None:
    """A workload's cells at its smallest count by platform, where its clients run at fixed
    rates under SLOs (consolidation): read on the host CPU for the same work; else None."""
    count = min(a.counts(workload))
    cells = {c.platform: c for c in a.cells if c.workload == workload and c.instances == count}
    return cells if slo.has_slos(a.rows, {c.id for c in cells.values()}) else None


def same_work(a: RunAnalysis, cell: CellView, base: CellView) -> Normalized | None:
    """A platform's host CPU for a workload's fixed work against the baseline's (lower is
    better), from the host CPU of each repetition (the clients' left out): what its sentence
    (``_same_work``) and its matrix cell state. None where either's is not measured or it did
    less work (``work_shortfall``)."""
    h, b = a.host_cpu.get(cell.id), a.host_cpu.get(base.id)
    if h is None or b is None or work_shortfall(a.results, cell.id, base.id):
        return None
    values = np.array([h.busy_cores[r] for r in sorted(h.busy_cores)])
    base_values = np.array([b.busy_cores[r] for r in sorted(b.busy_cores)])
    return normalize(values, base_values, higher_is_better=False)


def _same_work(a: RunAnalysis, cell: CellView, base: CellView | None) -> str:
    """ "container 0.97× [0.93–1.01×] native's (10.1% of the host against 10.4%): no
    significant difference (within ±5%)", from the host CPU of each repetition (the clients'
    left out); that it did less work, where its rates fell short of the baseline's."""
    name, h = a.label(cell.platform), a.host_cpu.get(cell.id)
    if h is None:
        return f"{name}: host CPU not measured"
    if base is None:
        return f"{name} {100 * h.busy:.1f}% of the host"
    b, base_name = a.host_cpu.get(base.id), a.label(base.platform)
    if b is None:
        return f"{name} {100 * h.busy:.1f}% of the host ({base_name}'s not measured)"
    short = work_shortfall(a.results, cell.id, base.id)
    if short:
        return (
            f"{name} did less work than {base_name} ({', '.join(short)}): its "
            f"{100 * h.busy:.1f}% of the host is not the cost of the same work"
        )
    v = same_work(a, cell, base)
    assert v is not None, "both measured, the same work"
    shares = f"{100 * h.busy:.1f}% of the host against {100 * b.busy:.1f}%"
    kind = v.reading()
    est, low, high = rounded(v.ratio, v.ratio_low, v.ratio_high, 1.0)
    if kind == Reading.NOT_TESTED:
        return f"{name} {est}× {base_name}'s ({shares}): {v.describe()}"
    text = f"{name} {est}× [{low}–{high}×] {base_name}'s ({shares})"
    small = f"by less than {100 * PRACTICAL:.0f}%"
    return {
        Reading.LOSS: f"{text}: more host CPU for the same work",
        Reading.GAIN: f"{text}: less host CPU for the same work",
        Reading.SMALL_LOSS: f"{text}: more host CPU for the same work, {small}",
        Reading.SMALL_GAIN: f"{text}: less host CPU for the same work, {small}",
        Reading.EQUIVALENT: f"{text}: {v.describe()}",
    }.get(kind, f"{text}: {Reading.INCONCLUSIVE}")


def symmetry_line(a: RunAnalysis, workload: str) -> str | None:
    """ "net: xen-pv is symmetric, kvm-e1000 loses 30% outbound"; nothing where every
    platform is symmetric (the report's network section says so): the verdict holds findings."""
    count = min(a.counts(workload))
    pairs = [s for s in a.symmetry if s.cell.workload == workload and s.cell.instances == count]
    if not any(s.asymmetric for s in pairs):
        return None
    symmetric = sorted({a.label(s.cell.platform) for s in pairs if not s.asymmetric})
    lossy = [
        f"{a.label(s.cell.platform)} loses {_pct(100 * s.gap)} {s.weaker}"
        + ("" if s.tested else f", {Reading.NOT_TESTED} (1 repetition)")
        for s in pairs
        if s.asymmetric
    ]
    parts = []
    if symmetric:
        parts.append(f"{', '.join(symmetric)} {'is' if len(symmetric) == 1 else 'are'} symmetric")
    parts.extend(lossy)
    return f"{a.title(workload)} direction: " + ", ".join(parts)


def cost_line(a: RunAnalysis, workload: str) -> str | None:
    """ "net: host CPU per Gbit/s against native's (net.iperf3.inbound_gbps): virtio 1.1× [1.0–
    1.2×]; tcg 2.0× [1.9–2.1×]" (per-core figures, headline), each platform's read off the
    interval of its ratio to the baseline's like a % of native. Without the baseline's figure
    (no baseline, or its host CPU not measured) the reference is the cheapest platform, and the
    line says why."""
    name = headline(a, workload)
    count = min(a.counts(workload))
    per_core = {
        p: r
        for p, rs in _at(a, workload, count).items()
        for r in rs
        if r.name == name and r.per_core is not None and r.per_core.mean > 0 and not r.suspect
    }
    if len(per_core) < 2:
        return None
    if a.baseline in per_core:
        ref, why = per_core[a.baseline], ""
    else:
        ref = max(per_core.values(), key=lambda r: r.per_core.mean if r.per_core else 0.0)
        missing = "no baseline" if a.baseline is None else f"{a.label(a.baseline)}'s not measured"
        why = f", the cheapest ({missing})"
    work = "composite score" if name == COMPOSITE else ref.unit
    parts = [_cost_part(a, r, ref) for r in per_core.values() if r is not ref]
    return (
        f"{a.title(workload)}: host CPU per {work} against {a.label(ref.cell.platform)}'s{why} "
        f"({name}): " + "; ".join(parts)
    )


def _cost_part(a: RunAnalysis, r: MetricResult, ref: MetricResult) -> str:
    """One platform's host CPU per unit of work as a multiple of the reference's: "tcg 2.0×
    [1.9–2.1×]", or what its interval lets one say."""
    assert r.per_core is not None and ref.per_core is not None, "cost_line keeps measured ones"
    assert r.per_core_values is not None and ref.per_core_values is not None, "and their values"
    x = ratio(
        r.per_core_values,
        ref.per_core_values,
        resolutions=(r.per_core.resolution, ref.per_core.resolution),
    )  # the reference's work per core over this platform's: above 1, it costs more
    return f"{a.label(r.cell.platform)} {cost_text(x)}"


def cost_text(x: Ratio) -> str:
    """Host CPU for the same work as a multiple of the reference's, with its interval and
    what it lets one say: "2.0× [1.9–2.1×]", "1.02× [0.98–1.06×]: no significant difference
    (within ±5%)", "2.0×: not tested (1 repetition)"."""
    what = reading(x.low, x.high, x.tested)
    est, low, high = rounded(x.estimate, x.low, x.high, 1.0)
    if what == Reading.NOT_TESTED:
        return f"{est}×: {Reading.NOT_TESTED} ({untested(x)})"
    text = f"{est}× [{low}–{high}×]"
    if what == Reading.EQUIVALENT:
        return f"{text}: {Reading.EQUIVALENT} (within ±{100 * PRACTICAL:.0f}%)"
    return f"{text}: {Reading.INCONCLUSIVE}" if what == Reading.INCONCLUSIVE else text


def scaling_series(a: RunAnalysis, workload: str) -> dict[str, list[MetricResult]]:
    """What a workload's scaling is read on, per platform that has any (in the run's order):
    the results of its ``headline`` metric that have an aggregate, by instance count. The
    verdict's line and the report's figure both read it."""
    name = headline(a, workload)
    series = {}
    for platform in a.platforms:
        rs = sorted(
            (
                r
                for r in a.results
                if r.cell.platform == platform
                and r.cell.workload == workload
                and r.name == name
                and r.aggregate is not None
            ),
            key=lambda r: r.cell.instances,
        )
        if rs:
            series[platform] = rs
    return series


def scaling_gain(first: MetricResult, last: MetricResult) -> Ratio | None:
    """``last``'s aggregate over ``first``'s (its platform's smallest count), with Fieller's
    interval of the aggregates' means: what the scaling line and table read; None where either
    has no aggregate or the first's is 0."""
    if (
        first.aggregate is None
        or last.aggregate is None
        or first.aggregate_values is None
        or last.aggregate_values is None
        or not first.aggregate.mean
    ):
        return None
    return ratio(
        first.aggregate_values,
        last.aggregate_values,
        resolutions=(first.aggregate.resolution, last.aggregate.resolution),
    )


def untested(x: Ratio) -> str | None:
    """Why a ratio has no interval to read, in words ("1 repetition", "unbounded"); None where
    it has one."""
    if x.tested and x.bounded:
        return None
    n = min(x.n_a, x.n_b)
    if n < 2:
        return f"{n} repetition{'s' if n != 1 else ''}"
    return RESOLUTION_UNKNOWN if x.unresolved else "unbounded"


def efficiency_text(first: MetricResult, last: MetricResult) -> str:
    """Scaling efficiency at ``last``'s count against ``first``'s, with its interval (the gain's,
    over the linear gain): "95% [90–100%]"; "106% [93–120%]: no departure from linear shown"
    where it holds 100%; "106%, not tested (1 repetition)"; "100%" at the first count itself."""
    x = scaling_gain(first, last) if last is not first else None
    if x is None:
        return "100%" if last is first else ""
    linear = last.cell.instances / first.cell.instances
    per = 100 / linear
    eff, low, high = rounded(per * x.estimate, per * x.low, per * x.high, 100.0)
    if (why := untested(x)) is not None:
        return f"{eff}%, {Reading.NOT_TESTED} ({why})"
    text = f"{eff}% [{low}–{high}%]"
    return f"{text}: no departure from linear shown" if x.low <= linear <= x.high else text


def scaling_line(a: RunAnalysis, workload: str) -> str | None:
    """ "cpu scaling of the aggregate: kvm 7.6× [7.2–8.0×] at 8 vs 1 (95% [90–100%] efficiency,
    overcommitted)"; "kvm 2.1× [1.8–2.4×] at 2 vs 1: no departure from linear shown" where the
    interval of the gain (Fieller's, of the aggregates' means) holds linear scaling."""
    parts = []
    for platform, rs in scaling_series(a, workload).items():
        first, last = rs[0], rs[-1]
        x = scaling_gain(first, last) if len(rs) > 1 else None
        if x is None:
            continue
        linear = last.cell.instances / first.cell.instances
        gain, low, high = rounded(x.estimate, x.low, x.high, linear)
        per = 100 / linear
        eff, eff_low, eff_high = rounded(per * x.estimate, per * x.low, per * x.high, 100.0)
        over = ", overcommitted" if last.overcommit else ""
        at = f"at {last.cell.instances} vs {first.cell.instances}"
        name = a.label(platform)
        if (why := untested(x)) is not None:
            parts.append(
                f"{name} {gain}× {at} ({eff}% efficiency{over}, {Reading.NOT_TESTED}: {why})"
            )
        elif x.low <= linear <= x.high:
            parts.append(
                f"{name} {gain}× [{low}–{high}×] {at}: no departure from linear shown{over}"
            )
        else:
            parts.append(
                f"{name} {gain}× [{low}–{high}×] {at} ({eff}% [{eff_low}–{eff_high}%] "
                f"efficiency{over})"
            )
    return f"{a.title(workload)} scaling of the aggregate: " + "; ".join(parts) if parts else None


def suspect_line(a: RunAnalysis, workload: str) -> str | None:
    """ "disk above native, not a win: uml disk.dd.write_mbps 167%, disk.dd.read_mbps 164%
    (likely the host page cache: UML's ubd has no O_DIRECT)": the figures ``keeps_line`` leaves
    out, each platform's with their cause, said once."""
    count = min(a.counts(workload))
    by_cause: dict[tuple[str, str], list[str]] = {}
    for rs in _at(a, workload, count).values():
        for r in rs:
            if r.suspect and r.vs_baseline is not None:
                figures = by_cause.setdefault((a.label(r.cell.platform), r.suspect), [])
                figures.append(f"{r.name} {_pct(r.vs_baseline.pct_of_native)}")
    parts = [f"{who} {', '.join(figures)} ({why})" for (who, why), figures in by_cause.items()]
    if not parts:
        return None
    base = a.label(a.baseline) if a.baseline else "the baseline"
    return f"{a.title(workload)} above {base}, not a win: " + "; ".join(parts)


def ran_line(a: RunAnalysis) -> str | None:
    """ "qemu-virtio [tcg], qemu-emulated [tcg]: accel auto chose tcg: no /dev/kvm on this
    host": why platforms left to choose their accelerator did not get KVM."""
    fell_back: dict[str, list[str]] = {}
    for c in a.cells:
        reason = c.ran.mode_reason
        if reason is not None and c.accel == "tcg":
            names = fell_back.setdefault(reason, [])
            if (name := a.label(c.platform)) not in names:
                names.append(name)
    lines = [f"{', '.join(n)}: accel auto chose tcg: {why}" for why, n in fell_back.items()]
    return "; ".join(lines) or None


def density_line(a: RunAnalysis, workload: str) -> str | None:
    """ "density: instances of their size this host's memory fits: tcg 92 (33 MiB overhead
    each)" from the memory workload's figures at the smallest count."""
    parts = []
    for platform, rs in _at(a, workload, min(a.counts(workload))).items():
        by_name = {r.name: r for r in rs}
        fit, overhead = by_name.get(DENSITY.name), by_name.get(OVERHEAD.name)
        if fit is not None and overhead is not None:
            parts.append(
                f"{a.label(platform)} {fit.single.mean:.0f} "
                f"({overhead.single.mean:.0f} MiB overhead each)"
            )
    return (
        "density: instances of their size this host's memory fits: " + "; ".join(parts)
        if parts
        else None
    )


def stop_cause(stop: AscentStop) -> str:
    """Why an ascent stopped, with the host and the clients at that step: "slo: instance 7
    (app) missed its SLO: ...; host CPU 36% (clients 3%), memory 41%: far from busy, so the
    limit was not the platform's CPU or memory; clients on schedule: ..."."""
    parts = [f"{stop.by}: {stop.why}"]
    if stop.host_busy is not None and stop.memory_used is not None:
        cpu = stop.host_busy + (stop.clients or 0.0)
        known = (("instances", stop.instances), ("clients", stop.clients))
        shares = [f"{who} {100 * x:.0f}%" for who, x in known if x]
        split = f" ({', '.join(shares)})" if shares else ""
        host = f"host CPU {100 * cpu:.0f}%{split}, memory {100 * stop.memory_used:.0f}%"
        if stop.by in ("slo", "harness") and max(cpu, stop.memory_used) < FAR_FROM_BUSY:
            host += ": far from busy, so the limit was not the platform's CPU or memory"
        parts.append(host)
    if stop.clients_kept:
        parts.append(stop.clients_kept)
    return "; ".join(parts)


def _climb(d: Density, c: Climb) -> str:
    """ "ascent 2 stopped at 3 sets, slo: ..." or "ascent 3 unfinished"."""
    if c.stop is None:
        return f"ascent {c.number} {'held every step' if c.stopped_by == 'bound' else c.stopped_by}"
    at = _n(c.units_at_stop, d.unit) if c.units_at_stop else f"{c.stop.count} instances"
    return f"ascent {c.number} stopped at {at}, {stop_cause(c.stop)}"


def density_interval(d: Density) -> str:
    """The median of the steps the counted ascents held with its 95% interval
    (``Density.interval``), or why there is none: "median 4 [3–4 sets]", "median 4: 3 ascents
    give no 95% interval, 6 do", "not tested: 1 ascent"."""
    n = len(d.counted)
    if n <= 1:
        return f"not tested: {_n(n, 'ascents')}"
    low, high = d.interval
    if math.isnan(low):
        return f"median {d.units_held}: {n} ascents give no 95% interval, {MEDIAN_MIN_N} do"
    return f"median {d.units_held} [{low:g}–{high:g} {d.unit}]"


def _held(d: Density) -> str:
    """ "4 sets at SLO in 7 of 7 ascents (median 4 [4–4 sets])" or "2–4 sets at SLO (3
    ascents: 4, 4, 2; median 4: 3 ascents give no 95% interval, 6 do)"; "no density" where no
    ascent measured the platform (``model.COUNTED``)."""
    spread, n = d.spread, len(d.climbs)
    if spread is None:
        return f"no density: none of {n} ascent{'s' if n != 1 else ''} measured the platform"
    low, high = spread
    median = density_interval(d)
    if low == high:
        return f"{_n(low, d.unit)} at SLO in {len(d.counted)} of {_n(n, 'ascents')} ({median})"
    each = ", ".join(str(c.units_held) for c in d.counted)
    return f"{low}–{high} {d.unit} at SLO ({len(d.counted)} ascents: {each}; {median})"


def ascent_lines(a: RunAnalysis) -> list[str]:
    """ "consolidation: runc: 2–4 sets at SLO (3 ascents: 4, 4, 2; median 4: ...), host CPU
    22.3% at 4 sets; ascent 3 stopped at 3 sets, slo: instance 7 (app) missed ...": each
    platform's density over its ascents, every stop with its cause, where a workload ascended
    (``RunAnalysis.densities``); then each platform against the baseline's spread."""
    out = []
    for d in a.densities:
        line = f"{a.label(d.platform)}: {_held(d)}"
        if d.units_held:
            cpu = d.cpu_at(d.units_held)
            busy = "n/a" if cpu is None else f"{100 * cpu.busy:.1f}%"
            line += f", host CPU {busy} at {_n(d.units_held, d.unit)}"
        if all(c.stopped_by == "bound" for c in d.climbs):
            line += " (every step held: raise the bound)"
        stops = [_climb(d, c) for c in d.climbs if c.stopped_by != "bound"]
        out.append(f"{d.workload_name}: " + "; ".join([line, *stops]))
    return out + _density_against_baseline(a)


def _density_against_baseline(a: RunAnalysis) -> list[str]:
    """ "consolidation density: runc holds fewer sets than native in every ascent (2–3 vs
    4)", or that their spreads overlap: no difference shown."""
    out = []
    base = {d.workload: d for d in a.densities if d.platform == a.baseline}
    for d in a.densities:
        b = base.get(d.workload)
        if b is None or d is b or b.spread is None or d.spread is None:
            continue
        (low, high), (b_low, b_high) = d.spread, b.spread
        ranges = f"{_range(d.spread)} vs {_range(b.spread)} {d.unit}"
        name, base_name = a.label(d.platform), a.label(b.platform)
        if high < b_low:
            said = f"{name} holds fewer {d.unit} than {base_name} in every ascent ({ranges})"
        elif low > b_high:
            said = f"{name} holds more {d.unit} than {base_name} in every ascent ({ranges})"
        else:
            said = f"{name} and {base_name}: no difference shown ({ranges}: the spreads overlap)"
        out.append(f"{d.workload_name} density: {said}")
    return out


def _n(count: int, unit: str) -> str:
    """ "1 set", "2 sets": a count with its unit, singular for one."""
    return f"{count} {unit.removesuffix('s') if count == 1 else unit}"


def _range(spread: tuple[int, int]) -> str:
    low, high = spread
    return str(low) if low == high else f"{low}–{high}"


def verdicts(a: RunAnalysis) -> list[str]:
    """Every plain-words line of the report's top: what ran where it was left to choose, then
    workload by workload."""
    out = []
    if (line := ran_line(a)) is not None:
        out.append(line)
    for w in a.workloads():
        same_work = same_work_lines(a, w)
        if same_work is not None:  # the host CPU for it and the SLOs, not the fixed rates
            out.extend(same_work)
        lines = (
            keeps_line(a, w) if same_work is None else None,
            suspect_line(a, w),
            symmetry_line(a, w),
            cost_line(a, w) if same_work is None else None,
            scaling_line(a, w),
            density_line(a, w),
        )
        out.extend(line for line in lines if line is not None)
        out.extend(storms.lines(a, w))
    return out + ascent_lines(a) + claims.lines(a)
