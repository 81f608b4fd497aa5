"""disk bonnie++: the CSV parser against real output (ext4, tmpfs "+++++", killed) and a quick
run on native's data disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from workload_env import native_instances, run_workload

from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.bonnie import Bonnie, BonnieSettings, parse_bonnie_csv

FIX = Path(__file__).parent / "fixtures" / "bonnie++"


def by_name(metrics):
    return {m.name: m for m in metrics}


def test_ext4_table():
    m = by_name(parse_bonnie_csv((FIX / "ext4.csv").read_text()))
    assert m["disk.bonnie.seq_output_char_kbps"].value == 826
    assert m["disk.bonnie.seq_output_char_cpu_pct"].value == 62
    assert m["disk.bonnie.seq_output_block_kbps"].value == 242501
    assert m["disk.bonnie.seq_output_block_kbps"].unit == "KiB/s"
    assert m["disk.bonnie.seq_input_char_kbps"].value == 2010
    assert m["disk.bonnie.seq_output_char_latency_us"].value == 86498
    assert not m["disk.bonnie.seq_output_char_cpu_pct"].higher_is_better
    assert len(m) == 12 * 3


def test_too_fast_is_text_not_a_number():
    m = by_name(parse_bonnie_csv((FIX / "tmpfs.csv").read_text()))
    block = m["disk.bonnie.seq_output_block_kbps"]
    assert block.value is None and block.text == "+++++"
    assert m["disk.bonnie.seq_output_block_cpu_pct"].text == "+++"
    assert m["disk.bonnie.random_delete_per_s"].text == "+++++"
    assert m["disk.bonnie.seq_output_char_kbps"].value == 1550


def test_killed_and_garbage():
    with pytest.raises(ParseError, match="no CSV result line"):
        parse_bonnie_csv((FIX / "killed.csv").read_text())
    with pytest.raises(ParseError, match="fields"):
        parse_bonnie_csv("1.98,2.00a,x,1")
    line = (FIX / "ext4.csv").read_text().replace(",826,", ",garbage,")
    with pytest.raises(ParseError, match="seq_output_char"):
        parse_bonnie_csv(line)


def test_default_tool_and_size():
    assert workload_class("disk", None) is Bonnie
    w = Bonnie(BonnieSettings(name="disk", size="4G"))
    assert w.settings.label() == "disk bonnie++ size=4G"
    assert w.estimate_seconds(quick=True) < w.estimate_seconds(quick=False)
    with pytest.raises(ValueError):
        BonnieSettings(name="disk", size="four gigs")


def test_quick_run_on_native_data_disk():
    with native_instances(1, data_disk=True, disk_size="1G") as (instances, network):
        (outcome,) = run_workload(Bonnie(BonnieSettings(name="disk")), instances, network)
        assert instances[0].exec(["ls", instances[0].data_disk.mountpoint], 10).text().split() == [
            "lost+found"
        ]
    m = by_name(outcome.metrics)
    assert (
        m["disk.bonnie.seq_output_block_kbps"].value or m["disk.bonnie.seq_output_block_kbps"].text
    )
    assert "-s" in outcome.raw[0].command and "64" in outcome.raw[0].command
