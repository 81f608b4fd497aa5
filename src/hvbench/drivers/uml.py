"""User-mode Linux guests (``driver: uml``): Debian's ``linux.uml`` kernel as a host process.

Each instance is one UML kernel started inside the run's network namespace. Its root is the
guest image's tree as an ext4 file made once per image (``mkfs.ext4 -d``, no mount) and shared
read-only, each instance writing to a copy-on-write file of its own (UML's ``ubd0=cow,base``);
or, with ``root: hostfs``, the tree unpacked into the run's directory and mounted from the host.
Workloads that need a full userland (``Needs.userland``: kernbench, consolidation's servers) get
the Debian root filesystem image of ``guest.userland`` on the same copy-on-write ubd instead, the
cached image never written; UML mounts it itself, so no initramfs is involved: ``init=`` names the
image's busybox init (``USERLAND_INIT``), which runs the same rc and agent as the other roots, and
the UML kernel's own modules (nfsd, ...) are mounted from the host's ``/usr/lib/uml/modules``
read-only over hostfs.
The data disk is a second ubd backed by a file or block device; the NIC is the vector driver on a
fresh tap of the run's bridge with ``gro=1`` (without it inbound TCP collapses to kbit/s).

Control channel: qemu-guest-agent in the guest, on UML's second serial line (``ssl1``), which the
image's agent script opens as ``/dev/ttyS1`` when there is no virtio port. UML can bind a line to
a host file descriptor but not to a listening socket, so the line is one end of a socketpair and
a relay thread serves the other end on a unix socket: the host side is then the same GuestAgent
as for QEMU, reconnects included.

Hosts whose XSAVE area is larger than UML expects (AMX) refuse UML's ptrace write of the FP
registers; a bounded probe boot detects that and an LD_PRELOAD shim (uml_xstate.c, built with
the system compiler into the cache) makes it work.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import Availability, Driver, PlatformSettings
from hvbench.drivers.console import Console
from hvbench.drivers.disks import DataImage, mount_data_disk
from hvbench.drivers.footprint import Footprint, Pace
from hvbench.drivers.last_words import VmmFailed, last_words
from hvbench.drivers.serial_relay import LineRelay
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import rootfs, userland
from hvbench.guest.agent import GuestAgent
from hvbench.host.inventory import boot_id
from hvbench.host.network import PREFIX, tap_and_mac
from hvbench.host.process import failed, probe, run_bounded
from hvbench.host.resources import Ledger, Resource
from hvbench.store import WhatRan
from hvbench.units import Size

UML = "linux.uml"
FP_FAILURE = b"ptrace set fp regs failed"
PROBE_SECONDS = 30.0
PROBE_VERSION = 2
"""Part of a saved verdict's stamp: version 1 took init killed by the failed FP write for a
success (its panic reads the same), so its verdicts are probed again."""
DATA_DEVICE = "/dev/ubdb"
"""The data disk is always the second ubd, also when the root is on hostfs."""
USERLAND_INIT = "/usr/lib/hvbench/bin/init"
"""busybox init on a userland image (one of the applet links ``userland._add_hvbench`` makes):
it reads the image's /etc/inittab, as the initramfs's ``switch_root`` to ``busybox init`` does."""
MODULES = "/usr/lib/uml/modules"
"""The UML kernel's modules on the host (user-mode-linux), a directory per release."""


def cache_dir() -> Path:
    """Cached UML artifacts (root filesystems, the shim, the probe's verdict), beside the images."""
    return guest_image.cache_root() / "uml"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One builder at a time per cache directory, across processes."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def uml_version() -> str:
    return probe([UML, "--version"]).stdout.strip() or "unknown"


# the XSAVE shim ---------------------------------------------------------------------------


def _shim_source() -> bytes:
    return resources.files("hvbench.drivers").joinpath("uml_xstate.c").read_bytes()


def shim_path(cache: Path | None = None) -> Path:
    """Where the shim built from this source lives (named by the source's hash)."""
    key = hashlib.sha256(_shim_source()).hexdigest()[:16]
    return (cache or cache_dir()) / f"uml-xstate-{key}.so"


