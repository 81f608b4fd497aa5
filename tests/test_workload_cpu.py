"""cpu: parsers against real stress-ng and sysbench output, and a quick run on native."""

from __future__ import annotations

from pathlib import Path

import pytest
from workload_env import native_instances, run_workload

from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.cpu import PARTS, SUB_SCORES, Cpu, CpuSettings, parse_stress_ng

FIX = Path(__file__).parent / "fixtures"
PART = {p.key: p for p in PARTS}


def test_stress_ng_yaml_rates():
    assert PART["integer"].parse((FIX / "stress-ng/zlib.yaml").read_text()) == 136.529847
    assert PART["float"].parse((FIX / "stress-ng/matrix.yaml").read_text()) == 1407.935298


def test_stress_ng_wrong_stressor_and_truncated_report():
    text = (FIX / "stress-ng/zlib.yaml").read_text()
    with pytest.raises(ParseError, match="no metrics for the matrix"):
        parse_stress_ng(text, "matrix")
    with pytest.raises(ParseError, match="no metrics"):
        parse_stress_ng(text[: text.index("metrics:")], "zlib")
    with pytest.raises(ParseError):
        parse_stress_ng("{{{ not yaml", "zlib")


def test_sysbench_rates():
    assert PART["memory"].parse((FIX / "sysbench/memory.txt").read_text()) == 20020.90
    assert PART["branchy"].parse((FIX / "sysbench/cpu.txt").read_text()) == 2506.43


def test_sysbench_killed_half_way_is_a_parse_error():
    with pytest.raises(ParseError, match="summary not found"):
        PART["branchy"].parse((FIX / "sysbench/cpu-killed.txt").read_text())


def test_settings_and_estimate():
    assert workload_class("cpu", "micro") is Cpu
    w = Cpu(CpuSettings(name="cpu", integer={"duration": 10}))
    assert w.estimate_seconds(quick=False) == 10 + 60 + 30 + 60 + 4 * 1.0
    assert w.estimate_seconds(quick=True) < 15
    with pytest.raises(ValueError):
        CpuSettings(name="cpu", memory={"duration": -1})


def test_quick_run_on_native():
    with native_instances(1) as (instances, network):
        (outcome,) = run_workload(Cpu(CpuSettings(name="cpu")), instances, network)
    assert [m.name for m in outcome.metrics] == list(SUB_SCORES)
    assert all(m.value and m.value > 0 and m.higher_is_better for m in outcome.metrics)
    assert len(outcome.raw) == 4
    assert "stress-ng" in outcome.raw[0].command
