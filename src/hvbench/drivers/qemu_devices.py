"""A typed model of one QEMU guest, turned into a command line.

Every option is built from key/value pairs (commas in values doubled, as QEMU's option parser
wants), never by pasting strings, so a path or serial cannot smuggle in an option of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Bus = Literal["virtio-blk", "virtio-scsi", "ide", "ahci", "nvme"]
Cache = Literal["none", "writeback", "writethrough", "directsync", "unsafe"]
Aio = Literal["threads", "native", "io_uring"]
NicModel = Literal["virtio-net", "e1000", "rtl8139"]
MachineType = Literal["pc", "q35", "microvm"]

AGENT_PORT = "org.qemu.guest_agent.0"
AGENT_PORT_NR = 1
"""The agent's port number on its virtio-serial device (the only port there), also on the
kernel command line: the guest opens the port as soon as it exists, before its name comes."""
QEMU = "qemu-system-x86_64"

GUEST_MODULES: dict[str, tuple[str, ...]] = {
    "virtio-net": ("virtio_net",),
    "e1000": ("e1000",),
    "rtl8139": ("8139cp", "8139too"),
    "virtio-blk": ("virtio_blk",),
    "virtio-scsi": ("virtio_scsi", "sd_mod"),
    "ide": ("ata_piix", "sd_mod"),
    "ahci": ("ahci", "sd_mod"),
    "nvme": ("nvme",),
}
"""Guest drivers for each device model: the guest loads just these (named on its command line)
instead of scanning sysfs for every device, which costs a second or more under TCG."""


def opts(first: str | None = None, **props: object) -> str:
    """``first,key=value,...`` with QEMU's escaping; True/False become on/off, ``_`` in a key
    becomes ``-`` (``write_cache`` -> ``write-cache``), None values are left out."""

    def esc(value: object) -> str:
        if isinstance(value, bool):
            value = "on" if value else "off"
        return str(value).replace(",", ",,")

    parts = [esc(first)] if first is not None else []
    parts += [f"{k.replace('_', '-')}={esc(v)}" for k, v in props.items() if v is not None]
    return ",".join(parts)


@dataclass(frozen=True)
class Disk:
    """A disk and how QEMU backs it: image file or block device, format, cache mode, AIO."""

    id: str
    path: str
    bus: Bus = "virtio-blk"
    format: Literal["raw", "qcow2"] = "raw"
    cache: Cache = "none"
    aio: Aio = "threads"
    serial: str = ""
    slot: int = 0
    queues: int = 1
    """virtio-blk's request queues (``num-queues``), each with its own interrupt."""
    """Position among the machine's IDE disks (IDE buses take fixed units)."""

    def args(self, machine: MachineType) -> list[str]:
        microvm = machine == "microvm"
        drive = opts(
            **{"if": "none"},
            id=self.id,
            file=self.path,
            format=self.format,
            cache=self.cache,
            aio=self.aio,
        )
        serial = self.serial or None
        ctl = f"{self.id}c"
        devices = {
            "virtio-blk": [
                opts(
                    "virtio-blk-device" if microvm else "virtio-blk-pci",
                    drive=self.id,
                    serial=serial,
                    num_queues=self.queues if self.queues > 1 else None,
                )
            ],
            "virtio-scsi": [
                opts("virtio-scsi-device" if microvm else "virtio-scsi-pci", id=ctl),
                opts("scsi-hd", bus=f"{ctl}.0", drive=self.id, serial=serial),
            ],
            "ide": [opts("ide-hd", drive=self.id, serial=serial, **self._ide_place(machine))],
            "ahci": [
                opts("ahci", id=ctl),
                opts("ide-hd", bus=f"{ctl}.0", drive=self.id, serial=serial),
            ],
            "nvme": [opts("nvme", drive=self.id, serial=serial or self.id)],
        }[self.bus]
        return ["-drive", drive, *(a for d in devices for a in ("-device", d))]

    def _ide_place(self, machine: MachineType) -> dict[str, object]:
        """pc: two PIIX buses of two units each; q35: six AHCI ports exposed as IDE buses."""
        if machine == "q35":
            return {"bus": f"ide.{self.slot}"}
        return {"bus": f"ide.{self.slot // 2}", "unit": self.slot % 2}


