"""QEMU guests (``driver: qemu``): KVM where it can run a stock guest, TCG otherwise.

Each instance is one QEMU process started inside the run's network namespace (so it can open its
tap on the run's bridge), booting a Debian kernel with an initramfs built from the host's own
tool binaries (hvbench.guest.image). Commands go through qemu-guest-agent on a virtio-serial
port, never through the NIC under test. The kernel console is QEMU's stdout, read by a thread
that timestamps the boot phases.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator
from qemu.qmp.legacy import QEMUMonitorProtocol

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import (
    Availability,
    Driver,
    Instance,
    Lifecycle,
    MigrationPlan,
    Needs,
    Operation,
    OperationReport,
    PlatformSettings,
)
from hvbench.drivers.console import Console, launch
from hvbench.drivers.disks import DATA_SERIAL, DataImage, find_disk, format_data_disk
from hvbench.drivers.footprint import KVM_PACE, Footprint, Pace
from hvbench.drivers.last_words import VmmFailed, last_words
from hvbench.drivers.qemu_devices import (
    QEMU,
    Aio,
    Bus,
    Cache,
    Disk,
    KernelBoot,
    Machine,
    MachineType,
    Nic,
    NicModel,
)
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import userland
from hvbench.guest.agent import GuestAgent
from hvbench.host import hugepages
from hvbench.host.hugepages import PAGE_KIB
from hvbench.host.inventory import PVM_ONLY, boot_id, host_is_a_guest, kvm_is_pvm_only
from hvbench.host.network import tap_and_mac
from hvbench.host.process import executable, which
from hvbench.host.resources import Ledger, Resource
from hvbench.host.storage import make_image
from hvbench.store import WhatRan
from hvbench.units import Size

BACKPORTS = "qemu-system-x86_64-backports"
"""Debian 12 backports' QEMU 10.0 in hvbench's virtualenv (scripts/install-qemu-backports.sh):
under TCG it migrates a guest that writes its memory without losing writes, which 7.2 does not."""
QMP_CONNECT_S = 10.0
MIGRATION_POLL_S = 0.05
"""Seconds between two query-migrate of a migration in progress."""
PROBE_SECONDS = 25.0
"""How long a stock guest gets to reach its init under KVM before KVM is judged unusable."""
VHOST_NET = "/dev/vhost-net"


# settings ---------------------------------------------------------------------------------


class QemuDisk(BaseModel):
    """The data disk that disk workloads measure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bus: Bus = "virtio-blk"
    format: Literal["raw", "qcow2"] = "raw"
    backing: Literal["file", "block"] = "file"
    path: str | None = None
    """For ``file``: the directory that holds the image (default: the run's work directory).
    For ``block``: the partition, LV or loop device to use, which is erased."""
    cache: Cache = "none"
    aio: Aio = "threads"
    size: Size = 2 << 30
    """Size of a ``file`` image (sparse)."""
    queues: PositiveInt = 1
    """virtio-blk request queues (``num-queues``), each with its own interrupt."""

    @model_validator(mode="after")
    def _consistent(self) -> QemuDisk:
        if self.queues > 1 and self.bus != "virtio-blk":
            raise ValueError("disk queues: only virtio-blk takes several queues here")
        if self.aio == "native" and self.cache not in ("none", "directsync"):
            raise ValueError("aio: native needs cache: none or directsync (O_DIRECT)")
        if self.backing == "block" and not self.path:
            raise ValueError("backing: block needs a path (a partition, LV or loop device)")
        if self.backing == "block" and self.format != "raw":
            raise ValueError("backing: block takes format: raw (the device itself is the disk)")
        return self


TCG_PACE = Pace(slowdown=10.0, io_slowdown=3.5, start_s=7.0, core_s=7.0)
"""Under TCG, four fixed jobs (sqlite, xz, zstd, stockfish: ``bench/footprint.py``) in a 1-vCPU
guest took 10.3x, 9.6x and 12x native's time in three runs on the 2-core development host
(sqlite and stockfish 18-21x, xz 2.3-3.6x), and the default study's cpu apps samples 7.3-7.8x
native's, about 10x once their openssl programs' fixed time is set apart (PLATFORMS: about 7x).
Work on the data disk slows less: the default study's dd of 1 GiB took 2.5-3.9x native's on
virtio-blk, 3.5-4.2x on IDE. A start to the agent, the data disk formatted, is 6.8-7.3 s for one
(pc, 1G, virtio), a stop 0.03 s; four at once took 11.9-14.7 s on 2 cores."""
TCG_FOOTPRINT_MIB = 137
"""MiB QEMU holds besides guest memory under TCG, mostly its translation cache (pc, 1G, virtio;
issue 14's 141-173 MiB at 128M and 512M), with 9 tasks and one more per vCPU (9.3-9.7 measured
with one: the main loop, the vCPU, RCU, I/O and worker threads, hvbench's console reader): per
instance between groups of 1 and 4 (``bench/footprint.py``). Under KVM there is no translation
cache; the figure is kept, which errs towards refusing."""


class QemuSettings(PlatformSettings):
    driver: Literal["qemu", "libvirt"]
    """``libvirt`` for the same machine through libvirt (``LibvirtSettings``)."""
    accel: Literal["kvm", "tcg", "auto"] = "auto"
    machine: MachineType = "pc"
    cpu: str | None = Field(default=None, description="default: host under KVM, max under TCG")
    vcpus: PositiveInt = 1
    memory: Size = 512 << 20
    pin: bool = False
    """Pin each vCPU thread to a host core (round robin over the instances' vCPUs)."""
    nic: NicModel | Literal["none"] = "virtio-net"
    vhost: bool = False
    """virtio-net's data path in the host kernel (vhost-net, /dev/vhost-net) rather than in
    QEMU's own I/O thread: the setting behind most differences in VMMs' network figures."""
    queues: PositiveInt = 1
    """virtio-net queue pairs (multiqueue); the guest enables them all (ethtool -L)."""
    hugepages: Literal["thp", "2M", "1G"] = "thp"
    """Guest memory: thp is QEMU's anonymous memory, advised for transparent huge pages; 2M or
    1G puts it on hugetlbfs pages the run reserves on the host and gives back afterwards."""
    disk: QemuDisk = QemuDisk()
    kernel: Literal["amd64", "cloud-amd64"] = "amd64"
    kernel_form: Literal["auto", "vmlinux", "bzimage"] = "auto"
    """auto: the uncompressed ELF vmlinux where it could be extracted (boots seconds faster)."""
    tsc_early_khz: PositiveInt | None = None
    """microvm under TCG: the TSC rate to trust (default: the host's), as calibration hangs."""
    kernel_args: str = ""
    boot_timeout: float = Field(default=300, gt=0)
    binary: str = QEMU
    """The QEMU to run: a path, or a program in hvbench's virtualenv or on PATH (default the
    system's; qemu-system-x86_64-backports is QEMU 10.0: ./setup.sh --with-qemu-backports), so
    that two QEMU versions can be two platforms of one study."""

    @field_validator("binary")
    @classmethod
    def _installed(cls, binary: str) -> str:
        if executable(binary) is None:
            raise ValueError(
                "an installed QEMU (./setup.sh --with-qemu-backports installs this one)"
                if binary == BACKPORTS
                else "an installed QEMU: a path, or a program in hvbench's virtualenv or on PATH"
            )
        return binary

    @model_validator(mode="after")
    def _consistent(self) -> QemuSettings:
        if self.machine == "microvm":
            if self.nic not in ("virtio-net", "none"):
                raise ValueError("machine: microvm has no PCI bus; use nic: virtio-net or none")
            if self.disk.bus not in ("virtio-blk", "virtio-scsi"):
                raise ValueError(
                    "machine: microvm has no PCI bus; use disk bus virtio-blk or virtio-scsi"
                )
        if self.kernel == "cloud-amd64" and self.nic in ("e1000", "rtl8139"):
            raise ValueError(f"kernel: cloud-amd64 has no {self.nic} driver; use kernel: amd64")
        if self.memory < 128 << 20:
            raise ValueError("memory: at least 128M (the initramfs lives in guest memory)")
        if (self.vhost or self.queues > 1) and self.nic != "virtio-net":
            raise ValueError("vhost and queues are virtio-net's: set nic: virtio-net")
        if self.hugepages != "thp" and self.memory % (PAGE_KIB[self.hugepages] << 10):
            raise ValueError(f"memory: a multiple of the {self.hugepages} huge page size")
        if self.accel == "tcg" and (self.cpu or "").split(",")[0] == "host":
            raise ValueError("cpu: host needs KVM; under TCG use max or a named model")
        return self

    def host_misfits(self, count: int) -> list[str]:
        out = []
        if self.vhost and not os.path.exists(VHOST_NET):
            out.append(
                f"vhost: on needs {VHOST_NET}, which this host lacks "
                "(modprobe vhost_net, or set vhost: off)"
            )
        if self.hugepages != "thp":
            out += filter(None, [hugepages.misfit(self.hugepages, count * self.memory)])
        model = (self.cpu or "").split(",")[0]
        binary = executable(self.binary)
        if model and binary and model not in cpu_models(binary):
            out.append(f"cpu: {model} is no CPU model of this QEMU (see {binary} -cpu help)")
        return out

    def footprint(self) -> Footprint | None:
        tasks = 9 + self.vcpus
        return Footprint(TCG_FOOTPRINT_MIB << 20, tasks, address=self.nic != "none")

    def pace(self, kvm: bool) -> Pace:
        on_kvm = self.accel == "kvm" or (self.accel == "auto" and kvm)
        return KVM_PACE if on_kvm else TCG_PACE

    def refuses(self, operation: Operation) -> str | None:
        return None  # QEMU migrates and snapshots every machine it makes here


@functools.cache
def cpu_models(binary: str) -> frozenset[str]:
    """The CPU models this QEMU knows (``-cpu help``), host and max among them."""
    out = subprocess.run([binary, "-cpu", "help"], capture_output=True, text=True, check=False)
    return frozenset(ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("x86 "))


