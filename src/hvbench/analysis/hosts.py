"""Across the hosts of a fleet run: the host is one more dimension of a run's figures.

Each host's run is analysed on its own (its baseline measured on that host), so "% of native"
is always within one host; across hosts one reads how the same platform fares on each machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hvbench.analysis import RunAnalysis


@dataclass(frozen=True)
class HostFigure:
    """One headline figure of one cell of one host's run."""

    host: str
    run_id: str
    platform: str
    """The platform's label (what ran, e.g. ``qemu-virtio [kvm]``)."""
    workload: str
    instances: int
    metric: str
    unit: str
    mean: float
    ci_low: float
    ci_high: float
    pct_of_native: float | None
    """Against the baseline on the same host; None where the cell has no baseline."""
    pct_low: float | None
    pct_high: float | None
    identical_repetitions: str | None = None
    """Where the repetitions show no spread the measurement resolves (``SampleSummary.identical``):
    the interval is then its resolution's, or none."""

    def as_json(self) -> dict:
        """JSON-safe: NaN and infinite bounds (untested, unbounded) become null."""
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in vars(self).items()
        }


def across_hosts(runs: dict[str, RunAnalysis]) -> list[HostFigure]:
    """The headline figures of every host's run, host by host in name order."""
    figures = []
    for host, a in sorted(runs.items()):
        for r in a.results:
            if not r.headline:
                continue
            n = r.vs_baseline
            figures.append(
                HostFigure(
                    host=host,
                    run_id=a.run_id,
                    platform=a.label(r.cell.platform),
                    workload=r.cell.workload,
                    instances=r.cell.instances,
                    metric=r.name,
                    unit=r.unit,
                    mean=r.single.mean,
                    ci_low=r.single.ci_low,
                    ci_high=r.single.ci_high,
                    pct_of_native=n.pct_of_native if n else None,
                    pct_low=n.pct_low if n else None,
                    pct_high=n.pct_high if n else None,
                    identical_repetitions=r.single.identical,
                )
            )
    return figures