@dataclass(frozen=True)
class Nic:
    """A NIC on a tap device (which must exist in the network namespace QEMU runs in)."""

    model: NicModel
    tap: str
    mac: str
    vhost: bool = False
    """virtio-net's data path in the host kernel (vhost-net) instead of QEMU's own thread."""
    queues: int = 1
    """virtio-net queue pairs: the tap opens as many, the device gets two vectors each (PCI)."""

    def args(self, microvm: bool) -> list[str]:
        multi = self.queues > 1
        netdev = opts(
            "tap",
            id=f"{self.tap}n",
            ifname=self.tap,
            script="no",
            downscript="no",
            vhost=True if self.vhost else None,
            queues=self.queues if multi else None,
        )
        model = {
            "virtio-net": "virtio-net-device" if microvm else "virtio-net-pci",
            "e1000": "e1000",
            "rtl8139": "rtl8139",
        }[self.model]
        device = opts(
            model,
            netdev=f"{self.tap}n",
            mac=self.mac,
            mq=True if multi else None,
            vectors=2 * self.queues + 2 if multi and not microvm else None,
        )
        return ["-netdev", netdev, "-device", device]


@dataclass(frozen=True)
class KernelBoot:
    """Direct kernel boot: an ELF vmlinux (PVH entry) or a bzImage, an initramfs, and the
    kernel command line."""

    kernel: str
    initrd: str | None
    append: str


@dataclass
class Machine:
    """One guest: machine type, accelerator, CPUs, memory, devices and host-side channels."""

    type: MachineType
    accel: Literal["kvm", "tcg"]
    cpu: str
    vcpus: int
    memory_mib: int
    boot: KernelBoot
    agent_socket: str
    qmp_socket: str
    name: str = "hvbench"
    binary: str = QEMU
    """The QEMU executable that runs it (a migration's destination runs the same)."""
    nics: list[Nic] = field(default_factory=list)
    disks: list[Disk] = field(default_factory=list)
    hugepages: Literal["2M", "1G"] | None = None
    """Guest memory on hugetlbfs pages of this size (a memfd), reserved on the host beforehand;
    None: QEMU's anonymous memory, which it advises for transparent huge pages."""
    incoming: bool = False
    """Start waiting for a migration stream (``-incoming defer``: QMP's migrate-incoming names
    it, after the capabilities are set) rather than booting."""

    def guest_modules(self) -> list[str]:
        """The guest driver modules this machine's devices need, in load order."""
        wanted = ["virtio_mmio" if self.type == "microvm" else "virtio_pci", "virtio_console"]
        for model in [n.model for n in self.nics] + [d.bus for d in self.disks]:
            if model == "ide" and self.type == "q35":
                model = "ahci"  # q35's IDE buses are its ICH9 AHCI controller's ports
            wanted += [m for m in GUEST_MODULES[model] if m not in wanted]
        return wanted

    def cmdline(self) -> str:
        """The guest kernel's command line: the boot's, then what rc reads (the agent's port
        number, the drivers to load), for QEMU and libvirt alike."""
        modules = ",".join(self.guest_modules())
        return f"{self.boot.append} hvbench.agent_port={AGENT_PORT_NR} hvbench.modules={modules}"

    def argv(self) -> list[str]:
        """The command line; the console is the serial port, on QEMU's stdout."""
        microvm = self.type == "microvm"
        backend = "ram" if self.hugepages else None
        machine = opts(self.type, accel=self.accel, memory_backend=backend)
        argv = [
            self.binary,
            "-name", opts(self.name),
            "-nodefaults", "-no-user-config", "-no-reboot",
            "-display", "none",
            "-machine", machine,
            "-cpu", self.cpu,
            "-smp", str(self.vcpus),
            "-m", f"{self.memory_mib}M",
            "-kernel", self.boot.kernel,
            "-append", self.cmdline(),
            "-chardev", opts("stdio", id="console", signal=False),
            "-serial", "chardev:console",
            "-chardev", opts("socket", id="qmp", path=self.qmp_socket, server=True, wait=False),
            "-mon", opts(chardev="qmp", mode="control"),
            "-chardev", opts("socket", id="agent", path=self.agent_socket, server=True, wait=False),
            "-device", f"{'virtio-serial-device' if microvm else 'virtio-serial-pci'},"
                       f"max_ports={AGENT_PORT_NR + 1}",
            "-device", opts("virtserialport", chardev="agent", name=AGENT_PORT, nr=AGENT_PORT_NR),
        ]  # fmt: skip
        if self.hugepages:
            argv += ["-object", opts("memory-backend-memfd", id="ram", size=f"{self.memory_mib}M",
                                     hugetlb=True, hugetlbsize=self.hugepages)]  # fmt: skip
        if self.boot.initrd:
            argv += ["-initrd", self.boot.initrd]
        if self.incoming:
            argv += ["-incoming", "defer"]
        for nic in self.nics:
            argv += nic.args(microvm)
        ide = [d for d in self.disks if d.bus == "ide"]
        if len(ide) > (6 if self.type == "q35" else 4):
            raise ValueError(f"machine {self.type} has room for fewer IDE disks than {len(ide)}")
        for disk in self.disks:
            argv += disk.args(self.type)
        return argv