@functools.cache
def qemu_version(binary: str) -> str:
    """The first line of ``--version`` (with Debian's package version), for the provenance."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


ACCELS = ("kvm", "tcg")
"""The accelerators a QEMU machine runs under (``accel: auto`` resolves to one)."""
PAGE_CACHED: tuple[Cache, ...] = ("writeback", "writethrough", "unsafe")
"""The disk cache modes that read (and for writeback, unsafe: write) through the host page
cache; none and directsync open the image with O_DIRECT."""


# the KVM probe ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AccelVerdict:
    accel: Literal["kvm", "tcg"]
    reason: str


def kvm_verdict(binary: str, cache: Path | None = None) -> AccelVerdict:
    """Whether KVM can run a stock guest under the QEMU at path ``binary`` here, decided by a
    bounded boot probe of that QEMU and remembered until the host reboots."""
    known = known_kvm_verdict(binary, cache)
    if known is not None:
        return known
    verdict = _probe_kvm(binary, cache)
    path = _verdict_path(binary, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"boot_id": boot_id(), "binary": binary, **vars(verdict)}
    path.write_text(json.dumps(record))
    return verdict


def known_kvm_verdict(binary: str, cache: Path | None = None) -> AccelVerdict | None:
    """``kvm_verdict`` where a probe made it since the host booted, else None (no probe)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(_verdict_path(binary, cache).read_text())
        if saved["boot_id"] == boot_id() and saved["binary"] == binary:
            return AccelVerdict(saved["accel"], saved["reason"])
    return None


def _verdict_path(binary: str, cache: Path | None) -> Path:
    key = hashlib.sha256(binary.encode()).hexdigest()[:16]
    return (cache or guest_image.cache_root()) / f"kvm-probe-{key}.json"


def _probe_kvm(binary: str, cache: Path | None) -> AccelVerdict:
    if not os.path.exists("/dev/kvm"):
        return AccelVerdict("tcg", "no /dev/kvm on this host")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return AccelVerdict("tcg", "/dev/kvm is not accessible to this user")
    if kvm_is_pvm_only():
        return AccelVerdict("tcg", f"/dev/kvm {PVM_ONLY}")
    img = guest_image.build(cache=cache)
    with _scratch_ledger() as (ledger, workdir):
        machine = Machine(
            type="pc",
            accel="kvm",
            cpu="host",
            vcpus=1,
            memory_mib=256,
            boot=_boot(img, "auto", ""),
            agent_socket=str(workdir / "agent.sock"),
            qmp_socket=str(workdir / "qmp.sock"),
            name="hvbench-kvm-probe",
            binary=binary,
        )
        start = time.monotonic()
        guest = Guest.launch(machine, workdir / "probe", ledger, netns=None)
        try:
            reached = guest.console.wait_for("init", start + PROBE_SECONDS, guest.alive)
        finally:
            guest.kill()
    if reached:
        return AccelVerdict("kvm", f"a stock guest reached init under KVM in {reached:.1f} s")
    why = (
        f"did not reach init in {PROBE_SECONDS:.0f} s"
        if guest.proc.returncode == -9
        else f"made QEMU fail ({guest.last_words()})"
    )
    return AccelVerdict("tcg", f"/dev/kvm is present but a stock guest {why}")


def kvm_runs_guests() -> bool:
    """Whether KVM runs stock guests on this host, without booting a probe (``study show`` and
    ETAs): the probe's verdict where one was made since the host booted, else what /dev/kvm
    shows (there, usable by this user, and not kvm_pvm's alone)."""
    binary = executable(QEMU)
    verdict = known_kvm_verdict(binary) if binary else None
    if verdict is not None:
        return verdict.accel == "kvm"
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return usable and not kvm_is_pvm_only()


@contextlib.contextmanager
def _scratch_ledger() -> Iterator[tuple[Ledger, Path]]:
    """A ledger and directory of their own for work outside a run (the probe)."""
    with tempfile.TemporaryDirectory(prefix="hvbench-qemu-") as tmp:
        ledger = Ledger(f"qemu-{os.getpid()}-{time.time_ns()}")
        ledger.claim()
        try:
            yield ledger, Path(tmp)
        finally:
            ledger.release_all()


# one QEMU process -------------------------------------------------------------------------


