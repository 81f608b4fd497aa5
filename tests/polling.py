"""Waiting for a state in tests: polled against a deadline, never a fixed sleep, so that a
loaded host waits as long as it needs and an idle one no longer than the state takes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> T:
    """The predicate's first true answer, asked every ``interval`` seconds. After ``timeout``
    seconds an AssertionError says ``what`` never came about, with ``detail()`` (a log's tail,
    read only then). A predicate that sees the state can no longer come (the process that was
    to get there died) fails at once with an AssertionError of its own."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            said = f"; {detail()}" if detail else ""
            raise AssertionError(f"never within {timeout:g} s: {what}{said}")
        time.sleep(interval)


def sleeper(*args: str) -> subprocess.Popen[bytes]:
    """A Python process that sleeps for a minute, with ``args`` on its command line, returned
    once it runs: Popen returns as the exec begins, and until the kernel has set up the new
    program /proc/PID/cmdline reads empty (on a loaded host, for long enough that a test
    looking for it by its command line misses it; CI did, twice)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(60)", *args],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc
