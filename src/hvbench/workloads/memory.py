"""memory: the host memory one instance costs beyond the memory its guest uses, and how many
instances of this size fit this host.

Measured from the host after the barrier and a settling pause, while the guest idles (booted,
its agent waiting): a workload of its own, so that no measured workload shares its sample.
Overhead = PSS of the instance's host processes minus the PSS of the mappings that hold the
guest's memory (``Instance.guest_ram``; see ``hvbench.host.memory``), plus the kernel memory the
host charges to the instance's own cgroup where it has one (``Instance.kernel_memory``). PSS
rather than the drop of the host's MemAvailable: it is read per process, so other activity on
the host (other runs, the page cache) does not enter it, and shared pages are split among the
instances that share them.

What that is per driver:

- a VMM (QEMU, UML, a Xen domain's device model): its processes minus the guest's RAM block or
  memory file. Its kernel memory (KVM's page tables, a tap's buffers) is in no cgroup of its
  own and not counted: ``memory.kernel_mib`` says "not measured".
- gVisor: the sandbox is a user-space kernel, attributable like a VMM: the Sentry, the gofer
  and the stubs (the application's address spaces) minus the Sentry's memory file and the files
  the application maps; plus the sandbox cgroup's kernel memory (the Sentry's threads and page
  tables, namespaces).
- container (runc): its host processes are the guest's own (their PSS is all guest memory), so
  what a container costs beyond them is kernel memory, which the kernel charges to the
  container's cgroup: namespaces, mounts, the processes' page tables, kernel stacks and slab,
  sockets. The plain charge, not its excess over the same process tree run natively: that would
  need a second tree started natively and measured beside each container, and would still not
  be the same processes. So the figure includes what a native process pays too (page tables and
  a kernel stack: some 50 KiB per idle process here, of 280 KiB for a container's three) and
  leaves out the cgroup's own structures (charged to its parent) and the network namespace
  (hvbench makes one for native too): the container's kernel footprint, not a bound.
- a container engine (docker, podman, lxc, nspawn): the container's as runc's, plus the
  engine's own processes (``Instance.platform_pids``), all of whose memory is overhead: each
  container's monitor (containerd's shim, conmon, LXC's monitor, systemd-nspawn) and what
  serves it alone (slirp4netns, fuse-overlayfs, docker-proxy), and the platform's daemon
  (dockerd and its containerd, rootless Podman's pause process) on the platform's first
  instance only, counted once. The provenance names each with its PSS.
- native: the host itself; every metric is stored with no value and the text "not
  attributable".

Density = the host's total memory over (guest memory + overhead): the guest is assumed to touch
all of its memory eventually, which is what a host must be able to give. A container's or a
sandbox's cgroup limit (its ``memory``) bounds its overhead too, so there the density is a floor.
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
NOT_MEASURED = "not measured (no cgroup of its own)"
QUICK_SETTLE_S = 1.0
METRICS: dict[str, tuple[str, bool]] = {
    "host_pss_mib": ("MiB", False),
    "guest_ram_mib": ("MiB", False),
    "kernel_mib": ("MiB", False),
    "overhead_mib": ("MiB", False),
    "density_instances": ("count", True),
}
"""Name -> (unit, higher is better)."""


class MemorySettings(WorkloadSettings):
    name: Literal["memory"]
    settle: NonNegativeFloat = 10.0
    """Seconds the instances idle after the barrier before the read (boot's page cache and
    the agent's first commands settle). ``--quick``: 1 s."""


class Memory(Workload[MemorySettings]):
    name: ClassVar[str] = "memory"
    settings_model = MemorySettings

    def tools(self) -> list[str]:
        return []

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        ctx.barrier()
        time.sleep(QUICK_SETTLE_S if ctx.quick else self.settings.settle)
        pids = instance.host_pids()
        kernel = instance.kernel_memory()
        if not pids or (instance.guest_is_host_processes and kernel is None):
            why = f"{instance.name}: {NOT_ATTRIBUTABLE} (its host processes are the guest's own)"
            return Outcome(
                [memory_metric(n, None, NOT_ATTRIBUTABLE) for n in METRICS],
                [keep("memory", [], why)],
            )
        guest_bytes = instance.memory_mib * MIB
        engine = instance.platform_pids()
        used = host_memory([p for p in pids if p not in engine], instance.guest_ram)
        served = [(_name(pid), host_memory([pid], _not_guest_ram).pss) for pid in engine]
        engine_pss = sum(pss for _, pss in served)
        overhead = used.overhead + engine_pss + (kernel or 0)
        host_total = psutil.virtual_memory().total
        values = {
            "host_pss_mib": (used.pss + engine_pss) / MIB,
            "guest_ram_mib": used.guest_ram / MIB,
            "kernel_mib": None if kernel is None else kernel / MIB,
            "overhead_mib": overhead / MIB,
            "density_instances": host_total // (guest_bytes + max(0, overhead)),
        }
        raw = (
            f"{instance.name}: host processes {pids}, the instance's {used.processes} PSS "
            f"{used.pss} B, guest memory ({guest_bytes} B) PSS {used.guest_ram} B, kernel "
            f"memory of its cgroup {kernel} B, the platform's own processes (PSS B) "
            f"{', '.join(f'{name} {pss}' for name, pss in served) or 'none'}, overhead "
            f"{overhead} B; host memory {host_total} B; largest "
            "mappings (path, size B, PSS B, guest RAM): "
            + "; ".join(f"{p} {size} {pss} {ram}" for p, size, pss, ram in used.largest)
        )
        return Outcome(
            [
                memory_metric(n, None, NOT_MEASURED)
                if v is None
                else memory_metric(n, round(float(v), 2))
                for n, v in values.items()
            ],
            [keep("memory", [], raw)],
        )

    def estimate_seconds(self, quick: bool) -> float:
        return QUICK_SETTLE_S if quick else self.settings.settle

    def fixed_time_seconds(self, quick: bool) -> float:
        return self.estimate_seconds(quick)  # the settling pause is all of it


def _not_guest_ram(path: str, size: int) -> bool:
    """No mapping of a platform's own process holds the guest's memory."""
    return False


def _name(pid: int) -> str:
    """A process as the provenance names it: its program and pid."""
    try:
        return f"{psutil.Process(pid).name()}[{pid}]"
    except psutil.Error:
        return f"[{pid}, gone]"


def memory_metric(name: str, value: float | None, text: str | None = None) -> Metric:
    unit, higher_is_better = METRICS[name]
    return Metric(
        f"memory.{name}", value, unit, higher_is_better, text, headline=name == "overhead_mib"
    )
