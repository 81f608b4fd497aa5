"""A cgroup v2 of the run's own for the load generators that share the host with what they load.

The consolidation post's clients ran on other machines; here they run on the peer, on the same
host, so their CPU would count as the platform's. Every client joins a child of the run's
cgroup before it execs, and the cgroup's ``cpu.stat`` (kept by the kernel for every v2 cgroup,
no controller needed) says what all of them used: the host CPU monitor leaves it out of the
platform's figure and shows it beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.host.resources import Ledger


def v2_root(mounts: str = "/proc/mounts") -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on a hybrid
    host)."""
    with open(mounts) as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    raise HvbenchError("clients' cgroup: no cgroup v2 hierarchy is mounted (mount -t cgroup2)")


@dataclass(frozen=True)
class Cgroup:
    """One cgroup v2 directory."""

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
