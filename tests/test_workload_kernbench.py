"""kernbench: GNU time lines from real builds, the summary, and a quick build on native."""

from __future__ import annotations

from pathlib import Path

import pytest
from workload_env import native_instances, run_workload

from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.kernbench import (
    Kernbench,
    KernbenchSettings,
    parse_time_line,
    summarise,
)

FIX = Path(__file__).parent / "fixtures" / "kernbench"


def test_time_line_of_a_real_build():
    got = parse_time_line((FIX / "subcmd.txt").read_text())
    assert got == {
        "elapsed_s": 1.27,
        "user_s": 0.76,
        "system_s": 0.11,
        "cpu_pct": 69,
        "context_switches": 528,
        "sleeps": 225,
    }


def test_killed_make_and_garbage():
    # GNU time still reports a make killed half-way (the exit code fails the cell)
    assert parse_time_line((FIX / "make-killed.txt").read_text())["elapsed_s"] == 0.81
    with pytest.raises(ParseError, match="GNU time line"):
        parse_time_line("make: *** [Makefile:12: all] Error 2\n")


def test_summary_mean_and_sd():
    runs = [parse_time_line((FIX / "subcmd.txt").read_text()) for _ in range(2)]
    runs[1] = {k: v * 2 for k, v in runs[1].items()}
    m = {x.name: x for x in summarise(runs[0], runs)}
    assert m["kernbench.cold.elapsed_s"].value == 1.27
    assert m["kernbench.warm.run2.elapsed_s"].value == 2.54
    assert m["kernbench.warm.elapsed_s"].value == pytest.approx(1.905)
    assert m["kernbench.warm.elapsed_s_sd"].value == pytest.approx(0.898025, rel=1e-5)
    assert m["kernbench.warm.sleeps"].unit == "count"


def test_settings():
    assert workload_class("kernbench", None) is Kernbench
    assert Kernbench.needs_userland and not Kernbench.needs_data_disk
    w = Kernbench(KernbenchSettings(name="kernbench"))
    assert w.estimate_seconds(quick=True) < 60 < w.estimate_seconds(quick=False)


def test_quick_build_on_native():
    with native_instances(1) as (instances, network):
        w = Kernbench(KernbenchSettings(name="kernbench", jobs=2))
        (outcome,) = run_workload(w, instances, network)
        assert not w._trees
    m = {x.name: x for x in outcome.metrics}
    assert m["kernbench.cold.elapsed_s"].value > 0
    assert m["kernbench.warm.user_s"].value > 0
    assert "kernbench.warm.run2.sleeps" in m
    assert len(outcome.raw) == 3 and outcome.raw[0].command[0] == "/usr/bin/time"
