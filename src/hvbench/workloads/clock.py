"""The clock every timed job inside an instance is measured with: ``hvbench-clock`` (clock.c),
a static helper that runs a command and writes its monotonic start and end (nanoseconds), the
clock's effective resolution, and the CPU time and context switches of what it ran.

The same binary times the job natively and in every guest, so "% of native" divides figures
taken by one clock, at a millisecond or better (busybox's ``/proc/uptime`` ticks every 10 ms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hvbench.workloads.base import ParseError
from hvbench.workloads.helpers import static_helper

_LINE = re.compile(
    r"status=(\d+) start=([0-9.]+) end=([0-9.]+) resolution=([0-9.]+) user=([0-9.]+) "
    r"system=([0-9.]+) voluntary=(\d+) involuntary=(\d+)"
)
FINE_ENOUGH_S = 0.001
"""The coarsest clock a job may be timed with: a millisecond."""


def clock() -> Path:
    """hvbench-clock, built once into the image cache."""
    return static_helper("hvbench-clock", "clock.c")


@dataclass(frozen=True)
class Timing:
    """One command as hvbench-clock timed it."""

    status: int
    start: float
    end: float
    resolution: float
    """Seconds: the smallest step the clock can show (the larger of its declared resolution
    and the smallest step seen between two readings)."""
    user: float
    system: float
    voluntary: int
    involuntary: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def cpu_seconds(self) -> float:
        return self.user + self.system

    def rate_resolution(self, rate: float) -> float:
        """The smallest change of ``rate`` (work over these seconds) the clock can show."""
        return rate * self.resolution / self.seconds


def parse_timing(text: str, what: str) -> Timing:
    """The last hvbench-clock line in ``text``, checked: a job must be longer than its clock's
    resolution and timed by a clock of a millisecond or better."""
    found = _LINE.findall(text)
    if not found:
        raise ParseError(f"{what}: no hvbench-clock line in {text.strip()[-120:]!r}")
    status, start, end, res, user, system, vol, invol = found[-1]
    timing = Timing(
        int(status), float(start), float(end), float(res), float(user), float(system),
        int(vol), int(invol),
    )  # fmt: skip
    if timing.resolution > FINE_ENOUGH_S:
        raise ParseError(
            f"{what}: the instance's monotonic clock steps by {timing.resolution * 1e3:.1f} ms, "
            "coarser than 1 ms; give the guest a finer clocksource (tsc, kvm-clock, hpet)"
        )
    if timing.seconds <= timing.resolution:
        raise ParseError(
            f"{what}: took {timing.seconds:.9f} s, within its clock's resolution; raise its work"
        )
    return timing
