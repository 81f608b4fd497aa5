"""Drivers by name: each makes instances of one kind of platform."""

from collections.abc import Mapping
from typing import Any

from hvbench.drivers.base import Driver, PlatformSettings
from hvbench.drivers.cloud_hypervisor import CloudHypervisorDriver
from hvbench.drivers.container import ContainerDriver
from hvbench.drivers.docker import DockerDriver
from hvbench.drivers.firecracker import FirecrackerDriver
from hvbench.drivers.gvisor import GvisorDriver
from hvbench.drivers.libvirt import LibvirtDriver
from hvbench.drivers.libvirt_connection import scheme
from hvbench.drivers.libvirt_xen import LibvirtXenDriver
from hvbench.drivers.lxc import LxcDriver
from hvbench.drivers.native import NativeDriver
from hvbench.drivers.nspawn import NspawnDriver
from hvbench.drivers.podman import PodmanDriver
from hvbench.drivers.qemu import QemuDriver
from hvbench.drivers.uml import UmlDriver
from hvbench.drivers.xen import XenDriver

__all__ = ["DRIVERS", "EVERY_DRIVER", "Driver", "PlatformSettings", "driver_class"]
"""The registry, and the contract its drivers and their settings share (what a study holds)."""

DRIVERS: dict[str, type[Driver]] = {
    cls.name: cls
    for cls in (
        NativeDriver,
        QemuDriver,
        ContainerDriver,
        GvisorDriver,
        DockerDriver,
        PodmanDriver,
        NspawnDriver,
        LxcDriver,
        UmlDriver,
        LibvirtDriver,
        XenDriver,
        FirecrackerDriver,
        CloudHypervisorDriver,
    )
}
EVERY_DRIVER: tuple[type[Driver], ...] = (*DRIVERS.values(), LibvirtXenDriver)
"""Every driver a platform may be run by: the registry's, and those ``driver_class`` picks by a
setting under another's name (libvirt's Xen half, by its URI)."""


def driver_class(settings: Mapping[str, Any] | PlatformSettings) -> type[Driver]:
    """The driver that runs a platform (its settings, raw or validated): the one its name says,
    and for libvirt the one for the hypervisor its URI names."""
    fields = settings if isinstance(settings, Mapping) else vars(settings)
    if fields.get("driver") == "libvirt" and scheme(fields.get("uri")) == "xen":
        return LibvirtXenDriver
    return DRIVERS[fields["driver"]]
