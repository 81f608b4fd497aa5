"""Xen domains through libvirt (``driver: libvirt`` with ``uri: xen:///system``), for Xen hosts
managed with libvirt or virt-manager rather than xl.

The platform settings are the xen driver's (mode, vcpus, memory, NIC, disk and its backend,
tsc_mode) plus the URI; the domain is the same one, described in libvirt's domain XML for its
libxl driver and started with ``createXML`` instead of ``xl create``. Everything else is the xen
driver's: the guest image's kernel booted directly, the agent on the domain's console (the pty
xenconsoled names in xenstore), the NIC's backend moved into the run's namespace after
hvbench's hotplug script reported it connected. One difference: libvirt cannot name a disk's
hotplug script, so libxl runs Xen's own ``block`` script for a ``phy`` disk.

Runs in dom0, against its libvirtd; a remote Xen host is refused in one line.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import model_validator

from hvbench.drivers.base import Lifecycle, Operation
from hvbench.drivers.libvirt_connection import (
    binding,
    close_connection,
    dotted,
    is_active,
    is_remote,
    scheme,
    xml_child,
)
from hvbench.drivers.xen_domain import (
    NIC_MODULE,
    XenDomains,
    XenInstance,
    XenOpened,
    XenSettings,
)
from hvbench.errors import HvbenchError, InstanceError

if TYPE_CHECKING:
    from hvbench.guest.image import GuestImage
    from hvbench.guest.userland import RootImage

OS_TYPE = {"pv": ("xenpv", "linux"), "pvh": ("xenpvh", "xenpvh"), "hvm": ("xenfv", "hvm")}
"""mode -> libvirt's machine and OS type for it."""
TSC_MODE = {"always_emulate": "emulate", "native": "native", "native_paravirt": "paravirt"}
"""xl's tsc_mode -> the mode of libvirt's tsc timer (default: no timer element)."""


class LibvirtXenSettings(XenSettings):
    """The xen driver's settings, run through libvirt's libxl driver at ``uri``."""

    driver: Literal["libvirt"]
    uri: str = "xen:///system"

    @model_validator(mode="after")
    def _libvirt_can(self) -> LibvirtXenSettings:
        if scheme(self.uri) != "xen":
            raise ValueError(f"uri: expected a xen:// URI, found {self.uri!r}")
        if is_remote(self.uri):
            raise ValueError(
                "uri: a remote Xen host is not supported: run hvbench in that host's dom0 "
                "with xen:///system"
            )
        return self

    no_lifecycle: ClassVar[str] = (
        "has no migration or snapshot of Xen domains in hvbench yet (the xen driver has: xl)"
    )

    def refuses(self, operation: Operation) -> str | None:
        return f"the libvirt driver at a Xen URI {self.no_lifecycle}"


def xen_domain_xml(
    name: str,
    settings: XenSettings,
    kernel: str,
    initrd: str,
    cmdline: str,
    script: str,
    mac: str | None,
    disk: tuple[str, str] | None,
) -> str:
    """The domain libxl builds from the xen driver's settings: direct kernel boot, console on
    a pty, a NIC whose hotplug script is hvbench's, the data disk (``(backend, target)``) as
    xvdb."""
    machine, os_type = OS_TYPE[settings.mode]
    dom = ET.Element("domain", type="xen")
    xml_child(dom, "name", name)
    xml_child(dom, "memory", str(settings.memory >> 20), unit="MiB")
    xml_child(dom, "vcpu", str(settings.vcpus))
    os_ = xml_child(dom, "os")
    xml_child(os_, "type", os_type, arch="x86_64", machine=machine)
    xml_child(os_, "kernel", kernel)
    xml_child(os_, "initrd", initrd)
    xml_child(os_, "cmdline", cmdline)
    if settings.mode == "hvm":
        features = xml_child(dom, "features")
        for feature in ("acpi", "apic", "pae"):
            xml_child(features, feature)
    clock = xml_child(dom, "clock", offset="utc")
    if settings.tsc_mode in TSC_MODE:
        xml_child(clock, "timer", name="tsc", mode=TSC_MODE[settings.tsc_mode])
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        xml_child(dom, event, "destroy")
    devices = xml_child(dom, "devices")
    if settings.mode == "hvm":
        xml_child(xml_child(devices, "serial", type="pty"), "target", port="0")
        xml_child(xml_child(devices, "console", type="pty"), "target", type="serial", port="0")
    else:
        xml_child(xml_child(devices, "console", type="pty"), "target", type="xen", port="0")
    if disk:
        backend, target = disk
        if backend == "qdisk":
            element = xml_child(devices, "disk", type="file", device="disk")
            xml_child(element, "driver", name="qemu", type="raw")
            xml_child(element, "source", file=target)
        else:
            element = xml_child(devices, "disk", type="block", device="disk")
            xml_child(element, "driver", name="phy")
            xml_child(element, "source", dev=target)
        xml_child(element, "target", dev="xvdb", bus="xen")
    if mac:
        interface = xml_child(devices, "interface", type="ethernet")
        xml_child(interface, "mac", address=mac)
        xml_child(interface, "script", path=script)
        if settings.mode == "hvm":
            model = settings.nic if settings.nic in NIC_MODULE else "netfront"
            xml_child(interface, "model", type=model)
    return ET.tostring(dom, encoding="unicode")


