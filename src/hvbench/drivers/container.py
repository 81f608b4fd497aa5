"""OS-level containers (``driver: container``): the guest image's tree run by runc.

runc rather than systemd-nspawn, unshare or LXC: it runs the very OCI bundle that gVisor's runsc
runs (hvbench.drivers.oslevel), so ``container`` and ``gvisor`` differ in nothing but the
runtime; it applies the cgroup limits itself from the spec, puts every ``exec``'d command in the
container's cgroup (an ``nsenter`` would leave it outside the CPU and memory limits), needs no
daemon or system bus (nspawn does), and works on this host's hybrid cgroup layout (crun does
not).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from hvbench.drivers.base import Availability, Kernel, Operation
from hvbench.drivers.footprint import Footprint, Pace
from hvbench.drivers.oslevel import OciDriver, OsLevelSettings, criu
from hvbench.host.process import which
from hvbench.store import WhatRan

FOOTPRINT = Footprint(memory=512 << 10, tasks=3, net_namespaces=1, pid_namespaces=1)
"""Besides its processes (its ``memory``, which its cgroup bounds): 0.5 MiB, the kernel memory
charged to its cgroup (namespaces, mounts, page tables, stacks; 0.29 MiB in issue 14's figures)
and its network namespace with a veth (0.25 MiB); 3 tasks (the init, its spawner, a sleep); its
own network and PID namespaces. Per instance between groups of 1 and 4, measured twice by
``bench/footprint.py`` on the 2-core development host (kernel 6.18, cgroup v1)."""
PACE = Pace(slowdown=1.0, io_slowdown=1.2, start_s=0.2, core_s=0.08)
"""Compute at native speed: four fixed jobs (sqlite, xz, zstd, stockfish: ``bench/footprint.py``)
took 1.02x native's time on the 2-core development host (0.7x in a run where native's ran at a
busier moment), and the default study's cpu composite was 92-100% of native with no significant
difference. The default study's dd of 1 GiB took 0.6-2.4x native's of the same repetition (its
data disk is a loop device on the host, as native's). Starts and stops run in parallel (issue
53): a group of 1 took 0.20 s to start and stop, groups of 64 and 256 0.037 and 0.043 s an
instance on the 2 cores (``bench/storm_overhead.py --drivers container --counts 1,8,64,256
--repeat 3``, medians, 2026-12-07), so 0.08 core-seconds each; a run of 1 to 256 at once, 3
repetitions (``boot``), took 52 s where this pace estimates 60 s."""


class ContainerSettings(OsLevelSettings):
    copies_once: ClassVar[str | None] = "runc checkpoints a stopped container"

    driver: Literal["container"]

    def footprint(self) -> Footprint:
        return FOOTPRINT

    def pace(self, kvm: bool) -> Pace:
        return PACE

    def refuses(self, operation: Operation) -> str | None:
        if criu() is None:
            return (
                "the container driver checkpoints with CRIU 4.1 or later (Debian 12's 3.17 "
                "fails on kernels from 6.13 on), not found here: ./setup.sh --with-criu"
            )
        return None


class ContainerDriver(OciDriver[ContainerSettings]):
    name: ClassVar[str] = "container"
    settings_model = ContainerSettings
    runtime_name: ClassVar[str] = "runc"
    kernel: ClassVar[Kernel] = "host"

    @classmethod
    def runtime_binary(cls) -> str | None:
        return which("runc")

    @classmethod
    def ran_by_settings(cls, settings: ContainerSettings) -> WhatRan:
        return WhatRan()  # the host's kernel; the data disk a loop device with direct I/O

    @classmethod
    def check(cls) -> Availability:
        if cls.runtime_binary() is None:
            return Availability(False, "runc is not installed", "apt-get install runc")
        found = criu()
        checkpoint = (
            f"checkpoint and restore with CRIU {found.version}"
            if found
            else "no checkpoint and restore (CRIU 4.1: ./setup.sh --with-criu)"
        )
        return Availability(True, f"runc: OCI containers of the guest image's tree; {checkpoint}")

    def _global_flags(self) -> list[str]:
        found = criu()
        return ["--criu", found.path] if found else []

    def _runtime_described(self) -> dict:
        found = criu()
        return {"criu": found.version} if found else {}
