"""Single vs aggregate: per-instance figures, their sum, scaling and overcommit.

A cell with N instances gives, per repetition, N values of a metric. The **single** figure is
their mean, the **aggregate** their sum (for throughput metrics only: summing times or
percentages means nothing); scaling efficiency compares the aggregate with N times the
platform's per-instance aggregate at its smallest count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hvbench.analysis.run import CellInfo, MetricResult


def is_throughput(unit: str, higher_is_better: bool) -> bool:
    """Summable over instances: higher is better and not a share (%CPU cannot be added up)."""
    return higher_is_better and unit.strip() != "%"


@dataclass
class Series:
    """One metric of one cell, from the store's (repetition, instance, value) rows."""

    reps: np.ndarray
    single: np.ndarray
    """Per repetition, mean over the instances that reported."""
    aggregate_reps: np.ndarray
    aggregate: np.ndarray
    """Per repetition in which every instance reported, the sum over instances."""
    per_instance: np.ndarray
    """Per instance, mean over repetitions."""


def series(triples: np.ndarray, instances: int) -> Series:
    """Group (repetition, instance, value) rows; a repetition where an instance did not report
    has a single figure but no aggregate (a sum with a missing part would look like a loss)."""
    reps, rep_idx = np.unique(triples[:, 0], return_inverse=True)
    counts = np.bincount(rep_idx, minlength=len(reps))
    sums = np.bincount(rep_idx, weights=triples[:, 2], minlength=len(reps))
    full = counts >= instances
    _, inst_idx = np.unique(triples[:, 1], return_inverse=True)
    per_instance = np.bincount(inst_idx, weights=triples[:, 2]) / np.bincount(inst_idx)
    return Series(reps.astype(int), sums / counts, reps[full].astype(int), sums[full], per_instance)


def overcommit(cell: CellInfo, states: list[dict], host_cores: int) -> bool | None:
    """Whether the cell ran more vCPUs than the host has cores (the driver says, else derive)."""
    flags = [s.get("overcommit") for s in states if isinstance(s.get("overcommit"), bool)]
    if flags:
        return any(flags)
    for s in states:
        vcpus, cores = s.get("vcpus_total"), s.get("host_cores")
        if isinstance(vcpus, int) and isinstance(cores, int) and cores > 0:
            return vcpus > cores
    if cell.driver == "native":
        return False
    vcpus = cell.platform_settings.get("vcpus")
    if isinstance(vcpus, int) and host_cores > 0:
        return vcpus * cell.instances > host_cores
    return None


def scaling(results: list[MetricResult]) -> None:
    """Set each throughput result's scaling efficiency against its platform's smallest count."""
    groups: dict[tuple[str, str, str], list[MetricResult]] = defaultdict(list)
    for r in results:
        if r.aggregate is not None:
            groups[(r.cell.platform, r.cell.workload, r.name)].append(r)
    for rs in groups.values():
        first = min(rs, key=lambda r: r.cell.instances)
        if first.aggregate.mean <= 0:
            continue
        per_first = first.aggregate.mean / first.cell.instances
        for r in rs:
            r.efficiency = r.aggregate.mean / (r.cell.instances * per_first)
