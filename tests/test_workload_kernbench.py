"""kernbench: hvbench-clock lines from real builds, the summary, and a quick build on native."""

from __future__ import annotations

from pathlib import Path

import pytest
from workload_env import native_instances, run_workload

from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.kernbench import (
    Kernbench,
    KernbenchSettings,
    parse_build,
    summarise,
)

FIX = Path(__file__).parent / "fixtures" / "kernbench"


def test_fields_of_a_real_build():
    got = parse_build((FIX / "subcmd.txt").read_text())
    assert got == pytest.approx(
        {
            "elapsed_s": 1188.496186249 - 1186.723407050,
            "user_s": 0.806319,
            "system_s": 0.110058,
            "cpu_pct": 100 * (0.806319 + 0.110058) / (1188.496186249 - 1186.723407050),
            "context_switches": 305,
            "sleeps": 219,
        }
    )


def test_killed_make_and_garbage():
    # hvbench-clock still reports a make killed half-way (the exit code fails the cell)
    killed = (FIX / "make-killed.txt").read_text()
    assert "status=137" in killed
    assert parse_build(killed)["elapsed_s"] == pytest.approx(0.803476367)
    with pytest.raises(ParseError, match="no hvbench-clock line"):
        parse_build("make: *** [Makefile:12: all] Error 2\n")


def test_summary_mean_and_sd():
    runs = [parse_build((FIX / "subcmd.txt").read_text()) for _ in range(2)]
    runs[1] = {k: v * 2 for k, v in runs[1].items()}
    elapsed = runs[0]["elapsed_s"]
    m = {x.name: x for x in summarise(runs[0], runs)}
    assert m["kernbench.cold.elapsed_s"].value == elapsed
    assert m["kernbench.warm.run2.elapsed_s"].value == 2 * elapsed
    assert m["kernbench.warm.elapsed_s"].value == pytest.approx(1.5 * elapsed)
    assert m["kernbench.warm.elapsed_s_sd"].value == pytest.approx(elapsed / 2**0.5)
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
    assert len(outcome.raw) == 3 and "hvbench-clock" in outcome.raw[0].command[0]
