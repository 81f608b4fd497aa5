"""What one instance of a platform holds on the host, and how fast the platform goes against
native: each driver's settings say it (``PlatformSettings.footprint``, ``.pace``), as
bench/footprint.py measured it, and planning reads it (``plan.misfits_at``,
``plan.estimate_seconds``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Footprint:
    """What one running instance holds on the host besides its guest's memory
    (``PlatformSettings.holds``), as bench/footprint.py measures it: what a group of instances
    must find room for before a run starts any (``plan.misfits_at``)."""

    memory: int
    """Bytes: its host processes' PSS beyond the guest's memory, the kernel memory charged to
    its cgroup, and its network namespace with its veth."""
    tasks: int
    """Host tasks (processes and threads) it holds idle, hvbench's own threads for it included:
    each takes a pid (kernel.pid_max) and counts against kernel.threads-max and RLIMIT_NPROC."""
    net_namespaces: int = 0
    pid_namespaces: int = 0
    address: bool = True
    """Whether it takes an address on the run's network (``RunNetwork.address``)."""


@dataclass(frozen=True)
class Pace:
    """How fast a platform goes against native on the same host, for the estimate of a study's
    duration (``plan.estimate_seconds``) and whether its largest group can start in time."""

    slowdown: float
    """Wall time of fixed work (a compression, a search, a build) over native's."""
    io_slowdown: float
    """Wall time of fixed work on the data disk (a file written and read with direct I/O) over
    native's."""
    start_s: float
    """Seconds to start one instance until it is ready (its data disk formatted), and stop it."""
    core_s: float
    """Core-seconds each instance of a group started at once takes: a start is mostly CPU work,
    so N of them on C cores take about N × core_s / C."""

    def group_seconds(self, count: int, cores: int) -> float:
        """Seconds to start and stop ``count`` instances at once on ``cores`` cores."""
        return max(self.start_s, count * self.core_s / cores)


KVM_PACE = Pace(slowdown=1.05, io_slowdown=1.1, start_s=1.0, core_s=1.0)
"""Under KVM guest code runs on the CPU, at about 5% over native for compute, 10% for work on a
virtio disk. Not measured here (this host's KVM runs no stock guest): a start is TCG's over
TCG's slowdown (``qemu_machine.TCG_PACE``), as a boot is the guest's own work, rounded up to a
second."""
