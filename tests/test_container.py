"""The container driver (runc) for real: limits, control channel, clean-up, and a cpu, disk and
net study through the runner."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import require
from guest_fixtures import GuestRun
from oslevel_checks import (
    EXPECTED,
    checkpoint_moves_and_restores,
    container_leftovers,
    failures,
    killed_run_is_cleaned_up,
    metric_values,
    run_study,
)
from polling import wait_for

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.container import ContainerDriver, ContainerSettings, criu
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.errors import CommandTimeout
from hvbench.host.network import PREFIX
from hvbench.workloads.migration import dirtier

needs_runc = pytest.mark.usefixtures("_runc")


@pytest.fixture
def _runc() -> None:
    require(ContainerDriver.check().ok, "runc (apt-get install runc)")


def test_registered_and_doctor_says_how_to_fix(monkeypatch):
    assert DRIVERS["container"] is ContainerDriver
    monkeypatch.setattr(ContainerDriver, "runtime_binary", classmethod(lambda cls: None))
    verdict = ContainerDriver.check()
    assert not verdict.ok and verdict.fix == "apt-get install runc"


@needs_runc
@pytest.mark.guest
def test_limits_channel_and_disk(guest_run: GuestRun):
    settings = ContainerSettings(driver="container", vcpus=1, memory="192M", pin=True)
    needs = Needs(tools=frozenset({"iperf3"}), data_disk=True)
    d = ContainerDriver(
        "c", settings, needs, guest_run.ledger, guest_run.network, guest_run.workdir
    )
    insts = d.start(2, time.monotonic() + 120).instances
    try:
        assert [i.address for i in insts] == ["198.18.0.10", "198.18.0.11"]
        for inst in insts:
            group = inst.cgroups_path.lstrip("/")
            cpu = Path("/sys/fs/cgroup/cpu") / group
            mem = Path("/sys/fs/cgroup/memory") / group
            if cpu.exists():  # cgroup v1, as on this host
                assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "100000"
                assert int((mem / "memory.limit_in_bytes").read_text()) == 192 << 20
            # the command runs inside the limits, on its own core, in its own namespace
            assert inst.exec(["nproc"], 30).text().strip() == "1"
            cgroup = inst.exec(["cat", "/proc/self/cgroup"], 30).text()
            assert inst.container_id in cgroup
            addr = inst.exec(["ip", "-4", "-o", "addr", "show", "eth0"], 30).text()
            assert f"{inst.address}/{PREFIX}" in addr
            assert inst.exec(["ping", "-c", "1", "-W", "5", "198.18.0.1"], 30).ok
            assert inst.data_disk is not None and inst.data_disk.mountpoint == DATA_MOUNT
            df = inst.exec(["df", "-P", DATA_MOUNT], 30).text().splitlines()[-1].split()
            assert df[0].startswith("/dev/loop") and int(df[1]) > 1_500_000
            assert inst.host_pids() and inst.alive()
            assert (inst.kernel_memory() or 0) > 0, "its cgroup's kernel charge: its overhead"
        # a command past its timeout is killed with what it started, and the container lives on
        with pytest.raises(CommandTimeout):
            insts[0].exec(["sh", "-c", "sleep 300 & sleep 301"], timeout=2)
        ps = ["ps", "-o", "args"]
        wait_for(lambda: "sleep 30" not in insts[0].exec(ps, 30).text(), 10, "both sleeps gone")
        resolved = d.describe()["resolved"]
        assert resolved["runtime"] == "runc"
        assert resolved["cgroup"]["memory"] == f"{192 << 20} bytes, no swap"
    finally:
        d.stop(insts)
    assert not any(i.alive() for i in insts)
    assert [i.kernel_memory() for i in insts] == [None, None], "the cgroups went with them"


@needs_runc
@pytest.mark.guest
def test_what_the_platform_resolves_serves_every_group_until_close(guest_run: GuestRun):
    """A driver lives as long as its platform in the run: the tree it unpacked and the runtime's
    state directory serve one group of instances after another, and go at ``close``."""
    settings = ContainerSettings(driver="container", memory="128M")
    d = ContainerDriver(
        "c", settings, Needs(), guest_run.ledger, guest_run.network, guest_run.workdir
    )
    roots = set()
    for count in (1, 2):
        insts = d.start(count, time.monotonic() + 120).instances
        roots |= {inst.root for inst in insts}
        assert all(inst.driver is d for inst in insts)
        d.stop(insts)
    held = [r.name for r in d.resources]
    assert len(roots) == 1 and roots < set(held), "one unpacked tree for both groups"
    assert all(Path(name).is_dir() for name in held), "a group's stop leaves them"
    d.close()
    assert d.resources == [] and not any(Path(name).exists() for name in held)
    assert not set(held) & {r.name for r in guest_run.ledger.live}


@needs_runc
@pytest.mark.guest
def test_checkpoint_migrates_and_restores_a_running_container(guest_run: GuestRun):
    """runc checkpoint and restore with CRIU 4.1 (scripts/install-criu.sh), as a migration and
    as a snapshot (oslevel_checks); the CRIU used is in the platform's description."""
    require(criu() is not None, "CRIU 4.1 or later (./setup.sh --with-criu)")
    settings = ContainerSettings(driver="container", vcpus=1, memory="256M")
    needs = Needs(tools=frozenset({str(dirtier())}), data_disk=True)
    d = ContainerDriver(
        "c", settings, needs, guest_run.ledger, guest_run.network, guest_run.workdir
    )
    checkpoint_moves_and_restores(d, guest_run, exec_killed=False)
    assert d.describe()["resolved"]["criu"].startswith("4.")


@needs_runc
@pytest.mark.guest
def test_cpu_disk_net_study_and_nothing_left():
    # two groups (1 then 2 instances) of one platform share the unpacked tree of the run
    store, run_id = run_study("  c: {driver: container, vcpus: 1, memory: 256M}\n", "1, 2")
    assert failures(store, run_id) == []
    values = metric_values(store, run_id)
    for name in EXPECTED:
        assert len(values[name]) == 3 and all(v > 0 for v in values[name]), name
    cell = store.cells(run_id)[0]
    assert cell.platform_settings["resolved"]["runtime"] == "runc"
    assert "bind-mounted" in json.dumps(cell.platform_settings)
    assert container_leftovers(run_id) == []


@needs_runc
@pytest.mark.guest
def test_sigkilled_run_is_cleaned_up(tmp_path):
    killed_run_is_cleaned_up("{driver: container, memory: 256M}", tmp_path)
