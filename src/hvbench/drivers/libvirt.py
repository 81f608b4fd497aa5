"""Guests through libvirt (``driver: libvirt``), so hosts managed with libvirt or virt-manager are
benchmarked as they are run.

The platform settings are the qemu driver's (accel, machine, cpu, NIC model, disk bus, cache,
aio, ...) plus a libvirt URI; they become the same typed device model (qemu_devices.Machine) as
for QEMU started directly, and that model becomes domain XML (xml.etree, never pasted strings).
Domains are transient (``createXML``): destroying one leaves no definition behind, and the ledger
destroys any a killed run left.

The guest is the qemu driver's image booted directly (kernel, initramfs, command line); its agent
is qemu-guest-agent on a ``<channel type='unix'>`` bound in the run's work directory, its console
a ``<serial type='unix'>`` read for the boot phases. QEMU runs with the static DAC label of root
(``relabel='no'``), as it does under the qemu driver, so libvirt neither needs nor changes access
to the image cache and the run's files.

Network: libvirtd and the QEMU it starts live in the root network namespace. The domain gets an
``<interface type='ethernet'>`` tap that libvirt creates there, and as soon as QEMU holds it the
tap is moved into the run's namespace onto its bridge (RunNetwork.adopt_tap): QEMU keeps its file
descriptor, the root namespace keeps nothing, and every instance reaches the peer as on the
other platforms.

Not yet: remote hosts (``qemu+ssh://``) would need the image and disks uploaded as storage
volumes, the agent reached through libvirt (qemuAgentCommand) and no NIC on the run's bridge;
``xen:///system`` would need a PV domain of its own. Both are refused in one line.

The binding is PyPI's libvirt-python (built against the host's libvirt-dev): Debian's
python3-libvirt serves only the system Python, and hvbench's venv does not see system packages.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import psutil
from pydantic import model_validator

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import Availability, Driver, Instance, format_data_disk
from hvbench.drivers.qemu import (
    DATA_SERIAL,
    Console,
    QemuDriver,
    QemuSettings,
    find_disk,
)
from hvbench.drivers.qemu_devices import AGENT_PORT, Disk, Machine, Nic
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest.agent import GuestAgent
from hvbench.host.resources import Resource

DEFAULT_URI = "qemu:///system"
BINDING_FIX = (
    "pip install libvirt-python (builds from source: apt-get install libvirt-dev pkg-config gcc)"
)
NIC_MODELS = {"virtio-net": "virtio", "e1000": "e1000", "rtl8139": "rtl8139"}


def _binding() -> Any:
    """The libvirt Python binding, imported only when a libvirt platform is used; libvirt's own
    printing of errors to stderr is switched off (they are raised, and reported once)."""
    try:
        import libvirt
    except ImportError:
        raise HvbenchError(f"libvirt: the Python binding is missing: {BINDING_FIX}") from None
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def default_uri() -> str:
    return os.environ.get("LIBVIRT_DEFAULT_URI", DEFAULT_URI)


def is_remote(uri: str) -> bool:
    """A URI naming a host (``qemu+ssh://host/system``) rather than this one."""
    return bool(urlsplit(uri).hostname)


# settings ---------------------------------------------------------------------------------


class LibvirtSettings(QemuSettings):
    """The qemu driver's settings, run through libvirt at ``uri``."""

    driver: Literal["libvirt"]  # type: ignore[assignment]
    uri: str = DEFAULT_URI
    """Any libvirt URI with a QEMU driver; ``?socket=PATH`` reaches a libvirtd of one's own."""

    @model_validator(mode="after")
    def _libvirt_can(self) -> LibvirtSettings:
        scheme = urlsplit(self.uri).scheme.split("+")[0]
        if scheme != "qemu":
            raise ValueError(
                f"uri: only QEMU connections (qemu:///system, qemu+unix://...) are supported, "
                f"found {scheme!r}"
            )
        if is_remote(self.uri):
            raise ValueError(
                "uri: a remote host is not supported yet: the guest image, data disk and the "
                "run's network are on this host"
            )
        if self.machine == "microvm":
            raise ValueError("machine: libvirt 9 has no microvm machine type; use pc or q35")
        if self.disk.bus == "nvme":
            raise ValueError("disk bus nvme: libvirt 9 has no NVMe disk; use another bus")
        if self.machine == "q35" and self.disk.bus == "ide":
            raise ValueError("disk bus ide: q35 has no IDE controller under libvirt; use ahci")
        return self


# domain XML -------------------------------------------------------------------------------


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


_TARGETS = {
    # bus -> (libvirt target bus, device name of the data disk, controller it needs)
    "virtio-blk": ("virtio", "vdb", None),
    "virtio-scsi": ("scsi", "sdb", ("scsi", "virtio-scsi")),
    "ide": ("ide", "hdb", None),
    "ahci": ("sata", "sdb", ("sata", None)),
}


def _disk(devices: ET.Element, disk: Disk) -> None:
    bus, dev, controller = _TARGETS[disk.bus]
    if controller:
        kind, model = controller
        _sub(devices, "controller", type=kind, index="0", **({"model": model} if model else {}))
    block = Path(disk.path).is_block_device()
    element = _sub(devices, "disk", type="block" if block else "file", device="disk")
    _sub(element, "driver", name="qemu", type=disk.format, cache=disk.cache, io=disk.aio)
    _sub(element, "source", **({"dev": disk.path} if block else {"file": disk.path}))
    _sub(element, "target", dev=dev, bus=bus)
    if disk.serial:
        _sub(element, "serial", disk.serial)


def domain_xml(
    machine: Machine,
    domain_type: Literal["kvm", "qemu"],
    console_socket: str,
    pins: Sequence[int] = (),
    other_secmodels: Sequence[str] = (),
) -> str:
    """The domain for one typed machine: direct kernel boot, agent channel, serial console on a
    unix socket, data disk, NIC on a libvirt-made tap; QEMU runs as root without relabelling."""
    dom = ET.Element("domain", type=domain_type)
    _sub(dom, "name", machine.name)
    _sub(dom, "memory", str(machine.memory_mib), unit="MiB")
    _sub(dom, "vcpu", str(machine.vcpus))
    if pins:
        tune = _sub(dom, "cputune")
        for vcpu, core in enumerate(pins):
            _sub(tune, "vcpupin", vcpu=str(vcpu), cpuset=str(core))
    os_ = _sub(dom, "os")
    _sub(os_, "type", "hvm", arch="x86_64", machine=machine.type)
    _sub(os_, "kernel", machine.boot.kernel)
    if machine.boot.initrd:
        _sub(os_, "initrd", machine.boot.initrd)
    modules = ",".join(machine.guest_modules())
    _sub(os_, "cmdline", f"{machine.boot.append} hvbench.modules={modules}")
    _sub(_sub(dom, "features"), "acpi")  # without it a guest's poweroff does not end the domain
    if machine.cpu == "host":
        _sub(dom, "cpu", mode="host-passthrough", check="none")
    elif machine.cpu == "max":
        _sub(dom, "cpu", mode="maximum", check="none")
    else:
        _sub(_sub(dom, "cpu", mode="custom", match="exact", check="none"), "model", machine.cpu)
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    devices = _sub(dom, "devices")
    serial = _sub(devices, "serial", type="unix")
    _sub(serial, "source", mode="bind", path=console_socket)
    _sub(serial, "target", port="0")
    channel = _sub(devices, "channel", type="unix")
    _sub(channel, "source", mode="bind", path=machine.agent_socket)
    _sub(channel, "target", type="virtio", name=AGENT_PORT)
    for disk in machine.disks:
        _disk(devices, disk)
    for nic in machine.nics:
        interface = _sub(devices, "interface", type="ethernet")
        _sub(interface, "mac", address=nic.mac)
        _sub(interface, "target", dev=nic.tap)
        _sub(interface, "model", type=NIC_MODELS[nic.model])
    _sub(devices, "memballoon", model="none")
    label = _sub(dom, "seclabel", type="static", model="dac", relabel="no")
    _sub(label, "label", "+0:+0")
    for model in other_secmodels:
        _sub(dom, "seclabel", type="none", model=model)
    return ET.tostring(dom, encoding="unicode")


# instances and the driver -----------------------------------------------------------------


@dataclass
class LibvirtInstance(AgentInstance):
    vmm: ClassVar[str] = "the domain"
    domain: Any = None
    """The libvirt.virDomain."""
    agent: GuestAgent | None = None
    console: Console | None = None
    console_socket: socket.socket | None = None
    qemu_pid: int | None = None
    resources: list[Resource] = field(default_factory=list)

    def agent_channel(self) -> GuestAgent | None:
        return self.agent

    def kill(self) -> None:
        self.close()

    def host_pids(self) -> list[int]:
        return [self.qemu_pid] if self.qemu_pid and self.alive() else []

    def alive(self) -> bool:
        try:
            return bool(self.domain is not None and self.domain.isActive())
        except Exception:  # libvirtError: the connection or the domain is gone
            return False

    def close(self) -> None:
        if self.agent:
            self.agent.close()
        if self.domain is not None:
            with contextlib.suppress(Exception):  # libvirtError: already gone
                self.domain.destroy()
        if self.console_socket:
            self.console_socket.close()
        if self.console:
            self.console.join(5)


def _qemu_pid(name: str) -> int | None:
    """The host process of a local domain: libvirt names it ``-name guest=NAME,...``."""
    wanted = f"guest={name},"
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if (proc.info.get("name") or "").startswith("qemu") and any(
            a.startswith(wanted) for a in cmdline
        ):
            return proc.pid
    return None


_taps = itertools.count()


class LibvirtDriver(Driver):
    name: ClassVar[str] = "libvirt"
    settings_model = LibvirtSettings

    @classmethod
    def check(cls) -> Availability:
        uri = default_uri()
        try:
            libvirt = _binding()
        except HvbenchError:
            return Availability(False, "the libvirt Python binding is not installed", BINDING_FIX)
        try:
            conn = libvirt.openReadOnly(uri)
        except libvirt.libvirtError as e:
            return Availability(
                False,
                f"cannot connect to {uri}: {e.get_error_message()}",
                "start libvirtd (systemctl start libvirtd; without systemd: virtlogd -d; "
                "libvirtd -d), or set LIBVIRT_DEFAULT_URI",
            )
        try:
            version = conn.getLibVersion()
            hyper = conn.getVersion()
        finally:
            conn.close()
        return Availability(True, f"libvirt {_dotted(version)} at {uri}, QEMU {_dotted(hyper)}")

    @property
    def lsettings(self) -> LibvirtSettings:
        return self.settings  # type: ignore[return-value]

    def _resolve(self) -> None:
        """Connection, and the qemu driver's image and accelerator, once per driver."""
        if getattr(self, "_conn", None):
            return
        s = self.lsettings
        libvirt = _binding()
        self._qemu = QemuDriver(
            self.platform, s, self.needs, self.ledger, self.network, self.workdir
        )
        self._qemu.resolve()
        try:
            self._conn = libvirt.open(s.uri)
        except libvirt.libvirtError as e:
            raise HvbenchError(
                f"platform {self.platform}: cannot connect to {s.uri}: {e.get_error_message()}"
            ) from None
        caps = ET.fromstring(self._conn.getCapabilities())
        self._secmodels = [
            m.text for m in caps.iterfind("host/secmodel/model") if m.text and m.text != "dac"
        ]

    def machine(self, index: int, prefix: Path) -> Machine:
        """The typed machine of instance ``index``: the qemu driver's, under a domain name that
        is unique on the host; libvirt keeps QEMU's monitor to itself."""
        name = f"hvb-{self.ledger.run_id}-{self.platform}-{index}"
        return replace(self._qemu.machine(index, prefix), name=name, qmp_socket="")

    def start(self, count: int, deadline: float) -> list[Instance]:
        self._resolve()
        s = self.lsettings
        self._count = max(count, getattr(self, "_count", 0))
        if s.nic != "none":
            self.network.up()  # once, before the threads that adopt their taps
        instances = [
            LibvirtInstance(self.platform, i, s.vcpus, s.memory >> 20) for i in range(count)
        ]
        return list(self.start_parallel(instances, self._start_one, deadline))

    def _pins(self, index: int) -> list[int]:
        s = self.lsettings
        if not s.pin:
            return []
        cores = os.cpu_count() or 1
        return [(index * s.vcpus + v) % cores for v in range(s.vcpus)]

    def _start_one(self, inst: LibvirtInstance, deadline: float) -> None:
        libvirt = _binding()
        s = self.lsettings
        prefix = self.workdir / f"{self.platform}-{inst.index}"
        machine = self.machine(inst.index, prefix)
        made = inst.resources
        console_path = f"{prefix}.console.sock"
        for path in (machine.agent_socket, console_path):
            made.append(self.ledger.add("path", path))
        if s.nic != "none":
            tap = f"hvl{os.getpid() % 10000}t{next(_taps)}"
            mac = f"52:54:00:14:{inst.index >> 8 & 0xFF:02x}:{inst.index & 0xFF:02x}"
            machine.nics.append(Nic(s.nic, tap, mac))
        if self.needs.data_disk:
            path, description = self._qemu._data_disk(prefix, made)  # the same file or device
            machine.disks.append(
                Disk("data", path, s.disk.bus, s.disk.format, s.disk.cache, s.disk.aio, DATA_SERIAL)
            )
        xml = domain_xml(
            machine,
            "kvm" if machine.accel == "kvm" else "qemu",
            console_path,
            self._pins(inst.index),
            self._secmodels,
        )
        made.append(self.ledger.add("domain", machine.name, uri=s.uri))
        started = time.monotonic()
        try:
            inst.domain = self._conn.createXML(xml, 0)
        except libvirt.libvirtError as e:
            raise InstanceError(f"{inst.name}: libvirt: {e.get_error_message()}") from None
        for nic in machine.nics:
            made.append(self.network.adopt_tap(nic.tap))
            inst.address = self.network.address(inst.index)
        inst.qemu_pid = _qemu_pid(machine.name)
        inst.console_socket = _connect(console_path)
        inst.console = Console(
            inst.console_socket.makefile("rb"), Path(f"{prefix}.console.log"), started
        )
        inst.console.start()
        inst.agent = GuestAgent(machine.agent_socket, inst.name)
        try:
            inst.agent.wait_ready(min(deadline, started + s.boot_timeout), inst.alive)
        except InstanceError as e:
            raise InstanceError(f"{inst.name}: the guest agent did not answer ({e})") from e
        inst.console.phases["ready"] = time.monotonic() - started
        inst.boot = {k: round(v, 3) for k, v in inst.console.phases.items() if k != "agent"}
        if self.needs.data_disk:
            format_data_disk(inst, find_disk(inst, DATA_SERIAL), description)

    def stop(self, instances: list[Instance]) -> None:
        for inst in instances:
            assert isinstance(inst, LibvirtInstance)
            inst.close()
            while inst.resources:
                self.ledger.release(inst.resources.pop())

    def describe(self) -> dict:
        """The qemu driver's description of the same machine, plus what libvirt runs it with."""
        conn = getattr(self, "_conn", None)
        if conn is None:
            return super().describe()
        info = self._qemu.describe()
        info["resolved"] |= {
            "pinning": {f"{self.platform}-{i}": self._pins(i) for i in range(self._count)},
            "overcommit": self._count * self.lsettings.vcpus > (os.cpu_count() or 1),
            "qemu": f"{conn.getType()} {_dotted(conn.getVersion())} through libvirt",
            "libvirt": _dotted(conn.getLibVersion()),
            "uri": self.lsettings.uri,
        }
        return info


def _connect(path: str, attempts: int = 50) -> socket.socket:
    """A connection to a unix socket QEMU has just bound."""
    for _ in range(attempts):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            time.sleep(0.1)
    raise InstanceError(f"console socket {path} did not appear")


def _dotted(version: int) -> str:
    return f"{version // 1000000}.{version // 1000 % 1000}.{version % 1000}"
