"""Waiting for a state in tests: polled against a deadline, never a fixed sleep, so that a
loaded host waits as long as it needs and an idle one no longer than the state takes."""

from __future__ import annotations

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
