"""OS-level containers (``driver: container``): the guest image's tree run by runc.

runc rather than systemd-nspawn, unshare or LXC: it runs the very OCI bundle that gVisor's runsc
runs (hvbench.drivers.oslevel), so ``container`` and ``gvisor`` differ in nothing but the
runtime; it applies the cgroup limits itself from the spec, puts every ``exec``'d command in the
container's cgroup (an ``nsenter`` would leave it outside the CPU and memory limits), needs no
daemon or system bus (nspawn does), and works on this host's hybrid cgroup layout (crun does
not).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from hvbench.drivers.base import Availability, Kernel
from hvbench.drivers.oslevel import OciDriver, OsLevelSettings
from hvbench.host.process import which


class ContainerSettings(OsLevelSettings):
    driver: Literal["container"]


class ContainerDriver(OciDriver[ContainerSettings]):
    name: ClassVar[str] = "container"
    no_lifecycle: ClassVar[str] = (
        "cannot yet: runc checkpoints with CRIU, and Debian 12's CRIU 3.17 fails on kernels "
        'from 6.13 on (`criu check`: "vdso: Unexpected rt vDSO area bounds"; fixed in CRIU 4.1)'
    )
    settings_model = ContainerSettings
    runtime_name: ClassVar[str] = "runc"
    kernel: ClassVar[Kernel] = "host"

    @classmethod
    def runtime_binary(cls) -> str | None:
        return which("runc")

    @classmethod
    def check(cls) -> Availability:
        if cls.runtime_binary() is None:
            return Availability(False, "runc is not installed", "apt-get install runc")
        return Availability(True, "runc: OCI containers of the guest image's tree")
