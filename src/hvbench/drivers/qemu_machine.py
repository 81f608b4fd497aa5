"""The QEMU machine of a platform: its settings (``QemuSettings``, which the libvirt driver's
extend with a URI), its builder (``MachineBuilder``: the QEMU, the guest image, the accelerator,
each instance's machine, disks and huge pages) and the devices made from its settings. Shared by
the qemu driver, which runs the machine, and the libvirt driver, which hands it to libvirtd as a
domain; neither imports the other."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from hvbench.drivers.base import Driver, Instance, Needs, Operation, PlatformSettings
from hvbench.drivers.disks import DATA_SERIAL, DataImage
from hvbench.drivers.footprint import KVM_PACE, Footprint, Pace
from hvbench.drivers.qemu_devices import (
    QEMU,
    Aio,
    Bus,
    Cache,
    Disk,
    Machine,
    MachineType,
    Nic,
    NicModel,
)
from hvbench.drivers.qemu_process import kernel_boot, kvm_verdict
from hvbench.errors import HvbenchError
from hvbench.guest import image as guest_image
from hvbench.guest import userland
from hvbench.host import hugepages
from hvbench.host.hugepages import PAGE_KIB
from hvbench.host.inventory import host_is_a_guest
from hvbench.host.kvm import AccelVerdict
from hvbench.host.network import PREFIX
from hvbench.host.process import executable, which
from hvbench.host.resources import Ledger, Resource
from hvbench.host.storage import make_image
from hvbench.store import WhatRan
from hvbench.units import Size

BACKPORTS = "qemu-system-x86_64-backports"
"""Debian 12 backports' QEMU 10.0 in hvbench's virtualenv (scripts/install-qemu-backports.sh):
under TCG it migrates a guest that writes its memory without losing writes, which 7.2 does not."""
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


ACCELS = ("kvm", "tcg")
"""The accelerators a QEMU machine runs under (``accel: auto`` resolves to one)."""
PAGE_CACHED: tuple[Cache, ...] = ("writeback", "writethrough", "unsafe")
"""The disk cache modes that read (and for writeback, unsafe: write) through the host page
cache; none and directsync open the image with O_DIRECT."""


def host_tsc_khz() -> int:
    """The host's TSC rate in kHz, for microvm guests under TCG."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 2_000_000


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
            append.append(f"hvbench.ip={address}/{PREFIX}")
        return Machine(
            type=s.machine,
            accel=accel,
            cpu=s.cpu or ("host" if accel == "kvm" else "max"),
            vcpus=s.vcpus,
            memory_mib=s.memory >> 20,
            boot=kernel_boot(self.image, s.kernel_form, " ".join(a for a in append if a)),
            agent_socket=f"{prefix}.agent.sock",
            qmp_socket=f"{prefix}.qmp.sock",
            name=f"{self.platform}-{index}",
            binary=self.binary,
            hugepages=None if s.hugepages == "thp" else s.hugepages,
        )

    def boot_files(self) -> list[str]:
        """The files every instance's machine boots from: its kernel and initramfs."""
        boot = kernel_boot(self.image, self.settings.kernel_form, "")
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