@dataclass
class Guest:
    """A running QEMU process with its console reader and agent connection."""

    machine: Machine
    proc: subprocess.Popen
    process: Resource
    console: Console
    agent: GuestAgent
    started: float
    stderr: Path

    @classmethod
    def launch(cls, machine: Machine, prefix: Path, ledger: Ledger, netns: str | None) -> Guest:
        """Start QEMU (inside ``netns`` if given) and record it in the ledger."""
        proc, process, console, stderr = launch(
            machine.argv(), prefix, ledger, netns, f"{machine.name}: QEMU"
        )
        agent = GuestAgent(machine.agent_socket, machine.name)
        return cls(machine, proc, process, console, agent, console.started, stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, deadline: float) -> None:
        """Wait for the agent; raise InstanceError with QEMU's last words if it died."""
        try:
            self.agent.wait_ready(deadline, self.alive)
        except InstanceError as e:
            if not self.alive():
                raise VmmFailed.of(
                    f"{self.machine.name}: QEMU exited",
                    self.proc,
                    stderr=self.stderr,
                    console=self.console.log,
                ) from e
            raise
        self.console.ready()

    def last_words(self) -> str:
        """QEMU's exit status, its stderr (its own errors) and the guest's console."""
        return last_words(self.proc.poll(), stderr=self.stderr, console=self.console.log)

    def kill(self) -> None:
        self.agent.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self.console.join(5)

    def vcpu_threads(self) -> list[int]:
        """Host thread ids of the vCPUs, from QMP."""
        with self.monitor(time.monotonic() + QMP_CONNECT_S) as qmp:
            cpus = qmp.cmd("query-cpus-fast")
        if not isinstance(cpus, list):
            raise InstanceError(f"{self.machine.name}: query-cpus-fast answered {cpus!r}")
        return [int(c["thread-id"]) for c in cpus if isinstance(c, dict) and "thread-id" in c]

    @contextlib.contextmanager
    def monitor(self, deadline: float) -> Iterator[QEMUMonitorProtocol]:
        """A QMP connection to this QEMU (waiting until ``deadline`` for a QEMU that is still
        making its socket); any QMP failure inside becomes an InstanceError naming the guest."""
        qmp = QEMUMonitorProtocol(self.machine.qmp_socket)
        try:
            while True:
                try:
                    qmp.connect()
                    break
                except Exception:  # the qmp library raises several kinds
                    if time.monotonic() > deadline or not self.alive():
                        raise
                    time.sleep(0.05)
            yield qmp
        except (InstanceError, HvbenchError):
            raise
        except Exception as e:
            raise InstanceError(f"{self.machine.name}: QMP: {type(e).__name__}: {e}") from e
        finally:
            qmp.close()


def _boot(img: guest_image.GuestImage, form: str, append: str) -> KernelBoot:
    if form == "vmlinux" and img.vmlinux is None:
        raise HvbenchError("kernel_form: vmlinux could not be extracted from this kernel; use auto")
    kernel = img.vmlinux if form in ("auto", "vmlinux") and img.vmlinux else img.bzimage
    # a kernel oops ends the guest (panic, then no reboot: QEMU exits) rather than leave it
    # half alive until a workload's timeout: a measurement on such a guest means nothing, and
    # its console's last words say what happened (QEMU 7.2's TCG migration oopsed guests that
    # then hung for the workload's whole timeout, 740 s)
    args = f"console=ttyS0 loglevel=6 panic=-1 oops=panic {append}".strip()
    return KernelBoot(str(kernel), str(img.initrd), args)


