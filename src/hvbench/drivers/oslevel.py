"""What the OS-level drivers share: one OCI bundle, run by runc (``container``) or runsc
(``gvisor``), so that the two differ only in the runtime that executes the same spec.

Each instance is an OCI container whose root is the very tree a QEMU guest boots: the guest
image's initramfs, unpacked once per platform and mounted read-only; or, for workloads needing a
full userland (``Needs.userland``: consolidation's servers), the same Debian root filesystem image
a guest boots, mounted read-only once per platform from a read-only loop device (so that the
cached image is never written) and made each instance's own writable root by an overlayfs whose
upper layer is in the instance's bundle (what its servers write to /var or /etc stays its own and
goes with it; runsc serves that root through its gofer like any other). With that

- the network namespace that ``RunNetwork.add_host_netns`` made for it (a veth on the run's
  bridge), named in the spec, so the runtime never touches the host's network;
- the cgroup limits of a VM of the platform's size (``OsLevelSettings.limits``, in the spec's
  words: host/cgroup_limits.py), so that a container compares fairly with a VM of the same size;
- the data disk: a sparse file on the host behind a loop device with direct I/O (so the host's
  page cache of the file does not hide the medium), formatted and mounted *on the host* with the
  same mkfs options every platform uses, and bind-mounted into the container at DATA_MOUNT. A
  container has no kernel of its own to mount it with (gVisor has no block devices at all).

Commands run through the runtime's ``exec`` (no guest agent: the runtime is the control
channel, and ``exec`` puts the command in the container's namespaces *and* cgroup, which
nsenter would not).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar

import psutil
from pydantic import PositiveInt

from hvbench.drivers.base import (
    BootPhases,
    DataDisk,
    Driver,
    Instance,
    Lifecycle,
    MigrationPlan,
    OperationReport,
    PlatformSettings,
    operation_path,
)
from hvbench.drivers.disks import DATA_MOUNT, DataImage, HostDisk
from hvbench.drivers.last_words import last_words
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import rootfs, userland
from hvbench.host.cgroup import cgroup_kernel_memory, cgroup_procs, cgroup_version
from hvbench.host.cgroup_limits import CgroupLimits, CgroupVersion
from hvbench.host.process import (
    SYSTEM_PATH,
    ExecResult,
    LiveProcesses,
    failed,
    output_tail,
    probe,
    run_bounded,
    time_left,
    which,
)
from hvbench.host.resources import Resource, resource_name
from hvbench.host.storage import attach_loop, mount
from hvbench.toolenv import in_locale
from hvbench.units import Size

STOP_TIMEOUT_S = 30.0
WORKDIR = "/tmp"
"""Where commands start: a tmpfs, so that tools that write to their working directory
(stress-ng) write to memory there, as they do in a guest whose root is its initramfs."""
SPAWN = "/run/hvbench-spawn"
"""The init's spawner's FIFO; ``.pid`` is the spawner's pid, ``.out`` a spawned line's output."""
INIT = [
    "/bin/sh",
    "-c",
    "exec </dev/null >/dev/null 2>&1; "
    f"mkfifo {SPAWN}; sh -c 'echo $$ > {SPAWN}.pid; while :; do read -r c < {SPAWN} && "
    f'( (sh -c "$c" > {SPAWN}.tmp 2>&1; mv {SPAWN}.tmp {SPAWN}.out) & ); done\' & '
    "while :; do sleep 3600 & wait; done",
]
"""The container's PID 1: holds its namespaces while commands come and go through ``exec``, and
reaps what a killed command orphaned (ash's ``wait`` reaps any child). Beside it, a spawner runs
each line written to its FIFO as an orphan of the init: what must outlive a checkpoint and
restore (the migration's dirtier) starts there, not through ``exec``, whose processes a gVisor
restore kills and whose pipes to hvbench CRIU cannot dump. Its stdio is the container's own
/dev/null, not the runtime's log on the host, which CRIU could not reopen inside the container."""
CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]  # fmt: skip
"""The capabilities a container engine grants by default (Docker's set): what a workload in an
ordinary container has."""


class OsLevelSettings(PlatformSettings):
    """What a container platform shares with a VM of the same size."""

    vcpus: PositiveInt = 1
    memory: Size = 512 << 20
    pin: bool = False
    """Limit each instance to ``vcpus`` host cores of its own (a cpuset, round robin) rather
    than to a CFS quota of ``vcpus`` CPUs anywhere."""
    disk: HostDisk = HostDisk()
    """An ext4 filesystem on the host, bind-mounted into the container."""

    @property
    def limits(self) -> CgroupLimits:
        """The cgroup limits of a VM of this size, which each driver renders in its program's
        words."""
        return CgroupLimits(self.vcpus, self.memory, self.pin)


def _fs_type(path: str) -> str:
    out = subprocess.run(["stat", "-fc", "%T", path], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def kill_but_init(init: psutil.Process | None, pids: Iterable[int]) -> None:
    """Kill the container's processes ``pids`` (host pids) but its init and the init's spawner
    (see INIT): what a timed-out command left running."""
    keep = set()
    if init is not None:
        with contextlib.suppress(psutil.Error):
            keep = {init.pid} | {p.pid for p in init.children() if SPAWN in " ".join(p.cmdline())}
    for pid in pids:
        if pid not in keep:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_exited(proc: psutil.Process | None, timeout: float) -> None:
    """Wait up to ``timeout`` seconds until ``proc`` has exited: gone, or a zombie, which holds
    nothing any more (its files, mounts and namespaces went with its exit) and waits only for
    whichever process reaps it: a host's init may take a second to, one zombie after another
    (a container's init is reparented to it)."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while proc is not None and time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                return
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


def wait_spawner(inst: CgroupContainer, deadline: float) -> None:
    """Wait until the container's init runs its own first commands: its spawner has written
    its pid (see INIT), read through the init's root on the host rather than by a command in
    the container (an ``exec`` each would cost a storm half as much again as its starts);
    InstanceError if the init ends first or the deadline passes. Where the host may not look
    into the container's root (rootless Podman's user namespace): its first command's answer
    (``first_answer``)."""
    marker = Path(f"/proc/{inst.init.pid if inst.init else 0}/root{SPAWN}.pid")
    pause = 0.001
    try:
        while not marker.exists():
            if not inst.alive():
                raise InstanceError(f"{inst.name}: the container's init ended before it was ready")
            if time.monotonic() > deadline:
                raise InstanceError(f"{inst.name}: the container's init ran nothing in time")
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
    except PermissionError:
        first_answer(inst, deadline)


def first_answer(inst: Instance, deadline: float) -> None:
    """Wait for the answer to a first command in the instance; InstanceError if it failed."""
    probe = inst.exec(["true"], timeout=time_left(deadline))
    if not probe.ok:
        raise InstanceError(f"{inst.name}: first command failed: {probe.describe_failure()}")


def mount_userland(driver: Driver, image: userland.RootImage) -> Path:
    """The root filesystem image mounted read-only for the platform's run, from a read-only
    loop device (not even ext4's journal replay writes the cached image); ``close``, or
    ``hvbench cleanup``, undoes it."""
    mountpoint = driver.workdir / f"userland-{image.key}"
    driver.resources.append(attach_loop(driver.ledger, image.disk, "--read-only"))
    mount(driver.ledger, driver.resources, mountpoint, "-o", "ro", driver.resources[-1].name)
    return mountpoint


def overlay_root(driver: Driver, lower: Path, home: Path, made: list[Resource]) -> Path:
    """An instance's own writable root: an overlayfs over the read-only image (``lower``), its
    upper and work directories in the instance's ``home``, which ``stop`` removes."""
    upper, work = home / "upper", home / "work"
    upper.mkdir()
    work.mkdir()
    layers = f"lowerdir={lower},upperdir={upper},workdir={work}"
    mount(driver.ledger, made, home / "root", "-t", "overlay", "-o", layers, "overlay")
    return home / "root"


def host_data_disk(
    driver: Driver, disk: HostDisk, inst: Instance, mountpoint: Path, how: str,
    made: list[Resource],
) -> None:  # fmt: skip
    """Make, format and mount an instance's data disk on the host at ``mountpoint``, which the
    container gets at DATA_MOUNT (``how``: bind-mounted, or a volume of its engine's)."""
    if disk.backing == "block" and (not disk.path or not Path(disk.path).exists()):
        raise HvbenchError(
            f"platform {driver.platform}: disk backing 'block' needs the path of an "
            f"existing partition or LV (got {disk.path!r})"
        )
    image = DataImage.make(driver, disk, f"{inst.name}.img", made, loop=True)
    device = image.path
    if image.file is None:
        what = f"block device {device}"
    else:
        what = (
            f"loop device (direct I/O) over a sparse file {image.file} "
            f"on {_fs_type(str(image.file.parent))}"
        )
    mount(driver.ledger, made, mountpoint, device)
    inst.data_disk = DataDisk(
        device,
        DATA_MOUNT,
        f"ext4 on {what}, formatted and mounted on the host, {how} into the container at "
        f"{DATA_MOUNT}",
    )


@dataclass
class CgroupContainer(Instance):
    """A container whose processes are the host's, in a cgroup of its own (runc's, an
    engine's): its commands run through ``command``, and what a timed-out one left running
    is ended by ``kill_commands``."""

    guest_is_host_processes: ClassVar[bool] = True

    container_id: str = ""
    cgroups_path: str = ""
    init: psutil.Process | None = None
    running: LiveProcesses = field(default_factory=LiveProcesses)

    def exec(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
        if not self.alive():
            raise InstanceError(f"{self.name}: the container is not running any more")
        try:
            result = run_bounded(
                self.command(in_locale(argv), stdin is not None),
                timeout,
                stdin,
                on_start=self.running.started,
                on_exit=self.running.exited,
            )
        except CommandTimeout:
            self.kill_commands()
            raise
        result.argv = list(argv)
        return result

    @abstractmethod
    def command(self, argv: Sequence[str], stdin: bool) -> list[str]:
        """argv run in the container, with ``stdin`` passed on where asked."""

    @abstractmethod
    def kill_commands(self) -> None:
        """End every process of the container but its init (its children included), which
        killing the command's ``exec`` does not reach."""

    def host_pids(self) -> list[int]:
        """The container's processes on the host (its cgroup) and the running exec processes,
        which collect the CPU time of the commands they ran."""
        return sorted(set(self.running.pids()) | set(cgroup_procs(self.cgroups_path)))

    def kernel_memory(self) -> int | None:
        return cgroup_kernel_memory(self.cgroups_path)

    def alive(self) -> bool:
        return self.init is not None and self.init.is_running()


@dataclass
class OciInstance(CgroupContainer):
    """One container, run by the driver's runtime."""

    runtime: list[str] = field(default_factory=list)
    """The runtime's argv up to the subcommand (binary, --root and global flags)."""
    root: str = ""
    """The container's root on the host: the platform's read-only tree, or the instance's own
    overlay of the root filesystem image."""
    driver: OciDriver | None = None
    """The driver that started it: its lifecycle makes containers in the driver's run."""

    def command(self, argv: Sequence[str], stdin: bool) -> list[str]:
        return [*self.runtime, "exec", "--cwd", WORKDIR, self.container_id, *argv]

    def kill_commands(self) -> None:
        """What the runtime lists (``runtime ps``), but the init and its spawner."""
        ps = subprocess.run(
            [*self.runtime, "ps", "--format", "json", self.container_id],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        with contextlib.suppress(ValueError):
            listed = json.loads(ps.stdout or "null") or []
            self.kill_pids([p for p in listed if isinstance(p, int)])

    def kill_pids(self, pids: list[int]) -> None:
        """Kill what ``runtime ps`` listed, but the init and its spawner. runc lists host pids;
        runsc, whose processes live in its sandbox, overrides this."""
        kill_but_init(self.init, pids)

    def spawn(self, command: str, timeout: float) -> ExecResult:
        """Hand the line to the init's spawner (see INIT), under hvbench's locale, and return
        its output once the line has run."""
        line = shlex.join(in_locale(["sh", "-c", command]))
        script = (
            f"rm -f {SPAWN}.out; echo {shlex.quote(line)} > {SPAWN}; "
            f"while [ ! -e {SPAWN}.out ]; do sleep 0.05; done; cat {SPAWN}.out"
        )
        return self.exec(["sh", "-c", script], timeout)

    def lifecycle(self) -> Lifecycle | None:
        return OciLifecycle(self.driver, self) if self.driver else None


OS = TypeVar("OS", bound=OsLevelSettings)


@dataclass(frozen=True)
class OciOpened:
    """What an OCI runtime's driver resolves once per run (``open``)."""

    image: guest_image.GuestImage
    root: Path
    """The image's tree, unpacked: every instance's read-only root; or with a userland, the
    root filesystem image mounted read-only: every instance's overlay's lower layer."""
    userland: userland.RootImage | None
    """The root filesystem image, where the workloads need a full userland."""
    runtime: tuple[str, ...]
    """The runtime's command with its global flags (state directory first)."""
    cgroup_version: CgroupVersion


class OciDriver(Driver[OS, OciInstance, OciOpened]):
    """A driver that runs each instance as an OCI container of the guest image's tree."""

    runtime_name: ClassVar[str]
    instance_class: ClassVar[type[OciInstance]] = OciInstance
    state_mounts: ClassVar[tuple[str, ...]] = ()
    """Mounts the runtime makes in its state directory and leaves there."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._firsts: list[list[Resource]] = []
        """What each instance of the group holds first, made for all (``_prepare``)."""
        self._netns_gone: list[Resource] = []
        """Those of stopped instances, until the group's stop removes them together."""
        self._lock = threading.Lock()

    # what a runtime differs in ---------------------------------------------------------------

    @classmethod
    @abstractmethod
    def runtime_binary(cls) -> str | None:
        """Path of the runtime, or None if it is not installed."""

    def _global_flags(self) -> list[str]:
        """Flags before the subcommand, besides --root."""
        return []

    def _runtime_described(self) -> dict:
        """What describe() adds for this runtime."""
        return {}

    # the common part ---------------------------------------------------------------------------

    def _resolve(self) -> OciOpened:
        """Build (or take from the cache) the guest image, and the root filesystem image where
        the workloads need a userland; unpack or mount it, and make the runtime's state
        directory."""
        binary = self.runtime_binary()
        if binary is None:
            verdict = self.check()
            raise HvbenchError(f"platform {self.platform}: {verdict.detail}; {verdict.fix}")
        image = guest_image.build(self.needs.tools)
        rootfs_image = None
        if self.needs.userland:
            tools, packages = self.needs.tools, self.needs.packages
            rootfs_image = userland.build(tools, image, packages)
            root = mount_userland(self, rootfs_image)
        else:
            dest = self.workdir / f"rootfs-{image.key}"
            root = rootfs.unpack(image, dest, self.ledger, self.resources)
            (root / DATA_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
        state = self.workdir / "state"
        self.resources.append(self.ledger.add("path", str(state)))
        state.mkdir(exist_ok=True)
        for name in self.state_mounts:
            self.resources.append(self.ledger.add("mount", str(state / name)))
        runtime = (binary, "--root", str(state), *self._global_flags())
        return OciOpened(image, root, rootfs_image, runtime, cgroup_version())

    def _prepare(self, count: int) -> None:
        """What each instance of the group makes first, for all at once: its network
        namespace (``RunNetwork.add_host_netns_many``) and its bundle's directory, in the ledger
        in one write each; every instance takes its own (``_instance``)."""
        netns = self.network.add_host_netns_many(range(count))
        bundles = self.ledger.add_many(
            [("path", str(self._bundle(index)), {}) for index in range(count)]
        )
        self._firsts = [[n, b] for n, b in zip(netns, bundles, strict=True)]

    def _bundle(self, index: int) -> Path:
        """Instance ``index``'s OCI bundle: its spec, the runtime's log, its own layers."""
        return self.workdir / f"{self.platform}-{index}"

    def _instance(self, index: int) -> OciInstance:
        s = self.settings
        inst = self.instance_class(self.platform, index, s.vcpus, s.memory >> 20)
        inst.resources += self._firsts[index]
        inst.address = self.network.address(index)
        return inst

    def _start_one(self, inst: OciInstance, deadline: float) -> None:
        opened, made = self.opened, inst.resources
        netns = made[0]
        bundle = self._bundle(inst.index)
        bundle.mkdir()
        inst.root = str(
            overlay_root(self, opened.root, bundle, made) if opened.userland else opened.root
        )
        data_source = None
        if self.needs.data_disk:
            data_source = self._data_disk(inst, bundle, made)
        inst.runtime = list(opened.runtime)
        inst.container_id = resource_name(self.ledger.run_id, inst.name, os.getpid())
        # a cgroup of its own at the top, which the runtime's delete removes (a common parent
        # would be left behind)
        inst.cgroups_path = f"/{inst.container_id}"
        spec = self.spec(inst, netns.name, data_source)
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        made.append(self.ledger.add("container", inst.container_id, runtime=inst.runtime))
        log, pid_file = bundle / "runtime.log", bundle / "init.pid"
        t0 = time.monotonic()  # boot is the runtime's start until the init runs its commands
        with log.open("wb") as out:
            proc = subprocess.run(
                [
                    *inst.runtime,
                    "run",
                    "--detach",
                    "--pid-file",
                    str(pid_file),
                    "--bundle",
                    str(bundle),
                    inst.container_id,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=time_left(deadline),
                check=False,
            )
        if proc.returncode != 0:
            words = last_words(proc.returncode, output=log)
            raise InstanceError(f"{inst.name}: {self.runtime_name} run failed ({words})")
        inst.init = self._init_process(inst, pid_file)
        self._ready(inst, deadline)
        inst.boot = BootPhases.ready_since(t0)

    def _ready(self, inst: OciInstance, deadline: float) -> None:
        """Wait until the container runs its init's first commands (``wait_spawner``)."""
        wait_spawner(inst, deadline)

    def _init_process(self, inst: OciInstance, pid_file: Path | None = None) -> psutil.Process:
        """The container's init on the host (runsc: its sandbox): from the file the runtime
        wrote its pid to at ``run`` where given (one runtime command fewer per instance), else
        from the runtime's state."""
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            if pid_file is not None:
                return psutil.Process(int(pid_file.read_text()))
        state = subprocess.run(
            [*inst.runtime, "state", inst.container_id],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        try:
            return psutil.Process(int(json.loads(state.stdout)["pid"]))
        except (ValueError, KeyError, TypeError, psutil.Error):
            raise InstanceError(
                f"{inst.name}: {self.runtime_name} state gave no running init: {output_tail(state)}"
            ) from None

    def _data_disk(self, inst: OciInstance, bundle: Path, made: list[Resource]) -> str:
        """Make, format and mount the data disk on the host; return the mounted directory."""
        mountpoint = bundle / "data"
        host_data_disk(self, self.settings.disk, inst, mountpoint, "bind-mounted", made)
        return str(mountpoint)

    def spec(self, inst: OciInstance, netns: str, data_source: str | None) -> dict:
        """The OCI runtime spec of one instance."""
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            _tmpfs("/dev", "mode=755", "size=65536k", "strictatime"),
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            _tmpfs("/dev/shm", "mode=1777", "nodev", "noexec"),
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
            # as in the guests, where rc mounts tmpfs there: scratch space lives in memory
            _tmpfs("/tmp", "mode=1777", "nodev"),
            _tmpfs("/run", "mode=755", "nodev"),
        ]
        if data_source:
            mounts.append(
                {
                    "destination": DATA_MOUNT,
                    "type": "bind",
                    "source": data_source,
                    "options": ["rbind", "rw"],
                }
            )
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": 0, "gid": 0},
                "args": INIT,
                "env": [f"PATH={SYSTEM_PATH}", "HOME=/root"],
                "cwd": WORKDIR,
                "capabilities": {k: CAPABILITIES for k in ("bounding", "effective", "permitted")},
                "noNewPrivileges": True,
            },
            "root": {"path": inst.root, "readonly": self.opened.userland is None},
            "hostname": inst.name,
            "mounts": mounts,
            "linux": {
                "namespaces": [
                    {"type": "pid"},
                    {"type": "ipc"},
                    {"type": "uts"},
                    {"type": "mount"},
                    {"type": "network", "path": f"/run/netns/{netns}"},
                ],
                "cgroupsPath": inst.cgroups_path,
                "resources": self.settings.limits.oci(inst.index),
                "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"],
            },
        }

    def _release(self, inst: OciInstance, res: Resource) -> None:
        """Release one resource; its network namespace (made first, so released last) waits
        for the group's others, to go with them in one batch (``_stopped``)."""
        if res.kind == "netns":
            with self._lock:
                self._netns_gone.append(res)
            return
        self.ledger.release(res)
        if res.kind == "container":
            # the runtime's delete returns before its processes are gone, and they hold the
            # data disk's mount and files in the state directory until then
            wait_exited(inst.init, STOP_TIMEOUT_S)

    def _stopped(self, instances: list[OciInstance]) -> None:
        """The group's network namespaces, together (``Ledger.release_many``)."""
        self.ledger.release_many(self._netns_gone)
        self._netns_gone = []
        for inst in instances:
            inst.init = None

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        opened = self.opened
        info["resolved"] = {
            "runtime": self.runtime_name,
            "runtime_version": runtime_version(opened.runtime[0]),
            "root": (
                "the root filesystem image, mounted read-only, under an overlayfs of each "
                "instance's own"
                if opened.userland
                else "the guest image's tree, unpacked, read-only"
            )
            + "; commands start in /tmp, a tmpfs",
            "control": f"{self.runtime_name} exec (the container's namespaces and cgroup)",
            "network": "veth into the run's bridge from a network namespace of its own",
            "cgroup": {"version": opened.cgroup_version, **self.settings.limits.described()},
            "data_disk": "ext4 formatted and mounted on the host (loop device with direct I/O "
            "over a sparse file, or the block device given), bind-mounted at " + DATA_MOUNT,
            **self._runtime_described(),
        }
        info["image"] = opened.image.manifest
        if opened.userland:
            info["rootfs"] = opened.userland.summary()
        return info


def _tmpfs(destination: str, *options: str) -> dict:
    return {
        "destination": destination,
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", *options],
    }


def runtime_version(binary: str) -> str:
    """What ``--version`` prints, or for a runsc built by scripts/build-runsc.sh (which prints
    none) the module version the script kept next to it."""
    kept = Path(f"{binary}.version")
    with contextlib.suppress(OSError):
        return kept.read_text().strip()
    out = probe([binary, "--version"])
    return " ".join(out.stdout.split("\n")[:2]).strip() or "unknown"


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


class OciLifecycle(Lifecycle):
    """The runtime's ``checkpoint`` into an image directory (which stops the container: runsc
    saves its sandbox itself, runc through CRIU), then its ``restore`` of it as a new container
    of the same id, bundle, namespace and cgroup: the instance from then on. The image directory
    and the new container are in the ledger before they exist; the directory goes once the
    restored container answers."""

    def __init__(self, driver: OciDriver, inst: OciInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Stop-and-copy on one host: the container is stopped from the checkpoint until the new
        one answers, so the downtime is the whole move, and one pass saves everything (the
        study refused post-copy and auto-converge: ``copies_once``)."""
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
        """Checkpoint the container, delete it, restore it as a new container."""
        inst, ledger = self.inst, self.driver.ledger
        if not inst.alive():
            raise InstanceError(f"{inst.name}: the container is not running any more")
        images = operation_path(self.driver.workdir, inst, "checkpoint")
        made = ledger.add("path", str(images))
        try:
            t0 = time.monotonic()
            save = self._runtime(
                ["checkpoint", "--image-path", str(images), inst.container_id], deadline
            )
            save_s = time.monotonic() - t0
            # the image, not CRIU's log of making it
            files = {
                f.name: f.stat().st_size
                for f in sorted(images.iterdir())
                if not f.name.endswith(".log")
            }
            self._delete_old()
            t1 = time.monotonic()
            self._restore(images, deadline)
            done = time.monotonic()
        finally:
            ledger.release(made)
        steps = {"checkpoint_s": save_s, "delete_s": t1 - t0 - save_s, "restore_s": done - t1}
        raw = json.dumps({"checkpoint": save, "files": files, "steps": steps})
        return _Move(save_s, sum(files.values()), done - t1, done - t0, raw)

    def _runtime(self, argv: list[str], deadline: float) -> str:
        """Run one runtime command on the instance; its output (InstanceError if it failed)."""
        proc = subprocess.run(
            [*self.inst.runtime, *argv],
            capture_output=True,
            text=True,
            timeout=time_left(deadline),
            check=False,
        )
        if proc.returncode != 0:
            what = f"{self.inst.name}: {self.driver.runtime_name} {argv[0]}"
            raise InstanceError(failed(what, proc))
        return (proc.stdout + proc.stderr).strip()

    def _delete_old(self) -> None:
        """Remove the checkpointed container (it stopped with the checkpoint) and wait for its
        processes, which hold the data disk and the state directory until they go."""
        inst = self.inst
        (old,) = [r for r in inst.resources if r.kind == "container"]
        inst.resources.remove(old)
        self.driver.ledger.release(old)
        wait_exited(inst.init, STOP_TIMEOUT_S)
        inst.init = None

    def _restore(self, images: Path, deadline: float) -> None:
        """``restore`` the image as a new container of the old one's id (free again once that
        was deleted: names, cgroup and the ledger's cleanup stay as they were); the instance is
        that container once its first ``exec`` answers."""
        inst, runtime = self.inst, self.driver.runtime_name
        container_id = inst.container_id
        bundle = self.driver._bundle(inst.index)
        inst.resources.append(
            self.driver.ledger.add("container", container_id, runtime=inst.runtime)
        )
        # gVisor's netstack took the address off the link; a restored sandbox reads it there
        self.driver.network.readdress_host_netns(inst.index)
        log = bundle / "restore.log"
        with log.open("wb") as out:
            proc = subprocess.run(
                [*inst.runtime, "restore", "--detach", "--bundle", str(bundle),
                 "--image-path", str(images), container_id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=time_left(deadline),
                check=False,
            )  # fmt: skip
        if proc.returncode != 0:
            words = last_words(proc.returncode, output=log)
            raise InstanceError(f"{inst.name}: {runtime} restore failed ({words})")
        inst.init = self.driver._init_process(inst)
        probe = inst.exec(["true"], timeout=time_left(deadline))
        if not probe.ok:
            raise InstanceError(f"{inst.name}: no answer after the restore: "
                                f"{probe.describe_failure()}")  # fmt: skip


class Criu(NamedTuple):
    """The CRIU runc is handed: its path and version."""

    path: str
    version: str


CRIU_MIN = (4, 1)
"""The first CRIU that dumps on this kernel (6.13 moved the rt vDSO: "vdso: Failed to fill self
vdso symtable" from 3.17)."""


@functools.cache
def criu() -> Criu | None:
    """The CRIU runc would use (hvbench's virtualenv first, see scripts/install-criu.sh), or
    None if there is none of CRIU_MIN or later."""
    path = which("criu")
    if path is None:
        return None
    out = probe([path, "--version"])
    found = re.search(r"Version: ((\d+)\.(\d+)(?:\.\d+)?)", out.stdout)
    if out.returncode != 0 or found is None:
        return None
    if (int(found.group(2)), int(found.group(3))) < CRIU_MIN:
        return None
    return Criu(path, found.group(1))
