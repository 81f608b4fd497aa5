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

Snapshot and migration (``GvisorLifecycle``): gVisor saves a sandbox by itself (the Sentry
serialises its kernel state and the application's memory into an image directory; no CRIU), and
``runsc restore`` starts a new sandbox from that directory. On one host a migration is that
stop-and-copy into a new container: no pre-copy, so the whole move is downtime. A restore kills
what ``runsc exec`` started (runsc/boot/restore.go: "the caller is no longer connected"), so the
container's init also runs a spawner, and what must survive (the migration's dirtier) is started
through it (``spawn``) as a descendant of the init.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import psutil

from hvbench.drivers.base import (
    Availability,
    Kernel,
    Lifecycle,
    MigrationPlan,
    Operation,
    OperationReport,
    PlatformSettings,
)
from hvbench.drivers.last_words import last_words
from hvbench.drivers.oslevel import (
    INIT,
    STOP_TIMEOUT_S,
    OciDriver,
    OciInstance,
    OsLevelSettings,
)
from hvbench.errors import InstanceError
from hvbench.host.process import ExecResult, which

BUILD_HINT = "./setup.sh --with-gvisor (runs scripts/build-runsc.sh: a static build into .venv)"
SPAWN = "/run/hvbench-spawn"
"""The spawner's FIFO; ``.pid`` is the spawner's pid, ``.out`` a spawned line's output."""
SPAWNING_INIT = [
    *INIT[:-1],
    f"mkfifo {SPAWN}; sh -c 'echo $$ > {SPAWN}.pid; while :; do read -r c < {SPAWN} && "
    f'( (sh -c "$c" > {SPAWN}.tmp 2>&1; mv {SPAWN}.tmp {SPAWN}.out) & ); done\' & {INIT[-1]}',
]
"""oslevel's init, with a spawner beside it that runs each line written to its FIFO as an
orphan of the init (so not as an exec'd process, which a restore kills)."""


class GvisorSettings(OsLevelSettings):
    driver: Literal["gvisor"]
    platform: Literal["systrap", "ptrace"] = "systrap"
    """How the Sentry intercepts system calls (KVM is not offered: it needs a usable /dev/kvm)."""
    network: Literal["sandbox", "host"] = "sandbox"
    """sandbox: gVisor's own netstack; host: the host kernel's, from inside the instance's
    namespace."""


@dataclass
class GvisorInstance(OciInstance):
    driver: GvisorDriver | None = None
    """Set by the driver that started it: its lifecycle makes containers in the driver's run."""

    def spawn(self, command: str, timeout: float) -> ExecResult:
        """Hand the line to the init's spawner (made in ``spec``) and return its output once
        the line has run."""
        script = (
            f"rm -f {SPAWN}.out; echo {shlex.quote(command)} > {SPAWN}; "
            f"while [ ! -e {SPAWN}.out ]; do sleep 0.05; done; cat {SPAWN}.out"
        )
        return self.exec(["sh", "-c", script], timeout)

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

    def lifecycle(self) -> Lifecycle | None:
        return GvisorLifecycle(self.driver, self) if self.driver else None


_operations = itertools.count(1)
"""Numbers the image directories this process makes (a run's instances share its workdir)."""


@dataclass(frozen=True)
class _Move:
    """One checkpoint and restore: seconds of the checkpoint command, bytes of the image
    directory's files, seconds from the restore command's start until ``exec`` answers, and
    from the checkpoint's start until then (the whole stop)."""

    save_s: float
    size: int
    restore_s: float
    total_s: float
    raw: str