def host_tsc_khz() -> int:
    """The host's TSC rate in kHz, for microvm guests under TCG."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 2_000_000


# instances and the driver -----------------------------------------------------------------


@dataclass
class QemuInstance(AgentInstance):
    vmm: ClassVar[str] = "QEMU"
    guest: Guest | None = None
    channels: list[Resource] = field(default_factory=list)
    """What belongs to the QEMU process running the instance now (the process, its QMP and
    agent sockets, its tap): replaced when the instance migrates or is restored; its
    ``resources`` are what outlives one QEMU process (its disks)."""
    driver: QemuDriver | None = None
    """The driver that started it, for the operations that start a second QEMU."""

    def agent_channel(self) -> GuestAgent | None:
        return self.guest.agent if self.guest else None

    def running(self) -> Guest:
        """The QEMU running the instance; InstanceError, with its last words, where none does."""
        guest = self.guest
        if guest is None or not guest.alive():
            raise InstanceError(f"{self.name}: QEMU is not running ({self.last_words()})")
        return guest

    def kill(self) -> None:
        if self.guest:
            self.guest.kill()

    def last_words(self) -> str:
        return self.guest.last_words() if self.guest else "never started"

    def host_pids(self) -> list[int]:
        return [self.guest.proc.pid] if self.guest and self.guest.alive() else []

    def alive(self) -> bool:
        return self.guest is not None and self.guest.alive()

    def lifecycle(self) -> Lifecycle | None:
        return QemuLifecycle(self.driver, self) if self.driver else None


def root_disk(
    rootfs: userland.RootImage, ledger: Ledger, prefix: Path, made: list[Resource]
) -> Disk:
    """The root filesystem's disk of one instance, for both drivers: a copy-on-write overlay of
    ``rootfs``, so the cached image is never written."""
    overlay = Path(f"{prefix}.root.qcow2")
    made.append(ledger.add("path", str(overlay)))
    make_image(overlay, "qcow2", 0, backing=rootfs.disk)
    return Disk("root", str(overlay), "virtio-blk", "qcow2", "writeback")


def data_device(settings: QemuSettings, path: str) -> Disk:
    """The data disk as the platform sets it (bus, format, cache, aio, queues), for the qemu and
    the libvirt driver alike."""
    d = settings.disk
    return Disk("data", path, d.bus, d.format, d.cache, d.aio, DATA_SERIAL, queues=d.queues)


def nic_device(settings: QemuSettings, tap: str, mac: str) -> Nic:
    """The NIC as the platform sets it (model, vhost-net, queues), for both drivers."""
    model = settings.nic
    assert model != "none", "a platform without a NIC has no NIC device"
    return Nic(model, tap, mac, settings.vhost, settings.queues)


@dataclass(frozen=True)
class MachineBuilder:
    """The QEMU machine of a platform, shared by the qemu driver (which runs it) and the libvirt
    driver (which hands it to libvirtd as a domain): what the platform resolves once per run
    (the QEMU, the guest image, the root filesystem image, the accelerator), and each
    instance's machine, disks and huge pages made from it."""

    platform: str
    settings: QemuSettings
    binary: str
    """The QEMU executable (libvirt runs the QEMU of its own configuration instead)."""
    image: guest_image.GuestImage
    rootfs: userland.RootImage | None
    """The root filesystem image, where the workloads need a full userland."""
    accel: AccelVerdict

    @classmethod
    def resolve(
        cls, platform: str, settings: QemuSettings, needs: Needs, accel: AccelVerdict | None
    ) -> MachineBuilder:
        """Find or build the images (cached across runs) and decide the accelerator; ``accel``
        is a verdict made elsewhere (for a remote host, by its own word)."""
        binary = executable(settings.binary)
        if binary is None:
            raise HvbenchError(f"platform {platform}: binary: {settings.binary} is no longer here")
        tools = set(needs.tools)
        if settings.queues > 1 and which("ethtool"):
            tools.add("ethtool")  # the guest enables the queues beyond its vCPUs with it
        image = guest_image.build(tools, settings.kernel)
        rootfs = userland.build(tools, image, needs.packages) if needs.userland else None
        if accel is None:
            if settings.accel == "auto":
                accel = kvm_verdict(binary)
            else:
                accel = AccelVerdict(settings.accel, "set in the study")
        return cls(platform, settings, binary, image, rootfs, accel)

    def machine(self, index: int, prefix: Path, address: str | None) -> Machine:
        """Instance ``index``'s machine, its sockets named after ``prefix``, its NIC's
        ``address`` on the kernel's command line; without disks and NICs yet."""
        s = self.settings
        accel = self.accel.accel
        append = [f"hvbench.hostname={self.platform}-{index}", s.kernel_args]
        if self.rootfs:
            append.append(self.rootfs.boot_args("/dev/vda"))  # the first disk: see root_disk
        if s.machine == "microvm" and accel == "tcg":
            append.append(f"tsc_early_khz={s.tsc_early_khz or host_tsc_khz()}")
            # TCG's TSC is the host's clock; the watchdog, checking it against jiffies that
            # lag in a slow vCPU, would put the guest's clock on those jiffies for good
            append.append("tsc=reliable")
        if s.machine == "pc" and accel == "tcg":
            # PIIX's ACPI interrupt links cost the first PCI device enabled 0.4-0.7 s of AML
            # under TCG; the BIOS's routing table gives the same routes
            append.append("acpi=noirq")
        if address:
            append.append(f"hvbench.ip={address}/24")
        return Machine(
            type=s.machine,
            accel=accel,
            cpu=s.cpu or ("host" if accel == "kvm" else "max"),
            vcpus=s.vcpus,
            memory_mib=s.memory >> 20,
            boot=_boot(self.image, s.kernel_form, " ".join(a for a in append if a)),
            agent_socket=f"{prefix}.agent.sock",
            qmp_socket=f"{prefix}.qmp.sock",
            name=f"{self.platform}-{index}",
            binary=self.binary,
            hugepages=None if s.hugepages == "thp" else s.hugepages,
        )

    def boot_files(self) -> list[str]:
        """The files every instance's machine boots from: its kernel and initramfs."""
        boot = _boot(self.image, self.settings.kernel_form, "")
        return [boot.kernel, *([boot.initrd] if boot.initrd else [])]

    def data_disk(
        self, driver: Driver, prefix: Path, made: list[Resource]
    ) -> tuple[DataImage, str]:
        """The data disk of one instance (an image file made now, or the user's device) and
        its description for the report."""
        disk = self.settings.disk
        image = DataImage.make(driver, disk, f"{prefix.name}.{disk.format}", made, disk.format)
        if image.file is None:
            return image, f"block device {image.path} on {disk.bus}, cache={disk.cache}"
        return image, (
            f"{disk.format} image file {image.path} on {disk.bus}, cache={disk.cache}, "
            f"aio={disk.aio}"
        )

    def reserve_hugepages(self, ledger: Ledger, count: int) -> list[Resource]:
        """The huge pages ``count`` guests' memory takes, added to the host's pool (2M, 1G)."""
        s = self.settings
        if s.hugepages == "thp":
            return []
        pages = hugepages.pages_for(s.hugepages, count * s.memory)
        return [hugepages.reserve(ledger, s.hugepages, pages, f"platform {self.platform}")]

    def resolved(self, qemu: str, pinning: dict[str, list[int]]) -> dict:
        """What ``describe`` says the machine ran with; ``qemu`` names the QEMU that ran it."""
        accel = self.accel.accel
        return {
            "accel": accel,
            "accel_reason": self.accel.reason,
            "kernel_form": "vmlinux" if self.image.vmlinux else "bzimage",
            "pinning": pinning,
            "qemu": qemu,
            "cpu": self.settings.cpu or ("host" if accel == "kvm" else "max"),
            # KVM inside a virtual machine: functional, its figures are no KVM's
            "nested": accel == "kvm" and host_is_a_guest(),
            "memory_backing": _memory_backing(self.settings.hugepages),
        }

    @staticmethod
    def ran_by_settings(settings: QemuSettings) -> WhatRan:
        """The drivers' ``ran_by_settings``: the accelerator the study names, if it names one,
        and whether the disk's cache mode goes through the host page cache."""
        cache = settings.disk.cache
        return WhatRan(
            mode=settings.accel if settings.accel in ACCELS else None,
            modes=ACCELS,
            disk_cache=f"QEMU disk cache={cache}" if cache in PAGE_CACHED else None,
        )

    def what_ran(self) -> WhatRan:
        """The drivers' ``what_ran`` once the accelerator is decided."""
        accel = self.accel.accel
        return replace(
            self.ran_by_settings(self.settings),
            mode=accel,
            mode_reason=self.accel.reason if self.settings.accel == "auto" else None,
            nested=accel == "kvm" and host_is_a_guest(),
        )

    def images(self) -> dict:
        """What ``describe`` records of the images the machine boots."""
        info: dict = {"image": self.image.manifest}
        if self.rootfs:
            info["rootfs"] = self.rootfs.summary()
        return info


