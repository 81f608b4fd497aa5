"""Sizing a job so that it lasts a target time natively, as pyperf calibrates its loops: a job
far shorter than a second is timed by its start-up and its clock, not by its work.

Time a small job, grow it by what is missing (at most 20-fold a step, since start-up weighs on
small jobs), until a job lasts 90% of the target and a second at least, twice in a row: the
faster of the two counts, since a host busy for a moment during sizing would otherwise make
every job of the run too short. The workloads whose settings say ``auto`` (cpu apps' ``scale``,
dd's ``size``) size their jobs this way at the start of a run, natively on its host. A job that
cannot grow far enough (dd's file, bounded by what every data disk holds) is repeated within a
sample instead (``loops_to_last``), as pyperf repeats a benchmark's inner loop: never refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable

AUTO_TARGET_S = 1.5
"""How long a sized job lasts natively by default: at least a second when the host runs a
little faster than when it was sized."""
MIN_JOB_S = 1.0
"""The shortest job sizing accepts: a thousand ticks of a millisecond clock."""
ENOUGH = 0.9
"""Sizing stops at a job lasting 90% of the target or more, and at least MIN_JOB_S."""
STEPS = 8
"""Jobs timed at most, each up to 20 times the last: enough to grow any first job to any
target."""


def size_to_last(
    target_s: float,
    first: int,
    timed: Callable[[int], float],
    step: int = 1,
    most: int | None = None,
) -> tuple[int, float]:
    """The size of a job that lasts ``target_s`` (``timed(size)``: one job's seconds), in
    multiples of ``step`` from ``first``, and the seconds it lasted; at most ``most``, where a
    job cannot grow further (a disk's space), whatever it then lasts."""
    enough = max(MIN_JOB_S, ENOUGH * target_s)
    size = first
    seconds = 0.0
    for _ in range(STEPS):
        seconds = timed(size)
        if seconds >= enough:
            seconds = min(seconds, timed(size))
            if seconds >= enough:
                break
        if most is not None and size >= most:
            break
        grow = min(20.0, target_s / seconds)
        size = max(size + step, math.ceil(size * grow / step) * step)
        if most is not None:
            size = min(size, most)
    return size, seconds


LOOP_UNDER_S = MIN_JOB_S / ENOUGH
"""A job that cannot grow (at its ``most``) runs once a sample where it lasts this long: still a
second on a host 10% faster than at sizing. Its target's 90% is not asked of it: a second pass
doubles a sample's time, and dd's 2 GiB, 1.3-1.5 s a pass on the development host, doubled at
random from one run to the next (a default run's dd 1 min 29 s, the next 2 min 32 s)."""


def loops_to_last(target_s: float, seconds: float) -> int:
    """How many times in a row a job lasting ``seconds``, as long as it can be made, runs in
    one sample: once where that is at least LOOP_UNDER_S, else as often as lasts ``target_s``."""
    if seconds >= LOOP_UNDER_S:
        return 1
    return max(2, math.ceil(target_s / max(seconds, 1e-3)))
