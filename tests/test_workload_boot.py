"""boot on native: there is no boot, which is said in the metrics, and the cell succeeds."""

from __future__ import annotations

from workload_env import native_instances, run_workload

from hvbench.workloads import workload_class
from hvbench.workloads.boot import NO_BOOT, PHASES, Boot, BootSettings


def test_native_has_no_boot_and_says_so():
    assert workload_class("boot", None) is Boot
    with native_instances(1) as (instances, network):
        (outcome,) = run_workload(Boot(BootSettings(name="boot")), instances, network)
    assert [m.name for m in outcome.metrics] == [f"boot.{p}_s" for p in PHASES]
    assert all(m.value is None and m.text == NO_BOOT for m in outcome.metrics)
    assert NO_BOOT in outcome.raw[0].content
