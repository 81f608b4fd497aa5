"""Service levels of a workload whose clients send at a fixed rate (consolidation's roles). With
open-loop clients every platform does the same work, so the verdict is the host CPU for it and
each role's p95 against its limit, which are claims judged with the run's others
(``claims.slo_claims``); the achieved rates only check that the work was the same
(``cost.work_shortfall``)."""

from __future__ import annotations

from hvbench.store import MetricView

P95 = ".latency_p95_ms"
MET = ".slo_met"
"""The suffixes of a role's p95 and SLO verdict (``consolidation.<role>.…``, docs/metrics.md)."""


def has_slos(rows: list[MetricView], cell_ids: set[int]) -> bool:
    """Whether the cells' samples give SLO verdicts (a workload of fixed-rate clients)."""
    return any(r.cell_id in cell_ids and r.name.endswith(MET) for r in rows)
