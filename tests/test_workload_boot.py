"""boot on native: there is no boot, which is said in the metrics, and the cell succeeds; a boot
storm of TCG guests through the runner: the cell's figures, on its first instance only."""

from __future__ import annotations

import pytest
from workload_env import native_instances, run_workload

from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads import workload_class
from hvbench.workloads.boot import NO_BOOT, PHASES, STORM, Boot, BootSettings


def test_native_has_no_boot_and_says_so():
    assert workload_class("boot", None) is Boot
    with native_instances(1) as (instances, network):
        (outcome,) = run_workload(Boot(BootSettings(name="boot")), instances, network)
    assert [m.name for m in outcome.metrics] == [f"boot.{p}_s" for p in PHASES]
    assert all(m.value is None and m.text == NO_BOOT for m in outcome.metrics)
    assert NO_BOOT in outcome.raw[0].content


def test_native_storm_through_the_runner_says_no_boot():
    study = "name: s\nplatforms: {native: {driver: native}}\nworkloads: [{name: boot}]\n"
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(study, "s.yaml"), quick=True))
    assert session.run().status == "finished"
    storm = {r.name: r for r in store.metric_rows(session.run_id) if ".storm." in r.name}
    assert sorted(storm) == sorted(f"boot.storm.{n}" for n in STORM)
    assert all(r.value is None and r.text == NO_BOOT for r in storm.values())


STORM_STUDY = """\
name: storm
platforms:
  tcg: {driver: qemu, accel: tcg, machine: microvm, memory: 128M, nic: none, instances: [4]}
workloads:
  - {name: boot}
"""


@pytest.mark.guest
def test_storm_of_four_tcg_guests():
    store = Store()
    session = RunSession.preflight(
        store, NewRun(parse_study(STORM_STUDY, "storm.yaml"), quick=True)
    )
    assert session.run().status == "finished"
    rows = store.metric_rows(session.run_id)
    ready = sorted(r.value for r in rows if r.name == "boot.ready_s")
    assert len(ready) == 4
    storm = {r.name: r for r in rows if r.name.startswith("boot.storm.")}
    assert sorted(storm) == sorted(f"boot.storm.{n}" for n in STORM)
    assert {r.instance for r in storm.values()} == {0}, "per cell: on the first instance only"
    v = {name: r.value for name, r in storm.items()}
    assert v["boot.storm.failed"] == 0
    assert ready[0] <= v["boot.storm.ready_p50_s"] <= v["boot.storm.ready_p99_s"] <= ready[-1]
    assert v["boot.storm.ready_p99_s"] > (ready[-2] + ready[-1]) / 2 - 1e-3  # near the slowest
    # the wall time until all four answer covers every instance's own boot
    assert v["boot.storm.all_ready_s"] >= ready[-1]
