"""The report's first lines: each workload class's answer in plain words.

Only differences that are significant are stated as differences; the rest read "no significant
difference". Each workload is judged at its smallest instance count (usually 1, the seeds'
"single" figures); scaling has a line of its own.
"""

from __future__ import annotations

import math

import numpy as np

from hvbench.analysis.run import COMPOSITE, MetricResult, RunAnalysis
from hvbench.analysis.stats import ALPHA, geometric_mean, welch

DENSITY = "memory.density_instances"
OVERHEAD = "memory.overhead_mib"
"""The memory workload's figures the density line reads (names from docs/metrics.md)."""


def headline(a: RunAnalysis, workload: str) -> str | None:
    """The one metric that stands for a workload where one is needed (cost, scaling): its
    first headline metric, else its first metric."""
    rs = [r for r in a.results if r.cell.workload == workload]
    first = next((r.name for r in rs if r.headline), None)
    return first or (rs[0].name if rs else None)


def _headlines(rs: list[MetricResult]) -> list[MetricResult]:
    """What a workload's verdict is judged on: its headline metrics (disk read and write,
    network in and out, the cpu composite), so that side figures (context switches, %CPU,
    spreads) do not dilute it."""
    return [r for r in rs if r.headline]


def _at(a: RunAnalysis, workload: str, count: int) -> dict[str, list[MetricResult]]:
    """Results of one workload and instance count, per platform, in the run's platform order."""
    out: dict[str, list[MetricResult]] = {p: [] for p in a.platforms}
    for r in a.results:
        if r.cell.workload == workload and r.cell.instances == count:
            out[r.cell.platform].append(r)
    return {p: rs for p, rs in out.items() if rs}


def _pct(x: float) -> str:
    return f"{x:.0f}%" if math.isfinite(x) else "n/a"


def keeps_line(a: RunAnalysis, workload: str) -> str | None:
    """ "disk: kvm-virtio keeps 92% of native; emulated 41%" (geometric mean over its metrics)."""
    if a.baseline is None:
        return None
    count = min(a.counts(workload))
    texts: list[str] = []
    n_metrics = 0
    for platform, rs in _at(a, workload, count).items():
        if platform == a.baseline:
            continue
        used = [r for r in _headlines(rs) if r.vs_baseline is not None]
        if not used:
            continue
        n_metrics = max(n_metrics, len(used))
        if not any(r.vs_baseline.significant for r in used):
            texts.append(f"{platform}: no significant difference")
            continue
        pct = _pct(float(geometric_mean([r.vs_baseline.pct_of_native for r in used])))
        said = any("keeps" in t for t in texts)
        texts.append(f"{platform} {pct}" if said else f"{platform} keeps {pct} of {a.baseline}")
    if not texts:
        return None
    names = a.metric_names(workload)
    if COMPOSITE in names:
        what = "composite score"
    elif n_metrics > 1:
        what = f"geometric mean of {n_metrics} throughput metrics"
    else:
        what = headline(a, workload) or ""
    where = f"{count} instance{'s' if count > 1 else ''}" + (f", {what}" if what else "")
    return f"{workload} ({where}): " + "; ".join(texts)


def symmetry_line(a: RunAnalysis, workload: str) -> str | None:
    """ "net: xen-pv is symmetric, kvm-e1000 loses 30% outbound"."""
    count = min(a.counts(workload))
    pairs = [s for s in a.symmetry if s.cell.workload == workload and s.cell.instances == count]
    if not pairs:
        return None
    symmetric = sorted({s.cell.platform for s in pairs if not s.asymmetric})
    lossy = [
        f"{s.cell.platform} loses {_pct(100 * s.gap)} {s.weaker}" for s in pairs if s.asymmetric
    ]
    parts = []
    if symmetric:
        parts.append(f"{', '.join(symmetric)} {'is' if len(symmetric) == 1 else 'are'} symmetric")
    parts.extend(lossy)
    return f"{workload} direction: " + ", ".join(parts)


def cost_line(a: RunAnalysis, workload: str) -> str | None:
    """ "same Gbit/s costs emulated 2.1× the host CPU of virtio" (per-core figures, headline)."""
    name = headline(a, workload)
    count = min(a.counts(workload))
    rs = [
        r
        for rs in _at(a, workload, count).values()
        for r in rs
        if r.name == name and r.per_core is not None and r.per_core.mean > 0
    ]
    if len(rs) < 2:
        return None
    best = max(rs, key=lambda r: r.per_core.mean)
    worst = min(rs, key=lambda r: r.per_core.mean)
    work = "composite score" if name == COMPOSITE else rs[0].unit
    p = welch(best.per_core_values, worst.per_core_values).p_value
    if not (math.isfinite(p) and p < ALPHA):
        return (
            f"{workload}: no significant difference in host CPU per {work} "
            f"({name}, {best.cell.platform} vs {worst.cell.platform})"
        )
    ratio = best.per_core.mean / worst.per_core.mean
    return (
        f"{workload}: the same {work} costs {worst.cell.platform} {ratio:.1f}× the host CPU of "
        f"{best.cell.platform} ({name})"
    )


def scaling_line(a: RunAnalysis, workload: str) -> str | None:
    """ "cpu scaling, aggregate at 8 instances vs 1: kvm 7.6× (95% efficiency, overcommitted)"."""
    name = headline(a, workload)
    parts = []
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
        if len(rs) < 2 or not rs[0].aggregate.mean:
            continue
        first, last = rs[0], rs[-1]
        gain = last.aggregate.mean / first.aggregate.mean
        over = ", overcommitted" if last.overcommit else ""
        parts.append(
            f"{platform} {gain:.1f}× at {last.cell.instances} vs {first.cell.instances} "
            f"({_pct(100 * (last.efficiency or np.nan))} efficiency{over})"
        )
    return f"{workload} scaling of the aggregate: " + "; ".join(parts) if parts else None


def density_line(a: RunAnalysis, workload: str) -> str | None:
    """ "density: instances of their size this host's memory fits: tcg 92 (33 MiB overhead
    each)" from the memory workload's figures at the smallest count."""
    parts = []
    for platform, rs in _at(a, workload, min(a.counts(workload))).items():
        by_name = {r.name: r for r in rs}
        fit, overhead = by_name.get(DENSITY), by_name.get(OVERHEAD)
        if fit is not None and overhead is not None:
            parts.append(
                f"{platform} {fit.single.mean:.0f} ({overhead.single.mean:.0f} MiB overhead each)"
            )
    return (
        "density: instances of their size this host's memory fits: " + "; ".join(parts)
        if parts
        else None
    )


def verdicts(a: RunAnalysis) -> list[str]:
    """Every plain-words line of the report's top, workload by workload."""
    out = []
    for w in a.workloads():
        lines = (
            keeps_line(a, w),
            symmetry_line(a, w),
            cost_line(a, w),
            scaling_line(a, w),
            density_line(a, w),
        )
        out.extend(line for line in lines if line is not None)
    return out
