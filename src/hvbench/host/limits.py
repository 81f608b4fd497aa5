"""The kernel's limits on what a group of instances takes besides memory: tasks and namespaces.

Every instance holds host tasks (a VMM's threads, a container's processes, hvbench's own thread
for it while a sample runs), and native and the OS-level drivers hold namespaces. A group larger
than these limits fails half-started, with an error from deep inside ``clone`` or ``ip netns``;
checked before a run starts anything, it is one line naming the limit and the fix.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from hvbench.host.process import processes


@dataclass(frozen=True)
class KernelLimits:
    """This host's limits on tasks and namespaces, and what is in use now."""

    pid_max: int
    """kernel.pid_max: every task (thread) takes a pid."""
    threads_max: int
    """kernel.threads-max: tasks on the host at once."""
    tasks: int
    """Tasks on the host now."""
    nproc: int | None
    """RLIMIT_NPROC (soft): tasks this user may hold; None where the kernel does not apply it
    (root, whose forks it does not check, or no limit)."""
    user_tasks: int
    """Tasks of this user now (0 where ``nproc`` is None: not counted)."""
    net_namespaces: int
    """user.max_net_namespaces: network namespaces this user may hold."""
    pid_namespaces: int
    """user.max_pid_namespaces."""

    def misfits(self, count: int, tasks: int, net: int, pid: int) -> list[str]:
        """What ``count`` instances of ``tasks`` tasks, ``net`` network and ``pid`` PID
        namespaces each need beyond these limits: one line each, with the largest count that
        fits and the setting to raise."""
        checks = [
            (tasks, "host tasks (threads)", self.pid_max - self.tasks,
             f"free pids (kernel.pid_max {self.pid_max}, {self.tasks} in use)",
             "raise kernel.pid_max (sysctl)"),
            (tasks, "host tasks (threads)", self.threads_max - self.tasks,
             f"free tasks (kernel.threads-max {self.threads_max}, {self.tasks} in use)",
             "raise kernel.threads-max (sysctl)"),
            (net, "network namespaces", self.net_namespaces, "(user.max_net_namespaces)",
             "raise user.max_net_namespaces (sysctl)"),
            (pid, "PID namespaces", self.pid_namespaces, "(user.max_pid_namespaces)",
             "raise user.max_pid_namespaces (sysctl)"),
        ]  # fmt: skip
        if self.nproc is not None:
            checks.append(
                (tasks, "tasks of this user", self.nproc - self.user_tasks,
                 f"free (RLIMIT_NPROC {self.nproc}, {self.user_tasks} in use)",
                 "raise it (ulimit -u)")
            )  # fmt: skip
        out = []
        for each, what, room, limit, fix in checks:
            room = max(0, room)
            if each and count * each > room:
                out.append(
                    f"{count} instances × {each} {what} need {count * each}, the host has "
                    f"{room} {limit}: at most {room // each} instances, or {fix}"
                )
        return out


def _read_int(path: str) -> int:
    return int(Path(path).read_text().split()[0])


def kernel_limits() -> KernelLimits:
    """This host's limits and use, read now (cheap: a few files under /proc)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = None if os.geteuid() == 0 or soft == resource.RLIM_INFINITY else soft
    uid = os.getuid()
    user_tasks = 0
    if nproc is not None:
        for proc in processes(["uids", "num_threads"]):
            if proc.info["uids"] and proc.info["uids"].real == uid:
                user_tasks += proc.info["num_threads"] or 0
    return KernelLimits(
        pid_max=_read_int("/proc/sys/kernel/pid_max"),
        threads_max=_read_int("/proc/sys/kernel/threads-max"),
        tasks=int(Path("/proc/loadavg").read_text().split()[3].split("/")[1]),
        nproc=nproc,
        user_tasks=user_tasks,
        net_namespaces=_read_int("/proc/sys/user/max_net_namespaces"),
        pid_namespaces=_read_int("/proc/sys/user/max_pid_namespaces"),
    )
