"""The host's cgroups: the hierarchy and its version, a container's cgroup as its runtime or
engine made it, and the cgroups hvbench makes itself.

- a container's cgroup: its path, read from its init (``cgroup_of``), its directory
  (``cgroup_dir``), its processes (``cgroup_procs``), the kernel memory charged to it
  (``cgroup_kernel_memory``);
- a platform's cgroup parent, in every hierarchy, in the ledger before anything makes it
  (``add_to_ledger``); an instance's own, with the limits of a VM of its size, for what sets
  none itself (``own_cgroup``); a process moved into one (``move``);
- the run's cgroup for the load generators that share the host with what they load (``Cgroup``).
  The consolidation post's clients ran on other machines; here they run on the peer, on the same
  host, so their CPU would count as the platform's. Every client joins a child of the run's
  cgroup before it execs, and the cgroup's ``cpu.stat`` (kept by the kernel for every v2 cgroup,
  no controller needed) says what all of them used: the host CPU monitor leaves it out of the
  platform's figure and shows it beside it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.host.cgroup_limits import CgroupLimits, CgroupVersion
from hvbench.host.resources import Ledger, Resource

CGROUPS = Path("/sys/fs/cgroup")
"""Where the cgroup hierarchies are mounted: the unified one, or v1's one directory each."""
V1_JOINED = ("cpu", "cpuacct", "memory", "pids", "systemd", "unified")
"""The hierarchies of a legacy or hybrid layout that a process in a cgroup of hvbench's own
joins: its limits', its accounting's, and systemd's and the unified one (where nspawn makes its
payload's cgroup, beside its own)."""
KERNEL_PARTS = ("kernel_stack", "pagetables", "sec_pagetables", "percpu", "slab", "vmalloc")
"""memory.stat's kernel-side fields, summed where ``kernel`` is missing (Linux < 5.18)."""


def cgroup_version() -> CgroupVersion:
    """2 on a unified hierarchy, 1 on a legacy or hybrid one (where runc and runsc use v1)."""
    return 2 if (CGROUPS / "cgroup.controllers").exists() else 1