def build_shim(cache: Path | None = None) -> Path:
    """Compile the shim with the system compiler once; a cached artifact, not a run's."""
    out = shim_path(cache)
    if out.exists():
        return out
    if not shutil.which("gcc"):
        raise HvbenchError(
            "uml: this host needs the XSAVE shim, which is built with gcc: apt-get install gcc"
        )
    with _locked(out.parent):
        if out.exists():
            return out
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            src, lib = Path(tmp) / "uml_xstate.c", Path(tmp) / "shim.so"
            src.write_bytes(_shim_source())
            proc = subprocess.run(
                ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(lib), str(src), "-ldl"],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise HvbenchError(f"uml: building the XSAVE shim failed: {last}")
            os.rename(lib, out)
    return out


@dataclass(frozen=True)
class XstateVerdict:
    """Whether UML runs on this host, and whether it needs the shim to."""

    usable: bool
    shim: bool
    reason: str


def probe_boot(env: dict[str, str]) -> tuple[bytes, bool]:
    """Boot UML with the host's root read-only over hostfs and ``/bin/true`` as init: it reaches
    user space (where the FP registers are first written) and then panics, so it ends by itself
    in about a second. Returns the console output and whether init ran."""
    with tempfile.TemporaryDirectory(prefix="hvbench-uml-") as tmp:
        ledger = Ledger(f"uml-probe-{os.getpid()}-{time.time_ns()}")
        ledger.claim()
        ledger.add("path", tmp)  # UML's own directory (pid file, mconsole socket) is in it
        pids: list[int] = []

        def started(pid: int) -> None:
            pids.append(pid)
            with contextlib.suppress(psutil.Error):
                ledger.add_process(pid)

        argv = [
            UML,
            "mem=64M",
            "root=/dev/root",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            "init=/bin/true",
            "con=null",
            "ssl=null",
            "con0=null,fd:1",
            "umid=probe",
            f"uml_dir={tmp}",
        ]
        try:
            result = run_bounded(["env", *_env_args(env), *argv], PROBE_SECONDS, on_start=started)
            output = result.stdout + result.stderr
        except CommandTimeout:
            output = b"(timed out)"
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            ledger.release_all()
    return output, init_ran(output)


def init_ran(output: bytes) -> bool:
    """Whether a probe boot's init ran: its end panics the kernel whether /bin/true exited or
    was killed by the fault a failed FP register write turns into (exitcode=0x0000000b), and
    only the first counts."""
    return b"Attempted to kill init" in output and FP_FAILURE not in output


def _env_args(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(env.items())]


def _last_words(output: bytes) -> str:
    lines = [ln.strip() for ln in output.decode(errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-2:]) or "(no output)"


def xstate_verdict(cache: Path | None = None) -> XstateVerdict:
    """Decided by bounded probe boots (without, then with the shim) and remembered until the
    host reboots or UML changes."""
    cache = cache or cache_dir()
    path = cache / "xstate-probe.json"
    stamp = {
        "boot_id": boot_id(),
        "uml": uml_version(),
        "shim": shim_path(cache).name,
        "probe": PROBE_VERSION,
    }
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(path.read_text())
        if saved["stamp"] == stamp:
            return XstateVerdict(saved["usable"], saved["shim"], saved["reason"])
    output, ok = probe_boot({})
    if ok:
        verdict = XstateVerdict(True, False, "reaches user space unaided (no XSAVE shim needed)")
    elif FP_FAILURE in output:
        shim = build_shim(cache)
        output, ok = probe_boot({"LD_PRELOAD": str(shim)})
        verdict = XstateVerdict(
            ok,
            True,
            f"the host's XSAVE area is larger than UML writes ({FP_FAILURE.decode()}); "
            + (
                f"UML runs with the LD_PRELOAD shim {shim}"
                if ok
                else f"even the shim does not help: {_last_words(output)}"
            ),
        )
    else:
        verdict = XstateVerdict(False, False, f"UML probe boot failed: {_last_words(output)}")
    cache.mkdir(parents=True, exist_ok=True)
    record = {"stamp": stamp, "usable": verdict.usable, "shim": verdict.shim}
    path.write_text(json.dumps({**record, "reason": verdict.reason}))
    return verdict


# the root filesystem ----------------------------------------------------------------------


