"""Host CPU cost of the work: the host's CPU split during a cell and throughput per busy core.

The readings come from ``hvbench.host.monitor.CpuMonitor`` (two reads of /proc/stat and of the
instances' process times per sample, well under a millisecond).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from hvbench.analysis.intervals import SampleSummary
from hvbench.analysis.model import Climb, Density, HostCpu, MetricResult
from hvbench.store import HostCpuReading
from hvbench.store.ascent import AscentRecord

HOST_STATES = ("user", "nice", "system", "iowait", "irq", "softirq", "steal", "guest")
WORK_UNITS = {
    "KiB/s": ("GiB", 2**20),
    "KB/s": ("GB", 1e6),
    "MiB/s": ("GiB", 2**10),
    "MB/s": ("GB", 1e3),
    "Mbit/s": ("Gbit", 1e3),
    "Gbit/s": ("Gbit", 1.0),
}
"""Byte and bit rates -> the amount of work a cost is given for, and how many of the rate's
units make it: CPU-seconds per KiB would be a column of 1e-06."""


def host_cpu_of(samples: list[tuple[int, HostCpuReading | None]]) -> HostCpu | None:
    """Average the monitor's readings of a cell's samples (those with a usable wall time)."""
    good = [(r, h) for r, h in samples if h and h.wall_s > 0 and h.cores]
    if not good:
        return None
    shares: dict[str, list[float]] = defaultdict(list)
    busy, inst, clients = [], [], []
    cores_busy: dict[int, float] = {}
    steal: dict[int, float] = {}
    for rep, h in good:
        capacity = h.wall_s * h.cores
        for s in HOST_STATES:
            shares[s].append(h.states_s.get(s, 0.0) / capacity)
        busy.append(h.busy_s / capacity)
        cores_busy[rep] = h.busy_s / h.wall_s
        steal[rep] = h.states_s.get("steal", 0.0) / capacity
        if h.clients_s is not None:
            clients.append(sum(h.clients_s.values()) / capacity)
        per = [x for x in h.instances_s if x is not None]
        if per:
            inst.append(sum(per) / h.wall_s)
    return HostCpu(
        n=len(good),
        busy=float(np.mean(busy)),
        states={s: float(np.mean(v)) for s, v in shares.items()},
        busy_cores=cores_busy,
        steal=steal,
        instance_cores=float(np.mean(inst)) if inst else None,
        clients=float(np.mean(clients)) if clients else None,
    )


RATE_TOLERANCE = 0.02
"""How far below the baseline's achieved rate a cell's may fall and still count as the same
work (the consolidation SLO's default tolerance)."""


def work_shortfall(results: list[MetricResult], cell_id: int, base_id: int) -> list[str]:
    """The request rates (``*.achieved_per_s``, summed over the cell's instances) at which the
    cell did more than RATE_TOLERANCE less than the baseline cell, as "imap 0.33/s of 5/s":
    where there are any, the two did not do the same work, and their host CPU shares are not
    the cost of one work."""
    done: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in results:
        if r.name.endswith(".achieved_per_s") and r.cell.id in (cell_id, base_id):
            done[r.name][r.cell.id == base_id] += float(np.nansum(r.per_instance))
    return [
        f"{name.removesuffix('.achieved_per_s').split('.')[-1]} {got:.3g}/s of {base:.3g}/s"
        for name, (got, base) in sorted(done.items())
        if base > 0 and got < (1 - RATE_TOLERANCE) * base
    ]


def same_work(
    label: str, share: float, base_label: str, base_share: float, short: list[str] | None = None
) -> str:
    """The consolidation post's verdict on host CPU shares (0..1) for the same work: "the same
    work costs kvm-virtio X% of the host, native Y%: Z% more"; where the platform fell short
    of the baseline's rates (``work_shortfall``), that it did less work instead."""
    if short:
        return (
            f"{label} did less work than {base_label} ({', '.join(short)}): its "
            f"{100 * share:.1f}% of the host is not the cost of the same work"
        )
    head = f"the same work costs {label} {100 * share:.1f}% of the host, "
    head += f"{base_label} {100 * base_share:.1f}%"
    if base_share <= 0:
        return head
    change = share / base_share - 1
    return f"{head}: {100 * abs(change):.0f}% {'more' if change >= 0 else 'less'}"


@dataclass(frozen=True)
class WorkCost:
    """Host CPU for one unit of work, with the 95% interval (NaN where there is none)."""

    mean: float
    low: float
    high: float
    unit: str
    """ "host CPU-s per GB", "host CPU-s per 1000 events", "host cores per ×native"."""


def work_cost(unit: str, per_core: SampleSummary) -> WorkCost | None:
    """Host CPU per unit of work: the inverse of throughput per busy host core. For a rate of X
    per second, busy cores per (X/s) are CPU-seconds per X: given per GB, GiB or Gbit for byte
    and bit rates, per 1000 for counts (operations, events); a figure that is no rate (the cpu
    composite) costs host cores per unit of it. The interval is the per-core figure's, inverted
    (a decreasing map keeps its coverage): unbounded above where that reaches 0."""
    if not per_core.mean > 0:
        return None
    if unit in WORK_UNITS:
        work, scale = WORK_UNITS[unit]
        what = f"host CPU-s per {work}"
    elif unit.endswith("/s"):
        counted = unit.removesuffix("/s")
        scale = 1000.0
        what = f"host CPU-s per 1000 {'operations' if counted == '1' else counted}"
    else:
        scale, what = 1.0, f"host cores per {unit}"

    def inverse(x: float) -> float:
        return scale / x if x > 0 else math.inf if x <= 0 else math.nan

    return WorkCost(
        inverse(per_core.mean), inverse(per_core.ci_high), inverse(per_core.ci_low), what
    )


FAR_FROM_BUSY = 0.5
"""A host whose CPU (the clients' included) and memory were both below this share at a stop
was far from busy: the limit was not the platform's CPU or memory."""


def density(record: AscentRecord, host_cpu: dict[int, HostCpu | None]) -> Density:
    """An ascent's density from its record (``store.ascent``) and the host CPU of its cells by
    instance count. Each climb counts the steps it held below where it stopped."""
    counts = list(record.counts)
    climbs = []
    for k in range(1, max([record.climb_count, *record.held, *record.stops]) + 1):
        stop = record.stops.get(k)
        held = {n for n in record.held.get(k, []) if stop is None or n < stop.count}
        n = next((i for i, count in enumerate(counts) if count not in held), len(counts))
        if stop is not None:
            by, at = stop.by, counts.index(stop.count) + 1 if stop.count in counts else None
        else:
            by, at = ("bound" if n == len(counts) else "unfinished"), None
        climbs.append(Climb(k, n, by, stop, at))
    return Density(
        record.platform, record.workload, record.workload_name, record.unit, climbs, counts,
        host_cpu,
    )  # fmt: skip
