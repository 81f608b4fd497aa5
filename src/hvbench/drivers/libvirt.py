"""Guests through libvirt (``driver: libvirt``), so hosts managed with libvirt or virt-manager are
benchmarked as they are run, on this host or on another one (``qemu+ssh://host/system``).

The platform settings are the qemu driver's (accel, machine, cpu, NIC model, disk bus, cache,
aio, ...) plus a libvirt URI; they become the same typed device model (qemu_devices.Machine) as
for QEMU started directly, and that model becomes domain XML (xml.etree, never pasted strings).
Domains are transient (``createXML``): destroying one leaves no definition behind, and the ledger
destroys any a killed run left.

Everything goes through the connection, so a remote host works as this one does: the guest's
agent is qemu-guest-agent on the channel libvirt itself serves (``qemuAgentCommand``), and its
serial console is read through a console stream, opened before the paused domain is resumed so
that no boot message is missed. On this host, the guest image and the data disk are files the
domain uses in place, and QEMU runs with the static DAC label of root (``relabel='no'``), so
libvirt neither needs nor changes access to them. On a remote host, the image is uploaded into a
storage pool (``pool``) as volumes once for the run, and the data disk is a new
volume there, or a block device of that host.

Network: libvirtd and the QEMU it starts live in the root network namespace. The domain gets an
``<interface type='ethernet'>`` tap that libvirt creates there, and as soon as QEMU holds it the
tap is moved into the run's namespace onto its bridge (RunNetwork.adopt_tap): QEMU keeps its file
descriptor, the root namespace keeps nothing, and every instance reaches the peer as on the
other platforms. A remote host's guest cannot join this host's run network, so it has no NIC.

Host CPU: here, the domain's QEMU process; on a remote host, that host's CPU states and the
domain's CPU time, both as libvirt reads them there.

Snapshot (``LibvirtLifecycle``, on this host): ``virDomainSave`` writes the running domain to a
file (and ends it), ``virDomainRestoreFlags`` starts it again from there, paused until its tap
is on the run's bridge again. Unlike managedsave it works for transient domains. Migration is
refused: libvirtd will not migrate a domain to the host it runs on.

A ``xen:///system`` URI takes the xen driver's settings instead, and its domains are Xen's
(drivers/libvirt_xen.py); study and runner pick that variant by the URI.

The binding is PyPI's libvirt-python (built against the host's libvirt-dev): Debian's
python3-libvirt serves only the system Python, and hvbench's venv does not see system packages.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import model_validator

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import (
    Availability,
    Driver,
    Lifecycle,
    MigrationPlan,
    Operation,
    OperationReport,
    operation_path,
)
from hvbench.drivers.console import Console
from hvbench.drivers.disks import DATA_SERIAL, find_disk, mount_data_disk
from hvbench.drivers.footprint import Footprint
from hvbench.drivers.last_words import last_words
from hvbench.drivers.libvirt_connection import (
    BINDING_FIX,
    binding,
    close_connection,
    dotted,
    is_active,
    is_remote,
    scheme,
    xml_child,
)
from hvbench.drivers.qemu_devices import AGENT_PORT, AGENT_PORT_NR, Disk, Machine
from hvbench.drivers.qemu_machine import (
    MachineBuilder,
    QemuSettings,
    data_device,
    enable_queues,
    nic_device,
    root_disk,
)
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest.agent import AgentSilent, GuestAgent
from hvbench.host.hugepages import PAGE_KIB
from hvbench.host.kvm import AccelVerdict
from hvbench.host.monitor import LOCAL, STATES, HostCpuSource
from hvbench.host.network import tap_and_mac
from hvbench.host.process import processes
from hvbench.host.resources import Resource
from hvbench.store import WhatRan

DEFAULT_URI = "qemu:///system"
NIC_MODELS = {"virtio-net": "virtio", "e1000": "e1000", "rtl8139": "rtl8139"}
AGENT_CHUNK = 1 << 20
"""Bytes per guest-file-read through libvirt at most: its remote protocol caps a string at 4 MiB,
and the answer is base64."""
QEMU_LOGS = Path("/var/log/libvirt/qemu")
"""Where libvirtd's QEMU driver keeps each domain's log (QEMU's stderr among it)."""


def default_uri() -> str:
    return os.environ.get("LIBVIRT_DEFAULT_URI", DEFAULT_URI)


# settings ---------------------------------------------------------------------------------


class LibvirtSettings(QemuSettings):
    """The qemu driver's settings, run through libvirt at ``uri``."""

    driver: Literal["libvirt"]
    uri: str = DEFAULT_URI
    """Any libvirt URI with a QEMU driver; ``?socket=PATH`` reaches a libvirtd of one's own."""
    pool: str = "default"
    """On a remote host: the storage pool that holds the uploaded image and the data disks."""

    @model_validator(mode="after")
    def _libvirt_can(self) -> LibvirtSettings:
        hypervisor = scheme(self.uri)
        if hypervisor != "qemu":
            raise ValueError(
                f"uri: only QEMU (qemu:///system, qemu+ssh://host/system, ...) and Xen "
                f"(xen:///system) connections are supported, found {hypervisor!r}"
            )
        if is_remote(self.uri):
            if self.nic != "none":
                raise ValueError(
                    "nic: a remote host's guest cannot join this host's run network; set "
                    "nic: none (network workloads need a URI of this host)"
                )
            if self.disk.backing == "file" and self.disk.path:
                raise ValueError(
                    "disk path: on a remote host the data disk is a volume in the storage pool "
                    "(pool:), not a file in a directory of this host; drop path"
                )
            if self.hugepages != "thp":
                raise ValueError(
                    "hugepages: hvbench reserves huge pages on this host only; a remote host's "
                    "guests use hugepages: thp"
                )
        if "binary" in self.model_fields_set:
            raise ValueError(
                "binary: libvirt runs the QEMU of its own configuration; use driver: qemu to "
                "choose one"
            )
        if self.machine == "microvm":
            raise ValueError("machine: libvirt 9 has no microvm machine type; use pc or q35")
        if self.disk.bus == "nvme":
            raise ValueError("disk bus nvme: libvirt 9 has no NVMe disk; use another bus")
        if self.machine == "q35" and self.disk.bus == "ide":
            raise ValueError("disk bus ide: q35 has no IDE controller under libvirt; use ahci")
        return self

    def host_misfits(self, count: int) -> list[str]:
        """A remote host's devices and pools are its own: only this host's are checked."""
        return [] if is_remote(self.uri) else super().host_misfits(count)

    def footprint(self) -> Footprint | None:
        """A local domain is the qemu driver's QEMU, started by libvirtd; a remote one holds
        nothing of this host."""
        return None if is_remote(self.uri) else super().footprint()

    no_lifecycle: ClassVar[str] = (
        "cannot migrate: libvirt refuses to migrate a domain to the host it runs on (libvirtd "
        '9.0: "Attempt to migrate guest to the same host")'
    )

    def refuses(self, operation: Operation) -> str | None:
        if operation == "migrate":
            return f"the libvirt driver {self.no_lifecycle}"
        if is_remote(self.uri):
            return (
                "the libvirt driver snapshots only on this host: virDomainSave writes its file "
                "on the libvirt host, out of reach of this run's cleanup"
            )
        return None


# domain XML -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where a disk's data is on the libvirt host: a ``file``, a ``block`` device or a
    ``volume`` of a storage pool, with the attributes of its ``<source>``."""

    type: Literal["file", "block", "volume"]
    attrs: Mapping[str, str]


_TARGETS = {
    # bus -> (libvirt target bus, device name prefix, controller it needs)
    "virtio-blk": ("virtio", "vd", None),
    "virtio-scsi": ("scsi", "sd", ("scsi", "virtio-scsi")),
    "ide": ("ide", "hd", None),
    "ahci": ("sata", "sd", ("sata", None)),
}


def _disks(devices: ET.Element, disks: Sequence[Disk], sources: Mapping[str, Source]) -> None:
    """The disks in order (the root filesystem's, if any, is vda), with the controllers their
    buses need."""
    names: dict[str, int] = {}
    controllers: set[str] = set()
    for disk in disks:
        bus, prefix, controller = _TARGETS[disk.bus]
        if controller and controller[0] not in controllers:
            kind, model = controller
            controllers.add(kind)
            xml_child(
                devices, "controller", type=kind, index="0", **({"model": model} if model else {})
            )
        index = names.get(prefix, 0)
        names[prefix] = index + 1
        source = sources[disk.id]
        element = xml_child(devices, "disk", type=source.type, device="disk")
        queues = {"queues": str(disk.queues)} if disk.queues > 1 else {}
        xml_child(
            element, "driver", name="qemu", type=disk.format, cache=disk.cache, io=disk.aio,
            **queues,
        )  # fmt: skip
        xml_child(element, "source", **source.attrs)
        xml_child(element, "target", dev=f"{prefix}{chr(ord('a') + index)}", bus=bus)
        if disk.serial:
            xml_child(element, "serial", disk.serial)


def domain_xml(
    machine: Machine,
    domain_type: Literal["kvm", "qemu"],
    sources: Mapping[str, Source],
    pins: Sequence[int] = (),
    other_secmodels: Sequence[str] = (),
) -> str:
    """The domain for one typed machine: direct kernel boot, the agent channel libvirt serves,
    serial console on a pty, disks, NIC on a libvirt-made tap; QEMU runs as root without
    relabelling."""
    dom = ET.Element("domain", type=domain_type)
    xml_child(dom, "name", machine.name)
    xml_child(dom, "memory", str(machine.memory_mib), unit="MiB")
    xml_child(dom, "vcpu", str(machine.vcpus))
    if machine.hugepages:
        backing = xml_child(dom, "memoryBacking")
        size = str(PAGE_KIB[machine.hugepages])
        xml_child(xml_child(backing, "hugepages"), "page", size=size, unit="KiB")
        xml_child(backing, "source", type="memfd")
    if pins:
        tune = xml_child(dom, "cputune")
        for vcpu, core in enumerate(pins):
            xml_child(tune, "vcpupin", vcpu=str(vcpu), cpuset=str(core))
    os_ = xml_child(dom, "os")
    xml_child(os_, "type", "hvm", arch="x86_64", machine=machine.type)
    xml_child(os_, "kernel", machine.boot.kernel)
    if machine.boot.initrd:
        xml_child(os_, "initrd", machine.boot.initrd)
    xml_child(os_, "cmdline", machine.cmdline())
    xml_child(
        xml_child(dom, "features"), "acpi"
    )  # without it a guest's poweroff does not end the domain
    if machine.cpu == "host":
        xml_child(dom, "cpu", mode="host-passthrough", check="none")
    elif machine.cpu == "max":
        xml_child(dom, "cpu", mode="maximum", check="none")
    else:
        xml_child(
            xml_child(dom, "cpu", mode="custom", match="exact", check="none"), "model", machine.cpu
        )
    xml_child(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        xml_child(dom, event, "destroy")
    devices = xml_child(dom, "devices")
    xml_child(xml_child(devices, "serial", type="pty"), "target", port="0")
    xml_child(xml_child(devices, "console", type="pty"), "target", type="serial", port="0")
    _disks(devices, machine.disks, sources)
    # the agent's port numbered as the qemu driver numbers it (Machine.cmdline tells the guest)
    xml_child(devices, "controller", type="virtio-serial", index="0", ports=str(AGENT_PORT_NR + 1))
    channel = xml_child(devices, "channel", type="unix")
    xml_child(channel, "source", mode="bind")  # libvirt picks the path and connects to it itself
    xml_child(channel, "target", type="virtio", name=AGENT_PORT)
    xml_child(channel, "address", type="virtio-serial", controller="0", bus="0",
              port=str(AGENT_PORT_NR))  # fmt: skip
    for nic in machine.nics:
        interface = xml_child(devices, "interface", type="ethernet")
        xml_child(interface, "mac", address=nic.mac)
        xml_child(interface, "target", dev=nic.tap)
        xml_child(interface, "model", type=NIC_MODELS[nic.model])
        if nic.model == "virtio-net":  # libvirt asks for vhost-net by default: say which
            queues = {"queues": str(nic.queues)} if nic.queues > 1 else {}
            xml_child(interface, "driver", name="vhost" if nic.vhost else "qemu", **queues)
    xml_child(devices, "memballoon", model="none")
    label = xml_child(dom, "seclabel", type="static", model="dac", relabel="no")
    xml_child(label, "label", "+0:+0")
    for model in other_secmodels:
        xml_child(dom, "seclabel", type="none", model=model)
    return ET.tostring(dom, encoding="unicode")


def volume_xml(name: str, size: int, fmt: str) -> str:
    """A volume of ``size`` bytes in a storage pool, allocated as it is written."""
    vol = ET.Element("volume")
    xml_child(vol, "name", name)
    xml_child(vol, "capacity", str(size), unit="bytes")
    xml_child(vol, "allocation", "0", unit="bytes")
    xml_child(xml_child(vol, "target"), "format", type=fmt)
    return ET.tostring(vol, encoding="unicode")


# the guest agent and the console, through the connection ----------------------------------


class DomainAgent(GuestAgent):
    """qemu-ga reached through libvirt (``qemuAgentCommand``), which owns the channel and keeps
    it synchronised: the same on every connection, remote ones included."""

    chunk = AGENT_CHUNK

    def __init__(self, domain: Any, name: str) -> None:
        super().__init__(f"the agent channel of domain {domain.name()}", name)
        self.domain = domain

    def _request(self, message: dict, timeout: float) -> bytes:
        libvirt = binding()
        import libvirt_qemu

        try:
            answer = libvirt_qemu.qemuAgentCommand(
                self.domain, json.dumps(message), max(1, math.ceil(timeout)), 0
            )
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_AGENT_UNRESPONSIVE:
                raise AgentSilent(f"{self.name}: {e.get_error_message()}") from None
            raise InstanceError(f"{self.name}: libvirt: {e.get_error_message()}") from None
        return (answer or "").encode()

    def _sync(self, timeout: float, accept: set[int], resend: bool = True) -> int:
        """libvirt synchronises the channel before every command: a ping shows it answers (so
        ``sync`` and ``wait_ready`` need no ids of their own here, and nothing piles up
        unread to hold a resend back)."""
        self._request({"execute": "guest-ping"}, timeout)
        self._synced = True
        return 0

    def close(self) -> None:
        """The channel is libvirt's, and goes with the domain."""


class _StreamFile(io.RawIOBase):
    """A libvirt stream read as a file (the qemu driver's Console reads the serial console)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.stream.recv(len(buffer))
        except Exception:  # libvirtError: the stream was aborted or the domain is gone
            return 0
        if not isinstance(data, bytes):
            return 0
        buffer[: len(data)] = data
        return len(data)


# instances and the driver -----------------------------------------------------------------


@dataclass
class LibvirtInstance(AgentInstance):
    vmm: ClassVar[str] = "the domain"
    domain: Any = None
    """The libvirt.virDomain."""
    agent: DomainAgent | None = None
    console: Console | None = None
    stream: Any = None
    """The libvirt.virStream of the console, on a connection of its own."""
    console_conn: Any = None
    qemu_pid: int | None = None
    remote: bool = False
    driver: LibvirtDriver | None = None
    """The driver that started it: its lifecycle restores domains on its connection."""

    def lifecycle(self) -> Lifecycle | None:
        return LibvirtLifecycle(self.driver, self) if self.driver else None

    def agent_channel(self) -> GuestAgent | None:
        return self.agent

    def kill(self) -> None:
        self.close()

    def host_pids(self) -> list[int]:
        return [self.qemu_pid] if self.qemu_pid and self.alive() else []

    def accounted_cpu_seconds(self) -> float | None:
        """On a remote host, the domain's CPU time as libvirt accounts it (vCPUs and QEMU's
        own threads); here, its QEMU process already says it."""
        if not self.remote or self.domain is None:
            return None
        try:
            ns: int = self.domain.getCPUStats(True)[0]["cpu_time"]
            return ns / 1e9
        except Exception:  # libvirtError: the domain is gone
            return None

    def alive(self) -> bool:
        return is_active(self.domain)

    def last_words(self) -> str:
        """The guest's console and, on this host, libvirt's log of the domain's QEMU (its
        command line, its errors, and how libvirt saw it end)."""
        logs = {"console": self.console.log if self.console else None}
        if not self.remote and self.domain is not None:
            logs["qemu log"] = QEMU_LOGS / f"{self.domain.name()}.log"
        return last_words(None, **logs)

    def close(self) -> None:
        if self.domain is not None:
            with contextlib.suppress(Exception):  # libvirtError: already gone
                self.domain.destroy()
        if self.console:
            self.console.join(5)  # the console stream ends with the domain
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.abort()
        if self.console_conn is not None:
            with contextlib.suppress(Exception):
                self.console_conn.close()


def _qemu_pid(name: str) -> int | None:
    """The host process of a local domain: libvirt names it ``-name guest=NAME,...``."""
    wanted = f"guest={name},"
    for proc in processes(["name", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if (proc.info.get("name") or "").startswith("qemu") and any(
            a.startswith(wanted) for a in cmdline
        ):
            return proc.pid
    return None


class LibvirtLifecycle(Lifecycle):
    """Snapshot of a local domain through its save file: the same domain (name, UUID, disks,
    tap) runs again from it, under a new QEMU process. The file is in the ledger before libvirt
    writes it and goes once the restored guest's agent answers; the domain's own ledger entry
    covers the restored domain (the same name)."""

    def __init__(self, driver: LibvirtDriver, inst: LibvirtInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        raise InstanceError(f"{self.inst.name}: libvirt {LibvirtSettings.no_lifecycle}")

    def snapshot(self, deadline: float) -> OperationReport:
        """save_s is virDomainSave (it returns once the file holds the guest and the domain has
        ended); restore_s from virDomainRestoreFlags until the agent answers again."""
        libvirt = binding()
        inst, ledger = self.inst, self.driver.ledger
        if not inst.alive():
            raise InstanceError(f"{inst.name}: the domain is not running ({inst.last_words()})")
        name = inst.domain.name()
        image = ledger.add("path", str(operation_path(self.driver.workdir, inst, "save")))
        try:
            t0 = time.monotonic()
            inst.domain.save(image.name)
            save_s = time.monotonic() - t0
            size = os.path.getsize(image.name)
            inst.close()  # the console's stream ended with the domain
            taps = [r for r in inst.resources if r.kind == "link"]
            for tap in taps:  # gone with the saved QEMU; libvirt makes them anew in the root
                inst.resources.remove(tap)
                ledger.release(tap)
            t1 = time.monotonic()
            conn = self.driver.opened.conn
            conn.restoreFlags(image.name, None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
            inst.domain = conn.lookupByName(name)
            inst.resources.extend(self.driver.network.adopt_tap(tap.name) for tap in taps)
            inst.qemu_pid = _qemu_pid(name)
            inst.agent = DomainAgent(inst.domain, inst.name)
            inst.domain.resume()
            inst.agent.wait_ready(deadline, inst.alive)
            restore_s = time.monotonic() - t1
        except libvirt.libvirtError as e:
            raise InstanceError(f"{inst.name}: libvirt: {e.get_error_message()}") from None
        finally:
            ledger.release(image)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        return OperationReport(figures, json.dumps({"file": image.name, "bytes": size}))


_NODE_STATS = {"user": "user", "system": "kernel", "idle": "idle", "iowait": "iowait"}
"""The host's CPU states libvirt reads (virNodeGetCPUStats) under the names of /proc/stat."""


