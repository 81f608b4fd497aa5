"""Host CPU spent during a sample, split by state and by instance.

Two reads of /proc/stat and of each instance's process times, one before and one after the
measured part, cost well under a millisecond and nothing in between: the measuring thing does
not disturb the measured one. Where the instances run elsewhere or on a hypervisor of their own
(a remote libvirt host, Xen), the same two reads ask that host's accounting instead, a round
trip each, still outside the measured part.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from hvbench.store import HostCpuReading

STATES = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)
"""Columns of the ``cpu`` line of /proc/stat, in order (man 5 proc)."""
TICK = os.sysconf("SC_CLK_TCK")


def read_proc_stat(path: str = "/proc/stat") -> dict[str, float]:
    """Seconds per CPU state since boot, summed over all CPUs. ``user`` and ``nice`` exclude the
    guest time that the kernel also counts in them, so that the states add up to the total."""
    with open(path) as f:
        fields = f.readline().split()
    ticks = [int(x) for x in fields[1 : 1 + len(STATES)]]
    ticks += [0] * (len(STATES) - len(ticks))
    secs = {s: t / TICK for s, t in zip(STATES, ticks, strict=True)}
    secs["user"] -= secs["guest"]
    secs["nice"] -= secs["guest_nice"]
    return secs


@dataclass(frozen=True)
class HostCpuSource:
    """Where the host's CPU states are read: this machine's /proc/stat, or the accounting of the
    host the instances really run on (a remote libvirt host)."""

    read: Callable[[], dict[str, float]] = read_proc_stat
    """Seconds per state (STATES) since some fixed point, summed over the host's CPUs."""
    cores: int = psutil.cpu_count() or 1
    host: str | None = None
    """The other host's name; None for this one."""


LOCAL = HostCpuSource()


def _process_seconds(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system + t.children_user + t.children_system
    return out


@dataclass
class CpuMonitor:
    """Started by the first barrier of a sample, stopped when its tools end; ``stop`` returns
    the split. An instance's CPU is its host processes' time plus what its platform accounts
    for it apart from them (``accounted``: a Xen domain's vCPUs, a remote domain). The run's
    load generators (``clients``: their cgroup's user and system seconds) are taken out of the
    host's user and system time and reported apart: they are not the platform's cost."""

    pids_by_instance: list[list[int]]
    accounted: list[Callable[[], float | None]] = field(default_factory=list)
    source: HostCpuSource = LOCAL
    clients: Callable[[], dict[str, float] | None] = lambda: None
    _t0: float = 0.0
    _stat0: dict[str, float] = field(default_factory=dict)
    _proc0: list[dict[int, float]] = field(default_factory=list)
    _acct0: list[float | None] = field(default_factory=list)
    _clients0: dict[str, float] | None = None

    def start(self) -> None:
        """Mark the start; later calls are no-ops, as workloads may pass several barriers."""
        if self._t0:
            return
        self._t0 = time.monotonic()
        self._stat0 = self.source.read()
        self._proc0 = [_process_seconds(p) for p in self.pids_by_instance]
        self._acct0 = [read() for read in self.accounted]
        self._clients0 = self.clients()

    def stop(self) -> HostCpuReading:
        """The instances and clients are read before the host, as they were after it in
        ``start``: their window lies within the host's, so what the host counts holds what they
        used (reads that take seconds, as ``xl list`` in the nested Xen lab, would otherwise
        shift it out)."""
        wall = time.monotonic() - self._t0
        instances: list[float | None] = []
        for before, pids in zip(self._proc0, self.pids_by_instance, strict=True):
            after = _process_seconds(pids)
            common = before.keys() & after.keys()
            instances.append(sum(after[p] - before[p] for p in common) if common else None)
        for i, (read, before_s) in enumerate(zip(self.accounted, self._acct0, strict=True)):
            after_s = read()
            if before_s is not None and after_s is not None:
                instances[i] = (instances[i] or 0.0) + max(0.0, after_s - before_s)
        clients = self._clients_used()
        stat1 = self.source.read()
        states = {s: max(0.0, stat1[s] - self._stat0.get(s, stat1[s])) for s in STATES}
        for state, used in (clients or {}).items():
            states[state] = max(0.0, states[state] - used)
        busy = sum(v for k, v in states.items() if k not in ("idle", "iowait"))
        return HostCpuReading(
            wall, self.source.cores, states, busy, instances, clients, self.source.host
        )

    def _clients_used(self) -> dict[str, float] | None:
        """The clients' user and system seconds during the window; None without clients. Only
        on this host: a remote host's states never held them."""
        after = self.clients()
        if after is None or self.source.host:
            return None
        before = self._clients0 or dict.fromkeys(after, 0.0)
        return {s: max(0.0, after[s] - before.get(s, 0.0)) for s in after}