def v2_root(mounts: str = "/proc/mounts") -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on a hybrid
    host)."""
    with open(mounts) as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    raise HvbenchError("clients' cgroup: no cgroup v2 hierarchy is mounted (mount -t cgroup2)")


# a container's cgroup ---------------------------------------------------------------------------


def cgroup_of(pid: int) -> str:
    """The cgroup path of process ``pid`` (a container's init): v1's cpuacct hierarchy's (where
    ``cgroup_procs`` reads a container's processes), or v2's; "" in neither. OSError if the
    process is gone."""
    v2 = cgroup_version() == 2
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(",") or (v2 and controllers == ""):
            return path
    return ""


def cgroup_dir(cgroups_path: str, controller: str) -> Path:
    """The container's cgroup directory (v1: in the controller's hierarchy)."""
    return CGROUPS / (controller if cgroup_version() == 1 else "") / cgroups_path.lstrip("/")


def cgroup_procs(cgroups_path: str) -> list[int]:
    """Host pids in the container's cgroup (v1: the cpuacct hierarchy)."""
    try:
        text = (cgroup_dir(cgroups_path, "cpuacct") / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def cgroup_kernel_memory(cgroups_path: str) -> int | None:
    """Bytes of kernel memory charged to the container's cgroup: its slab (dentries, inodes,
    namespaces, mounts), page tables, kernel stacks, percpu and vmalloc memory, and socket
    buffers; None if the cgroup is gone. v2: memory.stat's ``kernel`` and ``sock``; v1 (no
    such fields): the kmem counter, which holds the same charges, and the tcp one (which counts
    socket buffers only once a tcp limit is set)."""
    where = cgroup_dir(cgroups_path, "memory")
    try:
        if cgroup_version() == 2:
            return kernel_charge(parse_memory_stat((where / "memory.stat").read_text()))
        v1 = ("memory.kmem.usage_in_bytes", "memory.kmem.tcp.usage_in_bytes")
        return sum(int((where / name).read_text()) for name in v1)
    except OSError:
        return None


def parse_memory_stat(text: str) -> dict[str, int]:
    """cgroup v2's memory.stat: one "name bytes" a line."""
    return {name: int(value) for name, value in (line.split() for line in text.splitlines())}


def kernel_charge(stat: dict[str, int]) -> int:
    """Kernel memory in a v2 memory.stat: ``kernel`` (slab, stacks, page tables, percpu,
    vmalloc and the rest) plus ``sock``, which it leaves out. Kernels before 5.18 have no
    ``kernel``: the sum of the parts they list, which misses charges no field names."""
    kernel = stat.get("kernel")
    if kernel is None:
        kernel = sum(stat.get(part, 0) for part in KERNEL_PARTS)
    return kernel + stat.get("sock", 0)


# the cgroups hvbench makes ----------------------------------------------------------------------


def add_to_ledger(ledger: Ledger, path: str) -> list[Resource]:
    """The cgroup ``path`` (a platform's parent) in every hierarchy, in the ledger before
    anything makes it: its release removes it, children first."""
    hierarchies = [CGROUPS] if cgroup_version() == 2 else sorted(CGROUPS.iterdir())
    return [ledger.add("cgroup", str(hierarchy / path.lstrip("/"))) for hierarchy in hierarchies]


def _joined(path: str) -> list[Path]:
    """The directories of the cgroup ``path`` that a process joins (``V1_JOINED``, or the
    unified hierarchy's)."""
    path = path.lstrip("/")
    if cgroup_version() == 2:
        return [CGROUPS / path]
    return [CGROUPS / h / path for h in V1_JOINED if (CGROUPS / h).is_dir()]


def own_cgroup(path: str, limits: CgroupLimits, index: int) -> tuple[str, ...]:
    """Make the cgroup ``path`` (under the platform's parent) with instance ``index``'s
    ``limits``, for an engine that sets none itself (rootless Podman, nspawn without systemd);
    the argv prefix that starts a command inside it (the shell moves itself in, then execs the
    command)."""
    if limits.pin:
        raise HvbenchError(f"pin: true is not supported where hvbench makes the cgroup ({path})")
    version, path = cgroup_version(), path.lstrip("/")
    dirs = _joined(path)
    if version == 2:
        parent = dirs[0].parent
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text("+cpu +memory")
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for name, value in limits.files(version, index).items():
        hierarchy = CGROUPS if version == 2 else CGROUPS / name.split(".")[0]
        (hierarchy / path / name).write_text(value)
    join = " ".join(f"echo $$ > {shlex.quote(str(d))}/cgroup.procs;" for d in dirs)
    return ("sh", "-c", f'{join} exec "$@"', "sh")


def move(pid: int, path: str) -> None:
    """Move process ``pid`` into the cgroup ``path``, in every hierarchy a process of hvbench's
    cgroups joins."""
    for where in _joined(path):
        (where / "cgroup.procs").write_text(str(pid))


@dataclass(frozen=True)
class Cgroup:
    """One cgroup v2 directory of the run's own (the clients')."""

    path: Path

    @classmethod
    def make(cls, ledger: Ledger, name: str) -> Cgroup:
        """A new cgroup under the v2 root, recorded in the ledger (whose release kills what is
        left in it and removes it)."""
        path = v2_root() / name
        ledger.add("cgroup", str(path))
        path.mkdir(exist_ok=True)
        return cls(path)

    def child(self, name: str) -> Cgroup:
        """A child cgroup (removed with its parent)."""
        (self.path / name).mkdir(exist_ok=True)
        return Cgroup(self.path / name)

    def argv(self, argv: list[str]) -> list[str]:
        """argv run inside this cgroup: the shell moves itself in, then execs the command, so
        every process and thread the command makes is counted here from its first instant."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path), *argv]

    def cpu_seconds(self) -> dict[str, float]:
        """User and system CPU seconds of everything that ran in the cgroup since it was made."""
        stat = dict(
            line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        return {"user": int(stat["user_usec"]) / 1e6, "system": int(stat["system_usec"]) / 1e6}
