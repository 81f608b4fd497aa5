"""Workloads by name and tool (or suite): ``{name: disk, tool: fio}`` picks
``WORKLOADS["disk"]["fio"]``, ``{name: cpu, suite: micro}`` ``WORKLOADS["cpu"]["micro"]``."""

from hvbench.workloads.base import Workload, WorkloadSettings
from hvbench.workloads.bonnie import Bonnie
from hvbench.workloads.boot import Boot
from hvbench.workloads.consolidation import Consolidation
from hvbench.workloads.cpu import Cpu
from hvbench.workloads.cpu_apps import CpuApps
from hvbench.workloads.dbench import Dbench
from hvbench.workloads.dd import Dd
from hvbench.workloads.fio import Fio
from hvbench.workloads.iperf import Iperf
from hvbench.workloads.iperf3 import Iperf3
from hvbench.workloads.kernbench import Kernbench
from hvbench.workloads.latency import Latency
from hvbench.workloads.memory import Memory
from hvbench.workloads.migration import Migration
from hvbench.workloads.snapshot import Snapshot

_CLASSES: tuple[type[Workload], ...] = (
    CpuApps,
    Cpu,
    Kernbench,
    Bonnie,
    Fio,
    Dbench,
    Dd,
    Iperf3,
    Iperf,
    Latency,
    Boot,
    Memory,
    Consolidation,
    Migration,
    Snapshot,
)

WORKLOADS: dict[str, dict[str | None, type[Workload]]] = {}
for _cls in _CLASSES:
    WORKLOADS.setdefault(_cls.name, {})[_cls.tool] = _cls


def selector(name: str) -> str:
    """The study key that picks among the classes of a workload name (``tool``, ``suite``)."""
    return next(iter(WORKLOADS[name].values())).selector


def workload_class(name: str, choice: str | None) -> type[Workload]:
    """The class for a workload name and the value of its selector key; the first registered
    class is the default."""
    classes = WORKLOADS[name]
    return classes[choice] if choice is not None else next(iter(classes.values()))


def workload_of(settings: WorkloadSettings) -> Workload:
    """The workload object for validated settings."""
    choice = getattr(settings, selector(settings.name), None)
    return workload_class(settings.name, choice)(settings)
