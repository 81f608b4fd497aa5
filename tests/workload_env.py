"""Run a workload end to end on real instances without a study or a store: one sample through
the runner's own sample path (prepare, barrier, measure, cleanup)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from hvbench.drivers.base import Instance, Needs
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.runner import calibrate, run_sample
from hvbench.workloads.base import Context, Outcome, Workload
from hvbench.workloads.cpu_apps import CORPUS, CpuApps, CpuAppsSettings


@contextlib.contextmanager
def native_instances(
    count: int = 1, data_disk: bool = False, disk_size: str = "1G"
) -> Iterator[tuple[list[Instance], RunNetwork]]:
    """``count`` native instances in a run network of their own; everything released after."""
    root = Path(tempfile.mkdtemp(prefix="hvbench-wl-"))
    run_id = f"test-{uuid.uuid4().hex[:12]}"
    ledger = Ledger(run_id, root / "state")
    ledger.claim()
    network = RunNetwork(run_id, ledger)
    settings = NativeSettings(driver="native", disk={"size": disk_size})
    driver = NativeDriver("native", settings, Needs(data_disk=data_disk), ledger, network, root)
    try:
        instances = driver.start(count, time.monotonic() + 120).instances
        try:
            yield instances, network
        finally:
            driver.stop(instances)
    finally:
        ledger.release_all()
        shutil.rmtree(root, ignore_errors=True)


def run_workload(
    workload: Workload, instances: list[Instance], network: RunNetwork, quick: bool = True
) -> list[Outcome]:
    """One sample through the runner's own path (``runner.run_sample``); an instance's failure
    is raised as it was, for the tests to see its type."""
    run = run_sample(workload, instances, network, quick)
    if run.failure is not None:
        raise run.failure
    assert run.error is None, run.error
    return run.outcomes


__all__ = ["calibrate", "corpus_digest", "native_instances", "run_workload"]


def corpus_digest(instance: Instance) -> str:
    """sha256 of the corpus the cpu apps suite generates in ``instance`` at the --quick scale:
    the same bytes must come out on every platform."""
    workload = CpuApps(CpuAppsSettings(name="cpu"))
    ctx = Context(network=None, quick=True, instance_count=1)  # type: ignore[arg-type]
    try:
        workload.prepare(instance, ctx)
        path = f"{workload.scratch(instance)}/{CORPUS}"
        return instance.exec(["sha256sum", path], 120).text().split()[0]
    finally:
        workload.cleanup(instance, ctx)
