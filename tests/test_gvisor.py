"""The gVisor driver (runsc) for real, on both platforms this host runs: the host's network is
left alone, disk workloads reach the data disk, and a cpu, disk and net study runs through the
runner with nothing left behind."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil
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
from pydantic import ValidationError
from workload_env import run_workload

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.gvisor import GvisorDriver, GvisorSettings
from hvbench.errors import CommandTimeout
from hvbench.host.network import PREFIX
from hvbench.workloads.memory import Memory, MemorySettings
from hvbench.workloads.migration import dirtier

needs_runsc = pytest.mark.usefixtures("_runsc")


@pytest.fixture
def _runsc() -> None:
    verdict = GvisorDriver.check()
    require(verdict.ok, f"gVisor's runsc: {verdict.detail}")


def host_network() -> dict[str, str]:
    """What runsc's default network setup would change in the root namespace."""
    state = {
        "links": ["ip", "-o", "link"],
        "addresses": ["ip", "-o", "addr"],
        "routes": ["ip", "route"],
        "iptables": ["iptables-save"],
    }
    seen = {}
    for what, argv in state.items():
        try:
            out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        except FileNotFoundError:
            out = "(not installed)"
        seen[what] = "\n".join(
            line for line in out.splitlines() if not line.startswith("#")
        )  # iptables-save's comments carry a time stamp
    seen["ip_forward"] = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    return seen


def loop_sectors_written(device: str) -> int:
    return int(Path(f"/sys/block/{Path(device).name}/stat").read_text().split()[6])


def test_registered_and_platforms():
    assert DRIVERS["gvisor"] is GvisorDriver
    with pytest.raises(ValidationError, match="systrap"):
        GvisorSettings(driver="gvisor", platform="kvm")


def test_doctor_says_why_not_and_how(monkeypatch):
    monkeypatch.setattr(GvisorDriver, "runtime_binary", classmethod(lambda cls: None))
    missing = GvisorDriver.check()
    assert not missing.ok and "not installed" in missing.detail
    assert "--with-gvisor" in missing.fix
    # a cgo build of runsc dies here: a dynamic executable (any, e.g. ls) is refused
    monkeypatch.setattr(GvisorDriver, "runtime_binary", classmethod(lambda cls: "/bin/ls"))
    dynamic = GvisorDriver.check()
    assert not dynamic.ok and "dynamic" in dynamic.detail and "--with-gvisor" in dynamic.fix


