"""run_bounded, the exec path of native and the host-side drivers: the timeout ends the whole
session, and waiting for a command costs nothing while it runs (a bare run has no watcher)."""

from __future__ import annotations

import os
import resource
import time

import psutil
import pytest
from polling import wait_for

from hvbench.errors import CommandTimeout
from hvbench.host.process import run_bounded


def test_a_command_past_its_timeout_is_killed_with_what_it_started():
    started: list[int] = []
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        run_bounded(["sh", "-c", "sleep 300 & sleep 301"], timeout=1, on_start=started.append)
    assert time.monotonic() - t0 < 5

    def left() -> list[int]:
        return [p.pid for p in psutil.process_iter() if _alive_in(p, session=started[0])]

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
