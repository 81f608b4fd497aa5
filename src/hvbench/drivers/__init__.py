"""Drivers by name: each makes instances of one kind of platform."""

from hvbench.drivers.base import Driver
from hvbench.drivers.container import ContainerDriver
from hvbench.drivers.gvisor import GvisorDriver
from hvbench.drivers.libvirt import LibvirtDriver
from hvbench.drivers.native import NativeDriver
from hvbench.drivers.qemu import QemuDriver
from hvbench.drivers.uml import UmlDriver
from hvbench.drivers.xen import XenDriver

DRIVERS: dict[str, type[Driver]] = {
    cls.name: cls
    for cls in (
        NativeDriver,
        QemuDriver,
        ContainerDriver,
        GvisorDriver,
        UmlDriver,
        LibvirtDriver,
        XenDriver,
    )
}