class GvisorLifecycle(Lifecycle):
    """``runsc checkpoint`` into an image directory (which stops the sandbox), then ``runsc
    restore`` of it as a new container of the same id, bundle, namespace and cgroup:
    the instance from then on. The image directory and the new container are in the ledger
    before they exist; the directory goes once the restored sandbox answers."""

    def __init__(self, driver: GvisorDriver, inst: GvisorInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Stop-and-copy on one host: the sandbox is stopped from the checkpoint until the new
        one answers, so the downtime is the whole move, and one pass saves everything."""
        if plan.postcopy or plan.auto_converge:
            raise InstanceError(
                f"{self.inst.name}: runsc checkpoints a stopped sandbox: no post-copy or "
                "auto-converge (mode: precopy, without auto_converge)"
            )
        move = self._move(deadline)
        figures = {
            "total_s": move.total_s,
            "downtime_ms": move.total_s * 1000,
            "transferred_mib": move.size / (1 << 20),
            "passes": 1.0,
        }
        return OperationReport(figures, move.raw)

    def snapshot(self, deadline: float) -> OperationReport:
        move = self._move(deadline)
        figures = {"save_s": move.save_s, "size_mib": move.size / (1 << 20),
                   "restore_s": move.restore_s}  # fmt: skip
        return OperationReport(figures, move.raw)

    def _move(self, deadline: float) -> _Move:
        """Checkpoint the sandbox, delete it, restore it as a new container."""
        inst, ledger = self.inst, self.driver.ledger
        if not inst.alive():
            raise InstanceError(f"{inst.name}: the sandbox is not running any more")
        images = self.driver.workdir / f"{inst.name}.checkpoint{next(_operations)}"
        made = ledger.add("path", str(images))
        try:
            t0 = time.monotonic()
            save = self._runsc(
                ["checkpoint", "--image-path", str(images), inst.container_id], deadline
            )
            save_s = time.monotonic() - t0
            files = {f.name: f.stat().st_size for f in sorted(images.iterdir())}
            self._delete_old()
            t1 = time.monotonic()
            self._restore(images, deadline)
            done = time.monotonic()
        finally:
            ledger.release(made)
        steps = {"checkpoint_s": save_s, "delete_s": t1 - t0 - save_s, "restore_s": done - t1}
        raw = json.dumps({"checkpoint": save, "files": files, "steps": steps})
        return _Move(save_s, sum(files.values()), done - t1, done - t0, raw)

    def _runsc(self, argv: list[str], deadline: float) -> str:
        """Run one runsc command on the instance; its output (InstanceError if it failed)."""
        proc = subprocess.run(
            [*self.inst.runtime, *argv],
            capture_output=True,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
        if proc.returncode != 0:
            raise InstanceError(
                f"{self.inst.name}: runsc {argv[0]} failed: "
                f"{(proc.stderr or proc.stdout).strip()[-300:]}"
            )
        return (proc.stdout + proc.stderr).strip()

    def _delete_old(self) -> None:
        """Remove the checkpointed container (its sandbox ended with the checkpoint) and wait
        for its processes, which hold the data disk and the state directory until they go."""
        inst = self.inst
        (old,) = [r for r in inst.resources if r.kind == "container"]
        inst.resources.remove(old)
        self.driver.ledger.release(old)
        if inst.init is not None:
            with contextlib.suppress(psutil.Error):
                inst.init.wait(STOP_TIMEOUT_S)
        inst.init = None

    def _restore(self, images: Path, deadline: float) -> None:
        """``runsc restore`` the image as a new container of the old one's id (free again once
        that was deleted: names, cgroup and the ledger's cleanup stay as they were); the
        instance is that container once its first ``exec`` answers."""
        inst = self.inst
        container_id = inst.container_id
        bundle = self.driver.workdir / inst.name
        inst.resources.append(
            self.driver.ledger.add("container", container_id, runtime=inst.runtime)
        )
        self.driver.network.readdress_host_netns(inst.index)
        log = bundle / "restore.log"
        with log.open("wb") as out:
            proc = subprocess.run(
                [*inst.runtime, "restore", "--detach", "--bundle", str(bundle),
                 "--image-path", str(images), container_id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )  # fmt: skip
        if proc.returncode != 0:
            raise InstanceError(
                f"{inst.name}: runsc restore failed ({last_words(proc.returncode, output=log)})"
            )
        inst.init = self.driver._init_process(inst)
        probe = inst.exec(["true"], timeout=max(1.0, deadline - time.monotonic()))
        if not probe.ok:
            raise InstanceError(f"{inst.name}: no answer after the restore: "
                                f"{probe.describe_failure()}")  # fmt: skip


class GvisorDriver(OciDriver[GvisorSettings]):
    name: ClassVar[str] = "gvisor"
    settings_model = GvisorSettings
    runtime_name: ClassVar[str] = "runsc"
    kernel: ClassVar[Kernel] = "sentry"
    instance_class = GvisorInstance
    state_mounts = ("null-netns",)
    """runsc bind-mounts an empty network namespace there (for its gofer) and never unmounts it."""

    @classmethod
    def refuses(cls, operation: Operation, settings: PlatformSettings) -> str | None:
        return None  # runsc checkpoints and restores every sandbox it runs here

    def spec(self, inst: OciInstance, netns: str, data_source: str | None) -> dict:
        spec = super().spec(inst, netns, data_source)
        spec["process"]["args"] = SPAWNING_INIT
        return spec

    def _start_one(self, inst: OciInstance, deadline: float) -> None:
        assert isinstance(inst, GvisorInstance)
        inst.driver = self
        super()._start_one(inst, deadline)

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

    def global_flags(self) -> list[str]:
        s = self.settings
        return [f"--platform={s.platform}", f"--network={s.network}", "--overlay2=none"]

    def resolved(self) -> dict:
        s = self.settings
        return {
            "platform": s.platform,
            "network": f"{s.network} mode inside the instance's own network namespace",
            "overlay": "none: disk workloads measure the bind-mounted data disk, not memory",
            "direct_io": "the Sentry opens the data disk's files on the host without O_DIRECT, "
            "so direct I/O inside the sandbox goes through the host's page cache; fsync reaches "
            "the disk",
        }
