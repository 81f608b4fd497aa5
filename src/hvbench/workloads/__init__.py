"""Workloads by name and tool: ``{name: disk, tool: fio}`` picks ``WORKLOADS["disk"]["fio"]``."""

from hvbench.workloads.base import Workload
from hvbench.workloads.bonnie import Bonnie
from hvbench.workloads.boot import Boot
from hvbench.workloads.consolidation import Consolidation
from hvbench.workloads.cpu import Cpu
from hvbench.workloads.dbench import Dbench
from hvbench.workloads.dd import Dd
from hvbench.workloads.fio import Fio
from hvbench.workloads.iperf import Iperf
from hvbench.workloads.iperf3 import Iperf3
from hvbench.workloads.kernbench import Kernbench
from hvbench.workloads.latency import Latency
from hvbench.workloads.memory import Memory

_CLASSES: tuple[type[Workload], ...] = (
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
)

WORKLOADS: dict[str, dict[str | None, type[Workload]]] = {}
for _cls in _CLASSES:
    WORKLOADS.setdefault(_cls.name, {})[getattr(_cls, "tool", None)] = _cls


def workload_class(name: str, tool: str | None) -> type[Workload]:
    """The class for a workload name and tool; the first registered tool is the default."""
    tools = WORKLOADS[name]
    return tools[tool] if tool is not None else next(iter(tools.values()))