@needs_runsc
@pytest.mark.guest
def test_network_disk_limits_and_timeouts(guest_run: GuestRun):
    before = host_network()
    settings = GvisorSettings(driver="gvisor", vcpus=1, memory="256M")
    needs = Needs(tools=frozenset({"iperf3"}), data_disk=True)
    d = GvisorDriver("g", settings, needs, guest_run.ledger, guest_run.network, guest_run.workdir)
    [inst] = d.start(1, time.monotonic() + 180).instances
    try:
        # gVisor's netstack owns the veth's address, inside the instance's own namespace
        addr = inst.exec(["ip", "-4", "-o", "addr"], 30).text()
        assert f"198.18.0.10/{PREFIX}" in addr
        assert (
            inst.exec(["uname", "-r"], 30).text().strip()
            != Path("/proc/sys/kernel/osrelease").read_text().strip()
        ), "commands must run on gVisor's kernel, not the host's"
        # the sandbox's host processes are in the instance's cgroup, limited to its size
        group = inst.cgroups_path.lstrip("/")
        cpu = Path("/sys/fs/cgroup/cpu") / group
        if cpu.exists():  # cgroup v1, as on this host
            assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "100000"
            mem = Path("/sys/fs/cgroup/memory") / group / "memory.limit_in_bytes"
            assert int(mem.read_text()) == 256 << 20
        assert inst.init is not None and inst.init.pid in inst.host_pids()
        # its memory: the Sentry's memory file holds what the application wrote to its tmpfs
        fill = ["sh", "-c", "head -c 33554432 /dev/zero > /tmp/fill"]
        assert inst.exec(fill, 60).ok
        [memory] = run_workload(Memory(MemorySettings(name="memory")), [inst], guest_run.network)
        m = {x.name: x.value for x in memory.metrics}
        assert 32 <= m["memory.guest_ram_mib"] < 48, "the 32 MiB written, the programs it ran"
        assert 0 < m["memory.kernel_mib"] < 16
        assert 1 < m["memory.overhead_mib"] < 128, "the Sentry's and gofer's own memory"
        # the sandbox's processes: Sentry, gofer and the stubs (which unmapped their command
        # line), not a runsc command that came and went
        names = {(psutil.Process(p).cmdline() or [""])[0] for p in inst.host_pids()}
        assert names == {"runsc-sandbox", "runsc-gofer", ""}
        # what a disk workload writes reaches the data disk, not the sandbox's memory
        assert inst.data_disk is not None and inst.data_disk.mountpoint == DATA_MOUNT
        device = inst.data_disk.device
        written = loop_sectors_written(device)
        target = f"{DATA_MOUNT}/probe"
        dd = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=32", "conv=fsync"]
        assert inst.exec(dd, 120).ok
        assert loop_sectors_written(device) - written >= 32 * 2048
        assert (guest_run.workdir / inst.name / "data" / "probe").stat().st_size == 32 << 20
        # a command past its timeout is killed inside the sandbox, and the sandbox lives on
        with pytest.raises(CommandTimeout):
            inst.exec(["sh", "-c", "sleep 300 & sleep 301"], timeout=3)
        left = inst.exec(["ps", "-o", "args"], 30).text()
        assert "sleep 30" not in left
        info = d.describe()["resolved"]
        assert info["platform"] == "systrap" and info["overlay"].startswith("none")
        assert host_network() == before
    finally:
        d.stop([inst])
    assert not inst.alive()
    assert host_network() == before


@needs_runsc
@pytest.mark.guest
def test_checkpoint_migrates_and_restores_a_running_sandbox(guest_run: GuestRun):
    """runsc checkpoint and restore, as a migration and as a snapshot (oslevel_checks); what
    `runsc exec` started is killed by a restore."""
    settings = GvisorSettings(driver="gvisor", vcpus=1, memory="256M")
    needs = Needs(tools=frozenset({str(dirtier())}), data_disk=True)
    d = GvisorDriver("g", settings, needs, guest_run.ledger, guest_run.network, guest_run.workdir)
    checkpoint_moves_and_restores(d, guest_run, exec_killed=True)


@needs_runsc
@pytest.mark.guest
def test_cpu_disk_net_study_on_both_platforms_and_nothing_left():
    before = host_network()
    store, run_id = run_study(
        "  systrap: {driver: gvisor, platform: systrap, vcpus: 1, memory: 256M}\n"
        "  ptrace: {driver: gvisor, platform: ptrace, vcpus: 1, memory: 256M}\n"
    )
    assert failures(store, run_id) == []
    values = metric_values(store, run_id)
    for name in EXPECTED:
        assert len(values[name]) == 2 and all(v > 0 for v in values[name]), name
    platforms = {c.platform: c.platform_settings["resolved"] for c in store.cells(run_id)}
    assert {c.platform: c.ran.mode for c in store.cells(run_id)} == {
        "systrap": "systrap",
        "ptrace": "ptrace",
    }
    assert platforms["systrap"]["platform"] == "systrap"
    assert platforms["ptrace"]["platform"] == "ptrace"
    assert "bind-mounted" in json.dumps(platforms)
    assert container_leftovers(run_id) == []
    assert host_network() == before


@needs_runsc
@pytest.mark.guest
def test_sigkilled_run_is_cleaned_up(tmp_path):
    killed_run_is_cleaned_up("{driver: gvisor, memory: 256M}", tmp_path)
