"""Service levels of a workload whose clients send at a fixed rate (consolidation's roles): each
role's p95 against its limit. With open-loop clients every platform does the same work, so the
verdict is the host CPU for it and these SLOs; the achieved rates only check that the work was
the same (``cost.work_shortfall``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hvbench.analysis.model import CellInfo
from hvbench.store import MetricView

P95 = ".latency_p95_ms"
MET = ".slo_met"
"""The suffixes of a role's p95 and SLO verdict (``consolidation.<role>.…``, docs/metrics.md)."""


@dataclass(frozen=True)
class RoleSlo:
    """One role's service level over a cell's samples."""

    role: str
    p95_ms: float
    """The worst p95 over the role's instances and the cell's repetitions."""
    limit_ms: float | None
    """Its SLO's p95 limit, from the cell's stored settings (None: a run stored before every
    role's load was kept there)."""
    missed: int
    """(instance, repetition) pairs that missed the SLO (its p95 or its rate)..."""
    of: int
    """...of those measured."""


def has_slos(rows: list[MetricView], cell_ids: set[int]) -> bool:
    """Whether the cells' samples give SLO verdicts (a workload of fixed-rate clients)."""
    return any(r.cell_id in cell_ids and r.name.endswith(MET) for r in rows)


def role_slos(rows: list[MetricView], cell: CellInfo) -> list[RoleSlo]:
    """Each role's SLO in the cell's ok samples, in the order the roles first appear."""
    p95: dict[str, list[float]] = defaultdict(list)
    met: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.cell_id != cell.id or r.value is None:
            continue
        if r.name.endswith(P95):
            p95[r.name.removesuffix(P95).split(".")[-1]].append(r.value)
        elif r.name.endswith(MET):
            met[r.name.removesuffix(MET).split(".")[-1]].append(r.value)
    load = cell.workload_settings.get("load") or {}
    return [
        RoleSlo(
            role,
            max(values),
            (load.get(role) or {}).get("p95_ms"),
            sum(1 for x in met.get(role, []) if x == 0),
            len(met.get(role, [])),
        )
        for role, values in p95.items()
    ]


def slo_text(slos: list[RoleSlo]) -> str:
    """ "web 3.1 ≤ 50 ms, app 235 > 200 ms (missed in 2 of 6): app missed" or "...: all held"."""
    parts = []
    for s in slos:
        if s.limit_ms is None:
            part = f"{s.role} {s.p95_ms:.3g} ms"
        else:
            part = f"{s.role} {s.p95_ms:.3g} {'≤' if s.p95_ms <= s.limit_ms else '>'} "
            part += f"{s.limit_ms:g} ms"
        if s.missed:
            part += f" (missed in {s.missed} of {s.of})"
        parts.append(part)
    missed = [s.role for s in slos if s.missed]
    verdict = f"{', '.join(missed)} missed" if missed else "all held"
    return f"{', '.join(parts)}: {verdict}"
