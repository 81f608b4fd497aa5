"""sizing: a job grown from a small one until it lasts its target, on jobs whose seconds follow
their size (a start-up plus a rate), as a program's or a disk's do."""

from __future__ import annotations

import pytest

from hvbench.workloads.sizing import MIN_JOB_S, loops_to_last, size_to_last


def job(start_s: float, per_unit_s: float, timings: list[int]):
    def timed(size: int) -> float:
        timings.append(size)
        return start_s + size * per_unit_s

    return timed


def test_a_job_grows_at_most_twentyfold_a_step_until_it_lasts_its_target_twice():
    timings: list[int] = []
    size, seconds = size_to_last(1.5, 1, job(0.01, 0.001, timings))
    assert timings[:3] == [1, 20, 400]  # start-up hides the rate: at most 20 times a step
    assert timings[-1] == timings[-2] == size  # the job that lasted long enough, timed twice
    assert seconds == pytest.approx(0.01 + size * 0.001) and seconds >= 0.9 * 1.5


def test_steps_and_most_bound_the_size_and_say_how_long_it_lasted():
    timings: list[int] = []
    size, seconds = size_to_last(1.5, 64, job(0.0, 0.001, timings), step=64, most=640)
    assert all(t % 64 == 0 for t in timings)
    assert size == 640 and seconds == pytest.approx(0.64)
    assert seconds < MIN_JOB_S
    assert timings == [64, 640]  # at most: no job beyond it, and no second try of a short one


def test_a_job_that_cannot_grow_loops_to_its_target():
    assert loops_to_last(1.5, 0.87) == 2  # the 2 GiB pass of an NVMe disk: twice a sample
    assert loops_to_last(1.5, 0.2) == 8
    assert loops_to_last(1.5, 1.4) == 1  # 90% of the target and over a second: enough
    assert loops_to_last(1.5, 1.3) == 1  # this host's 2 GiB pass: a second with 10% to spare
    assert loops_to_last(1.5, 1.05) == 2  # a second, but not on a host 10% faster
    assert loops_to_last(1.0, 0.95) == 2  # under MIN_JOB_S, whatever the target
    assert loops_to_last(1.5, 0.0) > 1000  # a job too short to time still loops, bounded
