"""gVisor sandboxes (``driver: gvisor``): the container platform's OCI bundle run by runsc, whose
Sentry kernel (in Go) serves the guest's system calls, trapped by ``systrap`` or ``ptrace``.

runsc comes from ``scripts/build-runsc.sh`` (``./setup.sh --with-gvisor``), a static
``CGO_ENABLED=0`` build: the default cgo build dies here with "fork/exec /proc/self/exe".

Network: the spec names the instance's own network namespace (a veth on the run's bridge), and
runsc's ``sandbox`` mode moves that veth's address into gVisor's netstack, so packets go through
gVisor's TCP/IP stack and nothing of the host's network (iptables, ip_forward, links) is
touched; ``host`` passes sockets through to the host kernel, still inside that namespace.

Disk: ``--overlay2=none``. By default (``root:self``) runsc lays an overlay over the root whose
upper layer is a memory file system of the sandbox (backed by a host file), so what a tool
writes there measures gVisor's memory, not a disk. Here the root is read-only, /tmp is a tmpfs
as in the guests, and the data disk is a bind mount of an ext4 filesystem on a host loop device
with direct I/O, served through the gofer (directfs): disk workloads measure that disk. One
difference stays: the Sentry opens those files on the host without O_DIRECT (seen in the
sandbox's /proc/PID/fdinfo here; google/gvisor#3626), so a tool's direct I/O goes through the
host's page cache (reading back what was just written comes from memory); fsync does reach the
disk.

Snapshot and migration (``oslevel.OciLifecycle``): gVisor saves a sandbox by itself (the Sentry
serialises its kernel state and the application's memory into an image directory; no CRIU), and
``runsc restore`` starts a new sandbox from that directory. A restore kills what ``runsc exec``
started (runsc/boot/restore.go: "the caller is no longer connected"), so what must survive (the
migration's dirtier) is started through the init's spawner (``spawn``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from hvbench.drivers.base import Availability, Kernel, Operation
from hvbench.drivers.footprint import Footprint, Pace
from hvbench.drivers.oslevel import (
    SPAWN,
    OciDriver,
    OciInstance,
    OsLevelSettings,
    first_answer,
)
from hvbench.host.process import which
from hvbench.store import WhatRan

BUILD_HINT = "./setup.sh --with-gvisor (runs scripts/build-runsc.sh: a static build into .venv)"


FOOTPRINT = Footprint(memory=24 << 20, tasks=31, net_namespaces=1, pid_namespaces=2)
"""A sandbox holds 24 MiB besides the application's memory (the Sentry's and the gofer's Go
heaps, runsc's text shared among the sandboxes: 44 MiB for one alone, 23.5-23.8 MiB each of
four, with their cgroup's kernel memory and their network namespace), 29-31 tasks (the Sentry's
14 threads, the gofer's 6, about 10 systrap stubs of one thread each), its network namespace (the
gofers share one more per platform) and two PID namespaces (the sandbox's, the gofer's).
Measured by ``bench/footprint.py`` on the 2-core development host (kernel 6.18, systrap)."""
PACE = Pace(slowdown=1.1, io_slowdown=1.1, start_s=5.5, core_s=2.0)
"""Compute at about native speed: four fixed jobs (sqlite, xz, zstd, stockfish:
``bench/footprint.py``) took 1.03x native's time on the 2-core development host (0.7x in a run
where native's ran at a busier moment); its system calls are dearer (the default study's cpu
composite was 75-99% of native in earlier runs). The default study's dd of 1 GiB took 1.0-1.3x
native's (its reads come from the host's page cache: see above). A start is 2.7-4.5 s, a stop
1.4-2.0 s; four at once took 2.4-4.2 s on 2 cores."""


Interception = Literal["systrap", "ptrace"]


class GvisorSettings(OsLevelSettings):
    driver: Literal["gvisor"]
    platform: Interception = "systrap"
    """How the Sentry intercepts system calls (KVM is not offered: it needs a usable /dev/kvm)."""
    network: Literal["sandbox", "host"] = "sandbox"
    """sandbox: gVisor's own netstack; host: the host kernel's, from inside the instance's
    namespace."""

    def footprint(self) -> Footprint:
        return FOOTPRINT

    def pace(self, kvm: bool) -> Pace:
        return PACE

    copies_once: ClassVar[str | None] = "runsc checkpoints a stopped container"

    def refuses(self, operation: Operation) -> str | None:
        return None  # runsc checkpoints and restores every sandbox it runs here


MEMORY_FILE = "/memfd:runsc-memory"
"""The Sentry's memory file as /proc/PID/smaps names it (followed by " (deleted)")."""


