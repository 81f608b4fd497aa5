"""run_bounded, the exec path of native and the host-side drivers: the timeout ends the whole
session, and waiting for a command costs nothing while it runs (a bare run has no watcher).
processes, which finds a process on a PID that another process had before."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from polling import sleeper, wait_for

from hvbench.errors import CommandTimeout
from hvbench.host.process import processes, run_bounded


def test_a_command_past_its_timeout_is_killed_with_what_it_started():
    started: list[int] = []
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        run_bounded(["sh", "-c", "sleep 300 & sleep 301"], timeout=1, on_start=started.append)
    assert time.monotonic() - t0 < 60  # killed at its timeout, not after the 301 s sleep

    def left() -> list[int]:
        return [p.pid for p in processes(["pid"]) if _alive_in(p, session=started[0])]

    # the killed background sleep is reaped by init
    wait_for(
        lambda: left() == [], 10, "the session's processes gone", detail=lambda: f"left: {left()}"
    )


def test_waiting_for_a_command_does_not_wake_up_while_it_runs():
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    result = run_bounded(["sleep", "2"], timeout=60)
    woke = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
    assert result.ok
    assert woke < 10, f"the waiting thread woke {woke} times in 2 s"


def _alive_in(p: psutil.Process, session: int) -> bool:
    try:
        return os.getsid(p.pid) == session and p.status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False


def _on_the_pid_of(pid: int) -> subprocess.Popen:
    """A sleeping process on ``pid``, which has just been freed: the kernel gives out the PID
    after ns_last_pid next (any process forked in between takes it first, hence the tries)."""
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        proc = sleeper("again")
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.communicate()
    raise AssertionError(f"50 processes forked and none got PID {pid} back")


def test_a_process_on_a_reused_pid_is_found():
    """psutil.process_iter skips such a process for one call once a Process object of the PID's
    first holder has looked (psutil issue 2601): the Xen driver missed a domain's device model
    that way in CI."""
    first = sleeper()
    stale = psutil.Process(first.pid)
    list(psutil.process_iter(["cmdline"]))
    first.kill()
    first.communicate()
    with _on_the_pid_of(first.pid) as second:
        try:
            assert not stale.is_running()
            found = [p.info["cmdline"] for p in processes(["cmdline"]) if p.pid == second.pid]
            assert found == [second.args]
        finally:
            second.kill()
