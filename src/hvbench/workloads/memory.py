"""memory: the host memory one instance costs beyond the memory its guest uses, and how many
instances of this size fit this host.

Measured from the host after the barrier and a settling pause, while the guest idles (booted,
its agent waiting): a workload of its own, so that no measured workload shares its sample.
Overhead = PSS of the instance's host processes minus the PSS of its guest-RAM mapping (see
``hvbench.host.memory``). PSS rather than the drop of the host's MemAvailable: it is read per
process, so other activity on the host (other runs, the page cache) does not enter it, and
shared pages are split among the instances that share them. Not counted: memory the host kernel
keeps for the instance outside any process (KVM's page tables, a tap's buffers, a container's
cgroup and namespaces).

Where the instance's host processes are the guest itself (containers, gVisor's sandbox, native)
there is no VMM to attribute: each metric is stored with no value and the text "not
attributable". Density = the host's total memory over (guest memory + overhead): the guest is
assumed to touch all of its memory eventually, which is what a host must be able to give.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, Literal

import psutil
from pydantic import NonNegativeFloat

from hvbench.host.memory import host_memory
from hvbench.workloads.base import Context, Metric, Outcome, Workload, WorkloadSettings
from hvbench.workloads.common import keep

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

MIB = 1 << 20
NOT_ATTRIBUTABLE = "not attributable"
QUICK_SETTLE_S = 1.0
METRICS: dict[str, tuple[str, bool]] = {
    "host_pss_mib": ("MiB", False),
    "guest_ram_mib": ("MiB", False),
    "overhead_mib": ("MiB", False),
    "density_instances": ("count", True),
}
"""Name -> (unit, higher is better)."""


class MemorySettings(WorkloadSettings):
    name: Literal["memory"]
    settle: NonNegativeFloat = 10.0
    """Seconds the instances idle after the barrier before the read (boot's page cache and
    the agent's first commands settle). ``--quick``: 1 s."""


class Memory(Workload):
    name: ClassVar[str] = "memory"
    settings_model = MemorySettings

    def tools(self) -> list[str]:
        return []

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        assert isinstance(self.settings, MemorySettings)
        ctx.barrier()
        time.sleep(QUICK_SETTLE_S if ctx.quick else self.settings.settle)
        pids = instance.host_pids()
        if instance.guest_is_host_processes or not pids:
            why = f"{instance.name}: {NOT_ATTRIBUTABLE} (its host processes are the guest's own)"
            return Outcome(
                [memory_metric(n, None, NOT_ATTRIBUTABLE) for n in METRICS],
                [keep("memory", [], why)],
            )
        guest_bytes = instance.memory_mib * MIB
        used = host_memory(pids, instance.guest_ram)
        host_total = psutil.virtual_memory().total
        values = {
            "host_pss_mib": used.pss / MIB,
            "guest_ram_mib": used.guest_ram / MIB,
            "overhead_mib": used.overhead / MIB,
            "density_instances": host_total // (guest_bytes + max(0, used.overhead)),
        }
        raw = (
            f"{instance.name}: {used.processes} host processes {pids}, PSS {used.pss} B, "
            f"guest RAM ({guest_bytes} B) PSS {used.guest_ram} B, "
            f"overhead {used.overhead} B; host memory {host_total} B"
        )
        return Outcome(
            [memory_metric(n, round(float(v), 1)) for n, v in values.items()],
            [keep("memory", [], raw)],
        )

    def estimate_seconds(self, quick: bool) -> float:
        assert isinstance(self.settings, MemorySettings)
        return QUICK_SETTLE_S if quick else self.settings.settle


def memory_metric(name: str, value: float | None, text: str | None = None) -> Metric:
    unit, higher_is_better = METRICS[name]
    return Metric(
        f"memory.{name}", value, unit, higher_is_better, text, headline=name == "overhead_mib"
    )