@dataclass
class GvisorInstance(OciInstance):
    """A sandbox: its host processes are the Sentry, the gofer and, under systrap and ptrace,
    one stub process per address space of the application, which the Sentry drives."""

    guest_is_host_processes: ClassVar[bool] = False

    def guest_ram(self, path: str, size: int) -> bool:
        """The application's memory: the Sentry's memory file (what the application allocates,
        its tmpfs, the page cache of files the gofer serves), which the Sentry maps whole and
        the stubs map where the application touches it, and the host files the application maps
        (its programs and libraries, which the stubs map from the host with directfs). Every
        other mapping is gVisor's: runsc's binary (Sentry and gofer), their Go heaps (anonymous
        memory), systrap's own memory files."""
        name = path.removesuffix(" (deleted)")
        if name == MEMORY_FILE:
            return True
        runsc = os.path.realpath(self.runtime[0])
        return name.startswith("/") and not name.startswith("/memfd:") and name != runsc

    def kill_pids(self, pids: list[int]) -> None:
        """Processes of a sandbox are not host processes: runsc kills them by sandbox pid;
        the init and its spawner stay."""
        spawner = self.exec(["cat", f"{SPAWN}.pid"], timeout=30).text().strip()
        for pid in pids:
            if pid != 1 and str(pid) != spawner:
                subprocess.run(
                    [*self.runtime, "kill", "--pid", str(pid), self.container_id, "KILL"],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )


class GvisorDriver(OciDriver[GvisorSettings]):
    name: ClassVar[str] = "gvisor"
    settings_model = GvisorSettings
    runtime_name: ClassVar[str] = "runsc"
    kernel: ClassVar[Kernel] = "sentry"
    instance_class = GvisorInstance
    state_mounts = ("null-netns",)
    """runsc bind-mounts an empty network namespace there (for its gofer) and never unmounts it."""

    @classmethod
    def ran_by_settings(cls, settings: GvisorSettings) -> WhatRan:
        return WhatRan(
            mode=settings.platform,
            modes=get_args(Interception),
            disk_cache="gVisor's Sentry opens the disk's files without O_DIRECT",
        )

    @classmethod
    def runtime_binary(cls) -> str | None:
        return which("runsc")

    @classmethod
    def check(cls) -> Availability:
        binary = cls.runtime_binary()
        if binary is None:
            return Availability(False, "runsc is not installed", BUILD_HINT)
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
        if ldd.returncode == 0:
            return Availability(
                False,
                f"{binary} is a dynamic (cgo) build, which dies with 'fork/exec /proc/self/exe'",
                BUILD_HINT,
            )
        return Availability(True, f"{binary}: platforms systrap and ptrace")

    def _global_flags(self) -> list[str]:
        s = self.settings
        return [f"--platform={s.platform}", f"--network={s.network}", "--overlay2=none"]

    def _ready(self, inst: OciInstance, deadline: float) -> None:
        """The first command's answer: a sandbox's files are its Sentry's, which the host does
        not see through the sandbox's /proc/PID/root."""
        first_answer(inst, deadline)

    def _runtime_described(self) -> dict:
        s = self.settings
        return {
            "platform": s.platform,
            "network": f"{s.network} mode inside the instance's own network namespace",
            "overlay": "none: disk workloads measure the bind-mounted data disk, not memory",
            "direct_io": "the Sentry opens the data disk's files on the host without O_DIRECT, "
            "so direct I/O inside the sandbox goes through the host's page cache; fsync reaches "
            "the disk",
        }
