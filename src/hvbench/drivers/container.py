"""OS-level containers (``driver: container``): the guest image's tree run by runc.

runc rather than systemd-nspawn, unshare or LXC: it runs the very OCI bundle that gVisor's runsc
runs (hvbench.drivers.oslevel), so ``container`` and ``gvisor`` differ in nothing but the
runtime; it applies the cgroup limits itself from the spec, puts every ``exec``'d command in the
container's cgroup (an ``nsenter`` would leave it outside the CPU and memory limits), needs no
daemon or system bus (nspawn does), and works on this host's hybrid cgroup layout (crun does
not).
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import ClassVar, Literal, NamedTuple

from hvbench.drivers.base import Availability, Kernel, Operation, PlatformSettings
from hvbench.drivers.oslevel import OciDriver, OsLevelSettings
from hvbench.host.process import which


class ContainerSettings(OsLevelSettings):
    driver: Literal["container"]


class ContainerDriver(OciDriver[ContainerSettings]):
    name: ClassVar[str] = "container"
    settings_model = ContainerSettings
    runtime_name: ClassVar[str] = "runc"
    copies_once: ClassVar[str | None] = "runc checkpoints a stopped container"
    kernel: ClassVar[Kernel] = "host"

    @classmethod
    def runtime_binary(cls) -> str | None:
        return which("runc")

    @classmethod
    def check(cls) -> Availability:
        if cls.runtime_binary() is None:
            return Availability(False, "runc is not installed", "apt-get install runc")
        found = criu()
        checkpoint = (
            f"checkpoint and restore with CRIU {found.version}"
            if found
            else "no checkpoint and restore (CRIU 4.1: ./setup.sh --with-criu)"
        )
        return Availability(True, f"runc: OCI containers of the guest image's tree; {checkpoint}")

    @classmethod
    def refuses(cls, operation: Operation, settings: PlatformSettings) -> str | None:
        if criu() is None:
            return (
                "the container driver checkpoints with CRIU 4.1 or later (Debian 12's 3.17 "
                "fails on kernels from 6.13 on), not found here: ./setup.sh --with-criu"
            )
        return None

    def global_flags(self) -> list[str]:
        found = criu()
        return ["--criu", found.path] if found else []

    def resolved(self) -> dict:
        found = criu()
        return {"criu": found.version} if found else {}


class Criu(NamedTuple):
    """The CRIU runc is handed: its path and version."""

    path: str
    version: str


CRIU_MIN = (4, 1)
"""The first CRIU that dumps on this kernel (6.13 moved the rt vDSO: "vdso: Failed to fill self
vdso symtable" from 3.17)."""


@functools.cache
def criu() -> Criu | None:
    """The CRIU runc would use (hvbench's virtualenv first, see scripts/install-criu.sh), or
    None if there is none of CRIU_MIN or later."""
    path = which("criu")
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"Version: ((\d+)\.(\d+)(?:\.\d+)?)", out.stdout)
    if out.returncode != 0 or found is None:
        return None
    if (int(found.group(2)), int(found.group(3))) < CRIU_MIN:
        return None
    return Criu(path, found.group(1))