class QemuDriver(Driver[QemuSettings, QemuInstance, MachineBuilder]):
    """QEMU guests; what ``open`` resolves is the platform's machine (``MachineBuilder``)."""

    name: ClassVar[str] = "qemu"
    settings_model = QemuSettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pins: dict[str, list[int]] = {}
        self._reserved: list[Resource] = []
        self._net_queues: dict[str, str] = {}

    @classmethod
    def check(cls) -> Availability:
        binary = executable(QEMU)
        if binary is None:
            return Availability(False, f"{QEMU} not found", "apt-get install qemu-system-x86")
        if not which("qemu-ga"):
            return Availability(False, "qemu-ga not found", "apt-get install qemu-guest-agent")
        try:
            verdict = kvm_verdict(binary)
        except HvbenchError as e:
            return Availability(True, f"TCG (KVM probe could not run: {e})")
        backports = executable(BACKPORTS)
        other = (
            f"binary: {BACKPORTS} runs {qemu_version(backports)}"
            if backports
            else f"QEMU 10.0 for binary: {BACKPORTS}: ./setup.sh --with-qemu-backports"
        )
        return Availability(True, f"accel auto -> {verdict.accel}: {verdict.reason}; {other}")

    @classmethod
    def ran_by_settings(cls, settings: QemuSettings) -> WhatRan:
        return MachineBuilder.ran_by_settings(settings)

    def _resolve(self) -> MachineBuilder:
        return MachineBuilder.resolve(self.platform, self.settings, self.needs, None)

    def _prepare(self, count: int) -> None:
        if self.settings.nic != "none":
            self.network.up()  # once, before the instances' threads add their taps
        self._reserved = self.opened.reserve_hugepages(self.ledger, count)
        self._pins, self._net_queues = {}, {}  # the group's, for describe

    def _instance(self, index: int) -> QemuInstance:
        s = self.settings
        return QemuInstance(self.platform, index, s.vcpus, s.memory >> 20)

    def _started(self, instances: list[QemuInstance]) -> None:
        if self.settings.pin:
            self._pin(instances, os.cpu_count() or 1)

    def _start_one(self, inst: QemuInstance, deadline: float) -> None:
        s = self.settings
        prefix = self.workdir / f"{self.platform}-{inst.index}"
        if s.nic != "none":
            inst.address = self.network.address(inst.index)
        builder = self.opened
        machine = builder.machine(inst.index, prefix, inst.address)
        made = inst.resources
        if builder.rootfs:
            machine.disks.append(root_disk(builder.rootfs, self.ledger, prefix, made))
        if self.needs.data_disk:
            image, description = builder.data_disk(self, prefix, made)
            machine.disks.append(data_device(s, image.path))
        guest = inst.guest = self.launch(inst, machine, prefix, inst.channels)
        boot_deadline = min(deadline, time.monotonic() + s.boot_timeout)
        try:
            guest.wait_ready(boot_deadline)
        except CommandTimeout as e:
            raise InstanceError(f"{inst.name}: not ready in time ({e})") from e
        inst.boot = guest.console.boot_phases()
        if s.queues > 1:
            self._net_queues[inst.name] = enable_queues(inst, s.queues)
        if self.needs.data_disk:
            device = find_disk(inst, DATA_SERIAL)
            format_data_disk(inst, device, description)

    def launch(
        self, inst: QemuInstance, machine: Machine, prefix: Path, made: list[Resource]
    ) -> Guest:
        """Start a QEMU for the instance with channels of its own, recorded in ``made``: QMP
        and agent sockets named after ``prefix`` and, with a NIC, a fresh tap on the run's
        bridge with the instance's MAC (a migration's destination gets its own, as on a second
        host, and announces the guest there)."""
        s = self.settings
        machine = replace(
            machine, agent_socket=f"{prefix}.agent.sock", qmp_socket=f"{prefix}.qmp.sock", nics=[]
        )
        for sock in (machine.agent_socket, machine.qmp_socket):
            made.append(self.ledger.add("path", sock))
        netns = None
        if s.nic != "none":
            tap, mac = tap_and_mac("q", 0x12, inst.index)
            made.append(self.network.add_tap(tap, multi_queue=s.queues > 1))
            machine.nics.append(nic_device(s, tap, mac))
            netns = self.network.netns
        guest = Guest.launch(machine, prefix, self.ledger, netns)
        made.append(guest.process)
        return guest

    def _pin(self, instances: list[QemuInstance], cores: int) -> None:
        slot = 0
        for inst in instances:
            threads = inst.running().vcpu_threads()
            self._pins[inst.name] = []
            for tid in threads:
                core = slot % cores
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, {core})
                    self._pins[inst.name].append(core)
                slot += 1

    def _end(self, inst: QemuInstance) -> None:
        """Release the instance's channels (its QEMU process among them) before its disks,
        and let its console's reader end."""
        if inst.guest:
            inst.guest.agent.close()
        while inst.channels:
            self.ledger.release(inst.channels.pop())
        if inst.guest:
            inst.guest.console.join(5)

    def _stopped(self, instances: list[QemuInstance]) -> None:
        while self._reserved:  # after the guests that held them
            self.ledger.release(self._reserved.pop())

    def describe(self) -> dict:
        info = super().describe()
        if self.is_open:
            builder = self.opened
            qemu = qemu_version(builder.binary)
            info["resolved"] = {**builder.resolved(qemu, self._pins), "qemu_binary": builder.binary}
            if self._net_queues:
                info["resolved"]["net_queues"] = self._net_queues
            info |= builder.images()
        return info

    def what_ran(self) -> WhatRan:
        return self.opened.what_ran() if self.is_open else super().what_ran()