@dataclass
class LibvirtXenInstance(XenInstance):
    """A Xen domain that libvirt runs: asked and destroyed through its virDomain."""

    handle: Any = None
    """The libvirt.virDomain."""

    def _running(self) -> bool:
        return is_active(self.handle)

    def lifecycle(self) -> Lifecycle | None:
        return None  # LibvirtXenSettings.refuses

    def _destroy(self) -> None:
        with contextlib.suppress(Exception):  # libvirtError: already gone
            self.handle.destroy()

    def accounted_cpu_seconds(self) -> float | None:
        """The domain's vCPU time as libxl accounts it."""
        try:
            ns: int = self.handle.info()[4]
            return ns / 1e9
        except Exception:  # libvirtError: the domain is gone
            return None


@dataclass(frozen=True)
class LibvirtXenOpened(XenOpened):
    """What the xen driver resolves, and libvirtd's connection (virConnect) that runs the
    domains, closed with the driver."""

    conn: Any


class LibvirtXenDriver(XenDomains[LibvirtXenSettings, LibvirtXenOpened]):
    name: ClassVar[str] = "libvirt"
    settings_model = LibvirtXenSettings
    instance_class = LibvirtXenInstance

    def _userland(self, image: GuestImage) -> RootImage | None:
        if self.needs.userland:
            raise HvbenchError(
                f"platform {self.platform}: libvirt's Xen domains do not boot the root "
                "filesystem yet (kernbench, consolidation); the xen driver does"
            )
        return None

    def _resolve(self) -> LibvirtXenOpened:
        """libvirtd's connection and its Xen, then the domains' image and the hotplug script;
        a resolve that fails closes the connection it opened."""
        libvirt = binding()
        try:
            conn = libvirt.open(self.settings.uri)
        except libvirt.libvirtError as e:
            raise HvbenchError(
                f"platform {self.platform}: cannot connect to {self.settings.uri}: "
                f"{e.get_error_message()} (start libvirtd in dom0, with its libxl driver: "
                "apt-get install libvirt-daemon-driver-xen)"
            ) from None
        try:
            domains = self._domains(dotted(conn.getVersion()), conn.getInfo()[2])
        except BaseException:
            close_connection(conn)
            raise
        return LibvirtXenOpened(**vars(domains), conn=conn)

    def _closed(self) -> None:
        if self.is_open:
            close_connection(self.opened.conn)

    def _guest_seconds(self) -> float:
        """vCPU time of every domain but dom0, as libxl accounts it."""
        total = 0
        for domain in self.opened.conn.listAllDomains():
            with contextlib.suppress(Exception):  # libvirtError: it ended meanwhile
                total += domain.info()[4] if domain.ID() > 0 else 0
        return total / 1e9

    def _create(
        self,
        inst: XenInstance,
        prefix: Path,
        disk_target: str | None,
        deadline: float,
        root: str | None = None,
    ) -> None:
        """The domain through libvirt; ``root`` is always None (``_userland`` refuses)."""
        if not isinstance(inst, LibvirtXenInstance):
            raise TypeError(f"{inst.name}: a libvirt domain is a LibvirtXenInstance's")
        s, opened = self.settings, self.opened
        xml = xen_domain_xml(
            inst.domain,
            s,
            str(opened.kernel),
            str(opened.image.initrd),
            self._cmdline(inst),
            opened.script.name,
            self._mac(inst) if s.nic != "none" else None,
            (s.disk.backend, disk_target) if disk_target else None,
        )
        record = self.ledger.add("path", f"{prefix}.xml")
        inst.resources.append(record)
        Path(record.name).write_text(xml)  # for the record, next to its console log
        inst.resources.append(self.ledger.add("domain", inst.domain, uri=self.settings.uri))
        try:
            handle = opened.conn.createXML(xml, 0)
        except binding().libvirtError as e:
            raise InstanceError(f"{inst.name}: libvirt: {e.get_error_message()}") from None
        inst.handle = handle
        inst.domid = handle.ID()

    def describe(self) -> dict:
        info = super().describe()
        if self.is_open:
            conn = self.opened.conn
            info["resolved"] |= {
                "libvirt": dotted(conn.getLibVersion()),
                "uri": self.settings.uri,
                "host_cpu": "dom0's CPU states, with every domain's vCPU time (libvirt) as guest "
                "time",
            }
        return info