def root_image(img: guest_image.GuestImage, ledger: Ledger, scratch: Path) -> Path:
    """The image's tree as an ext4 file, made once per image key with ``mkfs.ext4 -d`` from the
    tree unpacked in ``scratch`` (a directory of the run) and removed right after."""
    out = cache_dir() / f"root-{img.key}.ext4"
    if out.exists():
        return out
    with _locked(out.parent):
        if out.exists():
            return out
        tree = rootfs.unpack(img, scratch / f"uml-root-{img.key}", ledger, [])
        try:
            used = sum(p.lstat().st_size for p in tree.rglob("*"))
            size_mib = max(64, used * 13 // 10 >> 20) + 64  # room for what the guest writes
            tmp = out.with_name(f".{out.name}.{os.getpid()}")
            proc = subprocess.run(
                ["mkfs.ext4", "-q", "-F", "-d", str(tree), str(tmp), f"{size_mib}M"],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise HvbenchError(failed("uml: mkfs.ext4 -d", proc))
            os.rename(tmp, out)
        finally:
            shutil.rmtree(tree, ignore_errors=True)  # its ledger entry is then a no-op
    return out


def prune_roots(keep: set[str]) -> list[Path]:
    """Remove the root filesystems of images no longer in the cache (``keep``: their keys)."""
    removed = []
    with _locked(cache_dir()):
        for path in cache_dir().glob("root-*.ext4"):
            if path.stem.removeprefix("root-") not in keep:
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


# the agent's serial line ------------------------------------------------------------------


class MeteredLineRelay(LineRelay):
    """The serial-line relay, metered as UML 6.1's line driver needs.

    UML reads the line only when new bytes arrive (edge-triggered epoll), so requests sent while
    the guest's agent had not opened its tty wait unread; and once its tty holds ~4 KB unread it
    throttles the line, after which UML never reads it again (line_unthrottle does not re-arm
    the input). A slow boot did both: GuestAgent's sync every 0.1 s piled up and then reached the
    tty at once, and qemu-ga went deaf right after answering (or never heard the newest sync).
    Hence: write at most CHUNK bytes, and only once UML has taken all earlier ones; while it has
    not, a newer request from the client supersedes the queued ones, and a newline (whitespace
    between requests, which qemu-ga skips) now and then makes UML read what waits."""

    CHUNK = 1024
    """Bytes written to the line at a time: far below the ~4 KB that throttle the guest's tty."""
    DRAIN_POLL = 0.005
    """Seconds between looks at whether UML took a chunk of a request that is half written."""
    NUDGE = 0.1
    """Seconds before unread bytes get a newline, at first; then 1/20 of the time they waited,
    which keeps the newlines few (~100 in two minutes) in the line's buffer."""

    def __init__(self, line: int, path: str) -> None:
        super().__init__(line, path)
        self._partial = False
        """The last bytes written end inside a request."""
        self._waiting_since = 0.0
        self._last_write = 0.0

    def _timeout(self) -> float | None:
        if not self._unread():
            return None
        if self._partial:
            return self.DRAIN_POLL
        if time.monotonic() >= self._nudge_due():
            self._write(b"\n")
        return max(0.0, self._nudge_due() - time.monotonic())

    def _may_write(self) -> bool:
        return not self._unread()

    def _unread(self) -> bool:
        """Whether UML has yet to read some of what was written to the line."""
        queued = array.array("i", [0])
        fcntl.ioctl(self.line, termios.TIOCOUTQ, queued)
        return queued[0] > 0

    def _write(self, data: bytes | bytearray) -> int:
        waiting = self._unread()
        self._last_write = time.monotonic()
        if not waiting:
            self._waiting_since = self._last_write
        sent = super()._write(data[: self.CHUNK])
        self._partial = not data[:sent].endswith(b"\n")
        return sent

    def _nudge_due(self) -> float:
        return self._last_write + max(self.NUDGE, (self._last_write - self._waiting_since) / 20)

    def _queued(self) -> None:
        """Drop the queued requests (one a line) but the newest when the guest read none of
        them: the client only sends another once it gave up on the one before (a new sync)."""
        if not self._partial and self._unread():
            end = self._to_guest.rfind(b"\n", 0, len(self._to_guest) - 1) + 1
            del self._to_guest[:end]


# settings ---------------------------------------------------------------------------------


class UmlDisk(BaseModel):
    """The data disk that disk workloads measure: a second ubd device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backing: Literal["file", "block"] = "file"
    path: str | None = None
    """For ``file``: the directory that holds the image (default: the run's work directory).
    For ``block``: the partition, LV or loop device to use, which is erased."""
    size: Size = 2 << 30
    sync: bool = False
    """Open the backing file O_SYNC (UML's ``ubdNs``); otherwise writes go through the host's
    page cache, as UML has no O_DIRECT mode."""

    @model_validator(mode="after")
    def _consistent(self) -> UmlDisk:
        if self.backing == "block" and not self.path:
            raise ValueError("backing: block needs a path (a partition, LV or loop device)")
        return self


PACE = Pace(slowdown=2.0, io_slowdown=2.0, start_s=4.0, core_s=2.0)
"""Fixed work (sqlite, xz, zstd and stockfish: ``bench/footprint.py``) took 1.78x, 1.98x and
2.29x native's time in three runs on the 2-core development host (zstd's many system calls 3x,
xz 1.1-1.5x); the default study's cpu composite was 45-51% of native in earlier runs, its dd
write 51%. A start to the agent, a 1G guest with its data disk, is 1.8 ±0.2 s in the default
study's runs and 4.1-6.5 s in ``bench/footprint.py``'s first group of one, a stop 0.1 s; four at
once took 3.4-3.7 s on 2 cores (5.1-9.3 s and 7.5-12.8 s before rc stopped looking for devices
in UML, whose drivers are all built in)."""


class UmlSettings(PlatformSettings):
    no_lifecycle: ClassVar[str] = (
        "cannot: user-mode Linux has no way to save or move a running kernel"
    )

    driver: Literal["uml"]
    memory: Size = 512 << 20
    root: Literal["ubd", "hostfs"] = "ubd"
    """ubd: a copy-on-write block device over the image's ext4 (shared, built once); hostfs:
    the image's tree unpacked in the run's directory, a host directory the guest mounts."""
    nic: Literal["vector", "none"] = "vector"
    """The vector driver on a tap of the run's bridge (UML's fastest transport)."""
    gro: bool = True
    """Generic receive offload on the vector transport; without it inbound TCP collapses."""
    disk: UmlDisk = UmlDisk()
    kernel_args: str = ""
    boot_timeout: float = Field(default=120, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> UmlSettings:
        if self.memory < 64 << 20:
            raise ValueError("memory: at least 64M")
        return self

    def footprint(self) -> Footprint:
        """The UML kernel holds 2.6 MiB besides its guest's memory (its physical memory file)
        and 7 tasks (the kernel's process and threads, the processes for the guest's address
        spaces, hvbench's relay for its agent's line), no namespace: per instance between
        groups of 1 and 4 (``bench/footprint.py``, 2-core host, kernel 6.18). Issue 14 measured
        7.9 MiB at 128M: the larger is taken."""
        return Footprint(memory=8 << 20, tasks=7, address=self.nic != "none")

    def pace(self, kvm: bool) -> Pace:
        return PACE


# instances and the driver -----------------------------------------------------------------


def _safe(path: str) -> str:
    """A path as one word of UML's command line: its options are split at whitespace and
    commas, so a path holding either would become options of its own."""
    if any(c.isspace() or c == "," for c in path):
        raise HvbenchError(f"uml: the path {path!r} holds a space or comma, which UML cannot take")
    return path


@dataclass
class UmlInstance(AgentInstance):
    vmm: ClassVar[str] = "UML"
    proc: subprocess.Popen | None = None
    agent: GuestAgent | None = None
    relay: MeteredLineRelay | None = None
    console: Console | None = None

    def agent_channel(self) -> GuestAgent | None:
        return self.agent

    def guest_ram(self, path: str, size: int) -> bool:
        """UML's physical memory is a file it creates unlinked (O_TMPFILE, in /dev/shm or its
        TMPDIR), mapped in pieces around the kernel image by the kernel and each of its
        processes: every mapping of a file that no longer exists."""
        return path.startswith("/") and not os.path.exists(path)

    def host_pids(self) -> list[int]:
        """The UML kernel and every process it made (one per guest address space, helpers)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return []
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            return []
        return [proc.pid, *(c.pid for c in children)]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_words(self) -> str:
        """UML's exit status and its console (its kernel's messages and its own errors)."""
        if self.proc is None:
            return "never started"
        return last_words(self.proc.poll(), console=self.console.log if self.console else None)

    def kill(self) -> None:
        if self.agent:
            self.agent.close()
        if self.proc:
            # SIGTERM first: UML then kills and reaps the host processes of its guest itself,
            # where a SIGKILL would leave them for init to reap
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.relay:
            self.relay.stop()
        if self.console:
            self.console.join(5)


@dataclass(frozen=True)
class UmlOpened:
    """What the uml driver resolves once per run (``open``)."""

    verdict: XstateVerdict
    env: dict[str, str]
    """What the UML process's environment adds: the xstate shim where it needs one."""
    image: guest_image.GuestImage
    root: Path | None
    """The ubd root image (``root: ubd``); None boots each instance from a hostfs tree."""
    rootfs: userland.RootImage | None
    """The userland image, where the workloads need one: then it is ``root``."""


class UmlDriver(Driver[UmlSettings, UmlInstance, UmlOpened]):
    name: ClassVar[str] = "uml"
    settings_model = UmlSettings

    @classmethod
    def check(cls) -> Availability:
        if not shutil.which(UML):
            return Availability(False, f"{UML} not found", "apt-get install user-mode-linux")
        if not shutil.which("qemu-ga"):
            return Availability(
                False, "qemu-ga not found (the guest's agent)", "apt-get install qemu-guest-agent"
            )
        try:
            verdict = xstate_verdict()
        except HvbenchError as e:  # the shim wanted gcc, or the probe a state directory
            return Availability(False, str(e), "" if shutil.which("gcc") else "apt-get install gcc")
        version = f"UML {uml_version()}"
        if not verdict.usable:
            return Availability(False, f"{version}: {verdict.reason}", "see the UML console above")
        return Availability(True, f"{version}: {verdict.reason}")

    def _resolve(self) -> UmlOpened:
        """Image, root filesystem and shim decision."""
        s = self.settings
        if self.needs.userland and s.root == "hostfs":
            raise HvbenchError(
                f"platform {self.platform}: workloads needing a full userland (kernbench, "
                "consolidation) boot a root filesystem image, which root: hostfs cannot; "
                "use root: ubd"
            )
        if not shutil.which(UML):
            raise HvbenchError(
                f"platform {self.platform}: {UML} not found (apt-get install user-mode-linux)"
            )
        verdict = xstate_verdict()
        if not verdict.usable:
            raise HvbenchError(f"platform {self.platform}: UML cannot run here: {verdict.reason}")
        env = {"LD_PRELOAD": str(build_shim())} if verdict.shim else {}
        image = guest_image.build(set(self.needs.tools))
        rootfs = root = None
        if self.needs.userland:
            rootfs = userland.build(self.needs.tools, image, self.needs.packages)
            root = rootfs.disk
        elif s.root == "ubd":
            root = root_image(image, self.ledger, self.workdir)
        return UmlOpened(verdict, env, image, root, rootfs)

    def _prepare(self, count: int) -> None:
        if self.settings.nic != "none":
            self.network.up()  # once, before the threads that add their taps

    def _instance(self, index: int) -> UmlInstance:
        return UmlInstance(self.platform, index, 1, self.settings.memory >> 20)

    def _argv(
        self, inst: UmlInstance, prefix: Path, line_fd: int, data: DataImage | None
    ) -> list[str]:
        s = self.settings
        made = inst.resources
        uml_dir = self.ledger.add("path", f"{prefix}.uml")
        made.append(uml_dir)
        argv = [UML, f"mem={s.memory >> 20}M", *self._root_args(prefix, made)]
        argv += [
            f"init={USERLAND_INIT if self.opened.rootfs else '/init'}",
            "con=null",
            "ssl=null",
            "con0=null,fd:1",
            f"ssl1=fd:{line_fd}",
            f"umid={inst.name}",
            f"uml_dir={_safe(uml_dir.name)}",
            "printk.time=1",
            f"hvbench.hostname={inst.name}",
            "hvbench.modules=",  # every driver is built into UML's kernel: none to look for
        ]
        if s.nic == "vector":
            tap, mac = tap_and_mac("u", 0x13, inst.index)
            made.append(self.network.add_tap(tap))
            inst.address = self.network.address(inst.index)
            argv.append(f"vec0:transport=tap,ifname={tap},gro={int(s.gro)},mac={mac}")
            argv.append(f"hvbench.ip={inst.address}/{PREFIX}")  # rc-late names vec0 eth0
            argv = ["nsenter", f"--net={self.network.netns_path}", "--", *argv]
        if data is not None:
            argv.append(f"ubd1{'s' if s.disk.sync else ''}={_safe(data.path)}")
        if s.kernel_args:
            argv += s.kernel_args.split()
        return argv

    def _root_args(self, prefix: Path, made: list[Resource]) -> list[str]:
        opened = self.opened
        if opened.root is not None:
            cow = self.ledger.add("path", f"{prefix}.cow")
            made.append(cow)
            return [f"ubd0={_safe(cow.name)},{_safe(str(opened.root))}", "root=/dev/ubda", "rw"]
        # each instance boots a fresh tree
        tree = rootfs.unpack(opened.image, Path(f"{prefix}.root"), self.ledger, made)
        return ["root=/dev/root", "rootfstype=hostfs", f"rootflags={_safe(str(tree))}", "rw"]

    @classmethod
    def ran_by_settings(cls, settings: UmlSettings) -> WhatRan:
        sync = ", O_SYNC writes" if settings.disk.sync else ""
        return WhatRan(disk_cache=f"UML's ubd has no O_DIRECT{sync}")

    def _disk_description(self) -> str:
        disk = self.settings.disk
        what = f"block device {disk.path}" if disk.backing == "block" else "sparse raw file"
        mode = "O_SYNC" if disk.sync else "through the host page cache"
        return f"{what} on UML ubd, {mode}"

    def _start_one(self, inst: UmlInstance, deadline: float) -> None:
        s = self.settings
        prefix = self.workdir / inst.name
        sock = self.ledger.add("path", f"{prefix}.agent.sock")
        inst.resources.append(sock)
        data = None
        if self.needs.data_disk:
            data = DataImage.make(self, s.disk, f"{prefix.name}.data.raw", inst.resources)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        inst.relay = MeteredLineRelay(ours.detach(), sock.name)
        inst.relay.start()
        try:
            argv = self._argv(inst, prefix, theirs.fileno(), data)
            started = time.monotonic()
            proc = inst.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                env={**os.environ, **self.opened.env},
                start_new_session=True,
            )
        finally:
            theirs.close()
        console = inst.console = Console(proc.stdout, Path(f"{prefix}.console.log"), started)
        console.start()
        try:
            inst.resources.append(self.ledger.add_process(proc.pid))
        except psutil.Error as e:
            proc.wait()
            console.join(5)
            raise VmmFailed.of(f"{inst.name}: UML exited at once", proc, console=console.log) from e
        inst.agent = GuestAgent(sock.name, inst.name)
        try:
            inst.agent.wait_ready(min(deadline, started + s.boot_timeout), inst.alive)
        except InstanceError as e:
            why = "exited" if not inst.alive() else "did not answer in time"
            raise VmmFailed.of(f"{inst.name}: UML {why}", proc, console=console.log) from e
        console.ready()
        inst.boot = console.boot_phases()
        if self.opened.rootfs:
            self._mount_modules(inst)
        if data is not None:
            mount_data_disk(inst, DATA_DEVICE, self._disk_description(), formatted=data.formatted)

    def _mount_modules(self, inst: UmlInstance) -> None:
        """The userland image holds the modules of the QEMU guests' kernel: give the guest the
        UML kernel's own (nfsd for consolidation's nfs role), read-only from the host."""
        modules = f"{MODULES}/{uml_version()}"  # the UML kernel's release
        if not os.path.isdir(modules):
            return
        mount = (
            f'mkdir -p "/lib/modules/$(uname -r)" && mount -t hostfs -o "ro,{modules}" '
            'hostfs "/lib/modules/$(uname -r)"'
        )
        result = inst.exec(["sh", "-c", mount], timeout=30)
        if not result.ok:
            raise InstanceError(f"{inst.name}: mounting UML's modules: {result.describe_failure()}")

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        opened = self.opened
        info["resolved"] = {
            "uml": uml_version(),
            "xstate_shim": opened.verdict.shim,
            "xstate_reason": opened.verdict.reason,
            "root": str(opened.root or "hostfs: the image's tree in the run's directory"),
            "host_cores": os.cpu_count(),
        }
        info["image"] = opened.image.manifest
        if opened.rootfs:
            info["rootfs"] = opened.rootfs.summary()
        return info
