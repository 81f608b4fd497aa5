"""The cgroup limits of a VM's size: one record, rendered in each dialect that sets them.

A container compares fairly with a VM of the same size only under the same bounds: the CPU time
of ``vcpus`` CPUs (a CFS quota of that many periods, and a cpuset of as many host cores of the
instance's own where pinned) and ``memory``, with no swap, as a VM has none. The OS-level drivers
hand them to whatever makes their containers' cgroups, each in its own words: an OCI runtime (the
spec's ``linux.resources``), an engine (its ``run`` flags), hvbench itself (the cgroup's files,
``cgroup.own_cgroup``) and LXC (its ``lxc.cgroup`` keys); the report's provenance says what they
were in one way (``described``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

CFS_PERIOD_US = 100_000
"""The CFS period every dialect is given (the kernel's default); the quota is ``vcpus`` of them."""

CgroupVersion = Literal[1, 2]
"""2 on a unified hierarchy, 1 on a legacy or hybrid one (``cgroup.cgroup_version``)."""


@dataclass(frozen=True)
class CgroupLimits:
    """What bounds each instance of a platform: a VM's ``vcpus`` and ``memory``, no swap."""

    vcpus: int
    memory: int
    """Bytes, swap included: no swap."""
    pin: bool = False
    """Each instance on ``vcpus`` host cores of its own (``cpuset``) besides the quota."""

    @property
    def quota_us(self) -> int:
        """The CFS quota per period: ``vcpus`` CPUs' worth."""
        return self.vcpus * CFS_PERIOD_US

    def cpuset(self, index: int) -> str | None:
        """The host cores instance ``index`` is pinned to, ``vcpus`` of its own round robin over
        the host's, as a cpuset list; None where the platform is not pinned."""
        if not self.pin:
            return None
        cores = os.cpu_count() or 1
        return ",".join(str((index * self.vcpus + k) % cores) for k in range(self.vcpus))

    def oci(self, index: int) -> dict[str, dict[str, object]]:
        """An OCI runtime spec's ``linux.resources`` for instance ``index`` (swap equal to memory:
        none)."""
        cpu: dict[str, object] = {"quota": self.quota_us, "period": CFS_PERIOD_US}
        if (cpus := self.cpuset(index)) is not None:
            cpu["cpus"] = cpus
        return {"cpu": cpu, "memory": {"limit": self.memory, "swap": self.memory}}

    def engine_flags(self, index: int) -> list[str]:
        """An engine's ``run`` flags for instance ``index``, Docker's and Podman's alike
        (``--memory-swap`` equal to ``--memory``: no swap)."""
        flags = [
            f"--cpu-period={CFS_PERIOD_US}",
            f"--cpu-quota={self.quota_us}",
            f"--memory={self.memory}",
            f"--memory-swap={self.memory}",
        ]
        if (cpus := self.cpuset(index)) is not None:
            flags.append(f"--cpuset-cpus={cpus}")
        return flags

    def files(self, version: CgroupVersion, index: int) -> dict[str, str]:
        """Instance ``index``'s cgroup files and what they are written, in the order they must
        be (v1: the limit on memory and swap after the one on memory, which it may not be
        under). Each file's controller is its name's first word: on v1, its hierarchy."""
        if version == 2:
            files = {
                "cpu.max": f"{self.quota_us} {CFS_PERIOD_US}",
                "memory.max": str(self.memory),
                "memory.swap.max": "0",
            }
        else:
            files = {
                "cpu.cfs_period_us": str(CFS_PERIOD_US),
                "cpu.cfs_quota_us": str(self.quota_us),
                "memory.limit_in_bytes": str(self.memory),
                "memory.memsw.limit_in_bytes": str(self.memory),
            }
        if (cpus := self.cpuset(index)) is not None:
            files["cpuset.cpus"] = cpus
        return files

    def lxc_keys(self, version: CgroupVersion, index: int) -> list[str]:
        """LXC's configuration lines for instance ``index``: the cgroup's files as
        ``lxc.cgroup2.`` keys (v2) or ``lxc.cgroup.`` ones (v1)."""
        prefix = "lxc.cgroup2" if version == 2 else "lxc.cgroup"
        return [f"{prefix}.{name} = {value}" for name, value in self.files(version, index).items()]

    def described(self) -> dict[str, str]:
        """What the report's provenance says of them."""
        cpuset = " and a cpuset of as many cores" if self.pin else ""
        return {
            "cpu": f"CFS quota {self.quota_us} us per {CFS_PERIOD_US} us{cpuset}",
            "memory": f"{self.memory} bytes, no swap",
        }