class QemuLifecycle(Lifecycle):
    """Migration and snapshot/restore through QMP: the instance moves to a second QEMU started
    with ``-incoming defer`` on this host (same disk files, new sockets and tap), which then
    becomes the instance; the first is killed and its channels released."""

    def __init__(self, driver: QemuDriver, inst: QemuInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Pre-copy over a UNIX socket; with ``postcopy`` the switch to post-copy comes after
        the first full pass (as libvirt's POSTCOPY_AFTER_PRECOPY); ``auto_converge`` lets QEMU
        throttle the guest's vCPUs when the copy does not converge."""
        src = self.inst.running()
        sock = self._path("migrate.sock")
        caps = _capabilities(postcopy=plan.postcopy, auto_converge=plan.auto_converge)
        dest, made = self._incoming(src.machine, deadline, caps, f"unix:{sock.name}")
        try:
            with src.monitor(deadline) as qmp:
                qmp.cmd("migrate-set-capabilities", capabilities=caps)
                params = qmp.cmd("query-migrate-parameters")
                qmp.cmd("migrate", uri=f"unix:{sock.name}")
                info, throttle = _follow(qmp, src.machine.name, deadline, plan.postcopy)
            self._ready(dest, deadline)
        except BaseException:
            self._abandon(dest, made)
            raise
        finally:
            self.driver.ledger.release(sock)
        self._switch(dest, made)
        ram = info.get("ram", {})
        figures = {
            "total_s": info["total-time"] / 1000,
            "downtime_ms": float(info["downtime"]),
            "setup_ms": float(info.get("setup-time", 0)),
            "transferred_mib": ram.get("transferred", 0) / (1 << 20),
            "passes": float(ram.get("dirty-sync-count", 0)),
        }
        if plan.auto_converge:
            figures["throttle_pct"] = float(throttle)
        raw = json.dumps({"plan": vars(plan), "parameters": params, "query-migrate": info})
        return OperationReport(figures, raw)

    def snapshot(self, deadline: float) -> OperationReport:
        """Save: migrate to a file the host opened and passed to QEMU (``fd:``), after which
        the paused source is killed. Restore: a fresh QEMU reads it back through an ``fd:`` of
        its own; timed from that QEMU's start until the guest's agent answers."""
        src = self.inst.running()
        image = self._path("snapshot")
        t0 = time.monotonic()
        with open(image.name, "wb") as out, src.monitor(deadline) as qmp:
            # a QEMU that was a post-copy destination still has the capability, which a file
            # cannot carry (no return path)
            qmp.cmd("migrate-set-capabilities", capabilities=_capabilities(False, False))
            qmp.send_fd_scm(out.fileno())
            qmp.cmd("getfd", fdname="snapshot")
            qmp.cmd("migrate", uri="fd:snapshot")
            info, _ = _follow(qmp, src.machine.name, deadline, postcopy=False)
        save_s = time.monotonic() - t0
        size = os.path.getsize(image.name)
        self._switch(None, [])  # a saved guest is ended, as `virsh save` does
        t1 = time.monotonic()
        with open(image.name, "rb") as source:
            dest, made = self._incoming(src.machine, deadline, [], "fd:snapshot", source.fileno())
        try:
            self._ready(dest, deadline)
        except BaseException:
            self._abandon(dest, made)
            raise
        restore_s = time.monotonic() - t1
        self._switch(dest, made)
        self.driver.ledger.release(image)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        return OperationReport(figures, json.dumps({"query-migrate": info, "bytes": size}))

    # steps -----------------------------------------------------------------------------

    def _path(self, what: str) -> Resource:
        """A file or socket of the operation in the run's directory, in the ledger."""
        path = self.driver.workdir / f"{self.inst.name}.{what}"
        return self.driver.ledger.add("path", str(path))

    def _incoming(
        self, machine: Machine, deadline: float, caps: list[dict], uri: str, fd: int | None = None
    ) -> tuple[Guest, list[Resource]]:
        """A second QEMU for the instance (as ``machine``), waiting for its stream at ``uri``
        with the capabilities the source will have (post-copy must be on at both ends); ``fd``
        is passed to it as ``fdname=snapshot`` first."""
        prefix = self.driver.workdir / f"{self.inst.name}-in{next(_operations)}"
        made: list[Resource] = []
        try:
            dest = self.driver.launch(self.inst, replace(machine, incoming=True), prefix, made)
            with dest.monitor(deadline) as qmp:
                if caps:
                    qmp.cmd("migrate-set-capabilities", capabilities=caps)
                if fd is not None:
                    qmp.send_fd_scm(fd)
                    qmp.cmd("getfd", fdname="snapshot")
                qmp.cmd("migrate-incoming", uri=uri)
        except BaseException:
            while made:
                self.driver.ledger.release(made.pop())
            raise
        return dest, made

    def _ready(self, dest: Guest, deadline: float) -> None:
        """The destination runs the guest once its agent answers through its own socket."""
        try:
            dest.wait_ready(deadline)
        except CommandTimeout as e:
            raise InstanceError(f"{self.inst.name}: no answer after the move ({e})") from e

    def _switch(self, dest: Guest | None, made: list[Resource]) -> None:
        """End the instance's current QEMU and release its channels; ``dest`` (with its
        channels) is the instance from now on."""
        old, channels = self.inst.guest, self.inst.channels
        if old is not None:
            old.kill()
        while channels:
            self.driver.ledger.release(channels.pop())
        self.inst.guest, self.inst.channels = dest, made

    def _abandon(self, dest: Guest, made: list[Resource]) -> None:
        dest.kill()
        while made:
            self.driver.ledger.release(made.pop())


_operations = itertools.count(1)


def _capabilities(postcopy: bool, auto_converge: bool) -> list[dict]:
    """migrate-set-capabilities' argument: every capability hvbench uses, on or off."""
    states = {"postcopy-ram": postcopy, "auto-converge": auto_converge}
    return [{"capability": name, "state": on} for name, on in states.items()]


def _follow(
    qmp: QEMUMonitorProtocol, name: str, deadline: float, postcopy: bool
) -> tuple[dict[str, Any], int]:
    """Poll query-migrate until the migration completed; switch to post-copy after the first
    pass where asked; cancel it past ``deadline``. Returns the last answer and the highest CPU
    throttle seen (auto-converge)."""
    switched, throttle = False, 0
    while True:
        info = qmp.cmd("query-migrate")
        if not isinstance(info, dict):
            raise InstanceError(f"{name}: query-migrate answered {info!r}")
        status = info.get("status")
        throttle = max(throttle, int(info.get("cpu-throttle-percentage", 0)))
        if status == "completed":
            return info, throttle
        if status in ("failed", "cancelled"):
            raise InstanceError(f"{name}: migration {status}: {info.get('error-desc', '')}")
        ram = info.get("ram", {})
        if postcopy and not switched and status == "active" and ram.get("dirty-sync-count", 0) > 1:
            qmp.cmd("migrate-start-postcopy")
            switched = True
        if time.monotonic() > deadline:
            qmp.cmd("migrate_cancel")
            raise InstanceError(
                f"{name}: migration not done in time ({status}, "
                f"{ram.get('transferred', 0) >> 20} MiB sent, {ram.get('dirty-sync-count', 0)} "
                "passes): raise the workload's timeout or lower its dirty rate"
            )
        time.sleep(MIGRATION_POLL_S)


def _memory_backing(size: str) -> str:
    """How guest memory was backed, for the report's provenance."""
    if size != "thp":
        return f"hugetlbfs {size} pages (memfd), reserved on the host for the run"
    with contextlib.suppress(OSError):
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        chosen = mode[mode.index("[") + 1 : mode.index("]")]
        return f"anonymous memory, transparent huge pages: {chosen}"
    return "anonymous memory"


def enable_queues(inst: Instance, queues: int) -> str:
    """Enable every virtio-net queue pair in the guest (Linux enables one per vCPU by itself)
    and say how many are active, from sysfs; why not, where the guest has no ethtool."""
    result = inst.exec(["sh", "-c", f"ethtool -L eth0 combined {queues}"], timeout=60)
    listing = inst.exec(["ls", "/sys/class/net/eth0/queues"], timeout=60).text().split()
    active = sum(1 for q in listing if q.startswith("rx-"))
    if result.ok:
        return f"{active} of {queues} active"
    return f"{active} of {queues} active (ethtool -L failed: {result.describe_failure()[:120]})"