@dataclass(frozen=True)
class LibvirtOpened:
    """What the libvirt driver resolves once per run (``open``)."""

    builder: MachineBuilder
    """The same machine as the qemu driver makes."""
    conn: Any
    """The connection (virConnect), closed with the driver."""
    secmodels: tuple[str, ...]
    """The host's security models besides dac, which every domain's XML labels."""
    pool: Any
    """On a remote host: the storage pool (virStoragePool) of uploads and data disks; None
    here."""
    cpu_source: HostCpuSource
    uploaded: dict[str, str]
    """On a remote host: the volume each file the guest boots from was uploaded to."""


class LibvirtDriver(Driver[LibvirtSettings, LibvirtInstance, LibvirtOpened]):
    name: ClassVar[str] = "libvirt"
    settings_model = LibvirtSettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reserved: list[Resource] = []
        self._count = 0
        """The instances of the group started last, for the pinning ``describe`` reports."""
        self._net_queues: dict[str, str] = {}
        """Per guest of the group: how many of the NIC's queues it enabled (``queues``)."""

    @classmethod
    def check(cls) -> Availability:
        return cls._reached(default_uri())

    @classmethod
    def check_for(cls, settings: LibvirtSettings) -> Availability:
        return cls._reached(settings.uri)

    @classmethod
    def _reached(cls, uri: str) -> Availability:
        """Whether the libvirt at ``uri`` answers, and what it runs."""
        try:
            libvirt = binding()
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
            version, kind, hyper = conn.getLibVersion(), conn.getType(), conn.getVersion()
        finally:
            conn.close()
        return Availability(True, f"libvirt {dotted(version)} at {uri}, {kind} {dotted(hyper)}")

    @property
    def remote(self) -> bool:
        return is_remote(self.settings.uri)

    def _resolve(self) -> LibvirtOpened:
        """Connection, storage pool, and the machine the qemu driver makes (its images and
        accelerator); on a remote host, the files the guest boots from uploaded to the pool.
        A resolve that fails closes the connection it opened."""
        s = self.settings
        libvirt = binding()
        if self.remote and self.needs.userland:
            raise HvbenchError(
                f"platform {self.platform}: a root filesystem (kernbench) is not uploaded to a "
                "remote host yet; use a URI of this host for it"
            )
        try:
            conn = libvirt.open(s.uri)
        except libvirt.libvirtError as e:
            raise HvbenchError(
                f"platform {self.platform}: cannot connect to {s.uri}: {e.get_error_message()}"
            ) from None
        try:
            return self._resolve_on(conn)
        except BaseException:
            close_connection(conn)
            raise

    def _resolve_on(self, conn: Any) -> LibvirtOpened:
        """``_resolve`` once connected (``conn``)."""
        s = self.settings
        caps = ET.fromstring(conn.getCapabilities())
        secmodels = tuple(
            m.text for m in caps.iterfind("host/secmodel/model") if m.text and m.text != "dac"
        )
        pool, cpu_source = None, LOCAL
        if self.remote:
            pool = self._storage_pool(conn)
            # asked once: the runner wants the source for every sample
            cpus, host = conn.getInfo()[2], conn.getHostname()
            cpu_source = HostCpuSource(functools.partial(_node_states, conn), cpus, host)
        verdict = None
        if self.remote and s.accel == "auto":
            # a probe boot would run on this host: the remote host's word is taken instead
            kvm = caps.find("guest[arch='x86_64']/arch/domain[@type='kvm']") is not None
            verdict = AccelVerdict(
                "kvm" if kvm else "tcg",
                f"the remote host {'offers' if kvm else 'does not offer'} KVM (not probed)",
            )
        builder = MachineBuilder.resolve(self.platform, s, self.needs, verdict)
        uploaded = {}
        if self.remote:
            for path in builder.boot_files():
                name = f"hvb-{self.ledger.run_id}-{self.platform}-{Path(path).name}"
                uploaded[path] = self._upload(conn, pool, name, Path(path))
        return LibvirtOpened(builder, conn, secmodels, pool, cpu_source, uploaded)

    def _storage_pool(self, conn: Any) -> Any:
        libvirt = binding()
        s = self.settings
        try:
            pool = conn.storagePoolLookupByName(s.pool)
        except libvirt.libvirtError:
            pool = None
        if pool is None or not pool.isActive():
            raise HvbenchError(
                f"platform {self.platform}: no active storage pool {s.pool!r} at {s.uri}: make "
                f"one on that host (virsh pool-define-as {s.pool} dir --target "
                f"/var/lib/libvirt/images; virsh pool-start {s.pool}) or name another with pool:"
            )
        return pool

    def machine(self, index: int, prefix: Path) -> Machine:
        """The typed machine of instance ``index``: the qemu driver's, under a domain name that
        is unique on the host; libvirt keeps QEMU's monitor and the agent's socket to itself;
        on a remote host, booted from the uploaded volumes."""
        opened = self.opened
        address = self.network.address(index) if self.settings.nic != "none" else None
        machine = opened.builder.machine(index, prefix, address)
        boot, uploaded = machine.boot, opened.uploaded
        return replace(
            machine,
            name=f"hvb-{self.ledger.run_id}-{self.platform}-{index}",
            qmp_socket="",
            agent_socket="",
            boot=replace(
                boot,
                kernel=uploaded.get(boot.kernel, boot.kernel),
                initrd=uploaded.get(boot.initrd, boot.initrd) if boot.initrd else None,
            ),
        )

    def _prepare(self, count: int) -> None:
        """The run's network once; huge pages here for ``count`` guests."""
        self._count, self._net_queues = count, {}
        if self.settings.nic != "none":
            self.network.up()  # once, before the threads that adopt their taps
        self._reserved = self.opened.builder.reserve_hugepages(self.ledger, count)

    def _instance(self, index: int) -> LibvirtInstance:
        s = self.settings
        return LibvirtInstance(self.platform, index, s.vcpus, s.memory >> 20, remote=self.remote)

    def _upload(self, conn: Any, pool: Any, name: str, path: Path) -> str:
        size = path.stat().st_size
        volume = self._new_volume(pool, name, size, "raw", self.resources)
        stream = conn.newStream(0)
        try:
            volume.upload(stream, 0, size, 0)
            with path.open("rb") as f:
                stream.sendAll(lambda _stream, count, src: src.read(count), f)
            stream.finish()
        except binding().libvirtError as e:
            with contextlib.suppress(Exception):
                stream.abort()
            raise HvbenchError(
                f"platform {self.platform}: uploading {path.name} to pool "
                f"{self.settings.pool!r} failed: {e.get_error_message()}"
            ) from None
        uploaded: str = volume.path()
        return uploaded

    def _new_volume(self, pool: Any, name: str, size: int, fmt: str, made: list[Resource]) -> Any:
        """A volume in the remote ``pool``, in the ledger before it exists."""
        s = self.settings
        made.append(self.ledger.add("volume", name, uri=s.uri, pool=s.pool))
        try:
            return pool.createXML(volume_xml(name, size, fmt), 0)
        except binding().libvirtError as e:
            raise HvbenchError(
                f"platform {self.platform}: cannot make volume {name} in pool {s.pool!r}: "
                f"{e.get_error_message()}"
            ) from None

    def _pins(self, index: int) -> list[int]:
        s = self.settings
        if not s.pin:
            return []
        cores = os.cpu_count() or 1
        return [(index * s.vcpus + v) % cores for v in range(s.vcpus)]

    def _data_disk(self, inst: LibvirtInstance, prefix: Path) -> tuple[Source, str, bool]:
        """The data disk on the libvirt host, its description for the report, and whether
        this host formatted it (a local raw disk: ``DataImage.formatted``)."""
        disk = self.settings.disk
        if not self.remote:
            image, description = self.opened.builder.data_disk(self, prefix, inst.resources)
            if image.file is None:
                return Source("block", {"dev": image.path}), description, image.formatted
            return Source("file", {"file": image.path}), description, image.formatted
        host = urlsplit(self.settings.uri).hostname
        if disk.backing == "block":
            assert disk.path  # the settings' validator: block needs a path
            return (
                Source("block", {"dev": disk.path}),
                f"block device {disk.path} of {host} on {disk.bus}, cache={disk.cache}",
                False,
            )
        name = f"hvb-{self.ledger.run_id}-{inst.name}-data"
        self._new_volume(self.opened.pool, name, disk.size, disk.format, inst.resources)
        return (
            Source("volume", {"pool": self.settings.pool, "volume": name}),
            f"{disk.format} volume {name} in pool {self.settings.pool} of {host} on "
            f"{disk.bus}, cache={disk.cache}, aio={disk.aio}",
            False,
        )

    def _start_one(self, inst: LibvirtInstance, deadline: float) -> None:
        libvirt = binding()
        s, opened = self.settings, self.opened
        prefix = self.workdir / f"{self.platform}-{inst.index}"
        machine = self.machine(inst.index, prefix)
        made = inst.resources
        sources: dict[str, Source] = {}
        if s.nic != "none":
            tap, mac = tap_and_mac("l", 0x14, inst.index)
            machine.nics.append(nic_device(s, tap, mac))
        if opened.builder.rootfs:
            root = root_disk(opened.builder.rootfs, self.ledger, prefix, made)
            machine.disks.append(root)
            sources[root.id] = Source("file", {"file": root.path})
        if self.needs.data_disk:
            sources["data"], description, formatted = self._data_disk(inst, prefix)
            machine.disks.append(data_device(s, ""))
        xml = domain_xml(
            machine,
            "kvm" if machine.accel == "kvm" else "qemu",
            sources,
            self._pins(inst.index),
            list(opened.secmodels),
        )
        made.append(self.ledger.add("domain", machine.name, uri=s.uri))
        try:
            # paused until its console is open, so that no boot message is lost
            inst.domain = opened.conn.createXML(xml, libvirt.VIR_DOMAIN_START_PAUSED)
            # a blocking stream holds its connection's I/O: the console gets one of its own
            inst.console_conn = libvirt.open(s.uri)
            inst.stream = inst.console_conn.newStream(0)
            inst.console_conn.lookupByName(machine.name).openConsole(None, inst.stream, 0)
        except libvirt.libvirtError as e:
            raise InstanceError(f"{inst.name}: libvirt: {e.get_error_message()}") from None
        for nic in machine.nics:
            made.append(self.network.adopt_tap(nic.tap))
            inst.address = self.network.address(inst.index)
        if not self.remote:
            inst.qemu_pid = _qemu_pid(machine.name)
        started = time.monotonic()
        inst.console = Console(
            io.BufferedReader(_StreamFile(inst.stream)), Path(f"{prefix}.console.log"), started
        )
        inst.console.start()
        inst.agent = DomainAgent(inst.domain, inst.name)
        try:
            inst.domain.resume()
            inst.agent.wait_ready(min(deadline, started + s.boot_timeout), inst.alive)
        except libvirt.libvirtError as e:
            raise InstanceError(f"{inst.name}: libvirt: {e.get_error_message()}") from None
        except InstanceError as e:
            why = "exited" if not inst.alive() else "did not answer in time"
            raise InstanceError(f"{inst.name}: the domain {why} ({inst.last_words()})") from e
        inst.console.ready()
        inst.boot = inst.console.boot_phases()
        if s.queues > 1:
            self._net_queues[inst.name] = enable_queues(inst, s.queues)
        if self.needs.data_disk:
            device = find_disk(inst, DATA_SERIAL)
            mount_data_disk(inst, device, description, formatted=formatted)

    def _stopped(self, instances: list[LibvirtInstance]) -> None:
        while self._reserved:  # after the guests that held them
            self.ledger.release(self._reserved.pop())

    def _closed(self) -> None:
        """The uploads are gone (they were ``resources``): the connection goes too."""
        if self.is_open:
            close_connection(self.opened.conn)

    def host_cpu_source(self) -> HostCpuSource:
        """A remote host's CPU states as libvirt reads them there (its /proc/stat)."""
        if not self.remote:
            return LOCAL
        return self.open().cpu_source

    def describe(self) -> dict:
        """The qemu driver's description of the same machine, with what libvirt runs it with
        and, for a remote host, that host."""
        info = super().describe()
        if not self.is_open:
            return info
        conn, builder = self.opened.conn, self.opened.builder
        pinning = {f"{self.platform}-{i}": self._pins(i) for i in range(self._count)}
        qemu = f"{conn.getType()} {dotted(conn.getVersion())} through libvirt"
        info["resolved"] = {
            **builder.resolved(qemu, pinning),  # libvirt chose the QEMU: no qemu_binary
            "libvirt": dotted(conn.getLibVersion()),
            "uri": self.settings.uri,
        }
        if self._net_queues:
            info["resolved"]["net_queues"] = self._net_queues
        if self.remote:
            model, memory_mib, cpus, mhz, *_ = conn.getInfo()
            info["resolved"] |= {
                "host": conn.getHostname(),
                "host_cpu": {"model": model, "cpus": cpus, "mhz": mhz, "memory_mib": memory_mib},
                "host_cores": cpus,
            }
        return info | builder.images()

    @classmethod
    def ran_by_settings(cls, settings: LibvirtSettings) -> WhatRan:
        return MachineBuilder.ran_by_settings(settings)

    def what_ran(self) -> WhatRan:
        return self.opened.builder.what_ran() if self.is_open else super().what_ran()


def _node_states(conn: Any) -> dict[str, float]:
    """A remote host's CPU states through ``conn``, under the names of /proc/stat."""
    ns = conn.getCPUStats(binding().VIR_NODE_CPU_STATS_ALL_CPUS)
    return {s: ns.get(_NODE_STATS.get(s, ""), 0) / 1e9 for s in STATES}
