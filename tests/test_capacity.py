"""What a study's instances hold on the host (memory, tasks, namespaces, addresses, the cores to
start them), checked before a run starts any; and how long a study takes, on this host and on
one whose KVM runs stock guests."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hvbench import plan
from hvbench.drivers import DRIVERS
from hvbench.drivers.footprint import Pace
from hvbench.drivers.native import FOOTPRINT as NATIVE
from hvbench.drivers.qemu_machine import TCG_PACE
from hvbench.host.limits import KernelLimits, kernel_limits
from hvbench.plan import SAMPLE_TASKS, HostCapacity
from hvbench.store import Store
from hvbench.study import default_study, parse_study
from hvbench.workloads import workload_of
from hvbench.workloads.dd import DdSettings
from hvbench.workloads.iperf3 import Iperf3Settings
from hvbench.workloads.memory import MemorySettings

ROOMY = KernelLimits(
    pid_max=4_194_304,
    threads_max=1_000_000,
    tasks=500,
    nproc=None,
    user_tasks=0,
    net_namespaces=100_000,
    pid_namespaces=100_000,
)
"""A large server's limits, so that each test trips only the limit it is about."""
HOST = HostCapacity(memory=24 << 30, cores=2, kvm=False, limits=ROOMY)
"""Memory and cores of the 2-core development host, whose KVM runs no stock guest."""


def study(platform: str, count: int, workload: str = "{name: boot}") -> str:
    return (
        f"name: capacity\nbaseline: p\nplatforms:\n  p: {{{platform}, instances: [{count}]}}\n"
        f"workloads:\n  - {workload}\n"
    )


def misfits(platform: str, count: int, limits: KernelLimits = ROOMY) -> list[str]:
    return plan.misfits(parse_study(study(platform, count), "s.yaml"), replace(HOST, limits=limits))


def hvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hvbench", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_100000_native_instances_are_refused_by_run_and_warned_by_check(tmp_path):
    file = tmp_path / "big.yaml"
    file.write_text(study("driver: native", 100_000))
    db = f"sqlite:///{tmp_path}/results.db"
    run = hvbench("run", str(file), "--db", db)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1, run.stderr  # one line, no traceback
    assert "cannot run on this host: platform p: 100000 instances" in run.stderr
    assert "user.max_net_namespaces" in run.stderr or "kernel.pid_max" in run.stderr
    assert Store(db).runs() == []  # nothing was started, not even a run record
    assert not [ns for ns in Path("/run/netns").glob("hvb-*-i99999")]

    check = hvbench("study", "check", str(file))
    assert check.returncode == 0, check.stderr
    warned = [ln for ln in check.stderr.splitlines() if "not on this host: platform p:" in ln]
    assert any("addresses on the run's network" in ln for ln in warned), check.stderr
    assert any("past the 300 s a group has to start" in ln for ln in warned), check.stderr


def test_a_reasonable_count_is_not_flagged(tmp_path):
    for platform in ("driver: native", "driver: container", "driver: gvisor", "driver: uml"):
        text = study(platform, 4)
        assert plan.misfits(parse_study(text, "s.yaml"), plan.this_host()) == [], platform
    file = tmp_path / "four.yaml"
    file.write_text(study("driver: native", 4))
    check = hvbench("study", "check", str(file))
    assert check.returncode == 0 and "not on this host" not in check.stderr, check.stderr


def test_each_kernel_limit_is_one_line_with_the_largest_count_that_fits():
    tasks = NATIVE.tasks + SAMPLE_TASKS
    [line] = misfits("driver: native", 200, replace(ROOMY, pid_max=700, tasks=400))
    assert line == (
        f"platform p: 200 instances × {tasks} host tasks (threads) need {200 * tasks}, the host "
        f"has 300 free pids (kernel.pid_max 700, 400 in use): at most {300 // tasks} "
        "instances, or raise kernel.pid_max (sysctl)"
    )
    [line] = misfits("driver: native", 200, replace(ROOMY, threads_max=600))
    assert "kernel.threads-max 600, 500 in use" in line and "at most 50 instances" in line
    [line] = misfits("driver: native", 200, replace(ROOMY, nproc=600, user_tasks=300))
    assert "RLIMIT_NPROC 600, 300 in use" in line and "(ulimit -u)" in line
    [line] = misfits("driver: native", 200, replace(ROOMY, net_namespaces=150))
    assert "200 instances × 1 network namespaces need 200" in line
    assert "at most 150 instances, or raise user.max_net_namespaces" in line
    # a container holds a PID namespace too, native none; gVisor two
    [line] = misfits("driver: container, memory: 64M", 100, replace(ROOMY, pid_namespaces=50))
    assert "100 instances × 1 PID namespaces need 100" in line
    [line] = misfits("driver: gvisor, memory: 64M", 100, replace(ROOMY, pid_namespaces=150))
    assert "100 instances × 2 PID namespaces need 200" in line
    assert misfits("driver: native", 200, replace(ROOMY, pid_namespaces=1)) == []


def test_memory_counts_what_the_host_holds_for_each_instance_besides_its_own():
    # 24 GiB hold 24 guests of 1G alone, but only 21 with what QEMU holds beside each
    [line] = misfits("driver: qemu, memory: 1G, nic: none", 22)
    assert "22 instances × 1161M (1G of memory + 137M the host holds besides)" in line
    assert "at most 21 instances, or less memory each" in line
    assert misfits("driver: qemu, memory: 1G, nic: none", 21) == []
    [line] = misfits("driver: qemu, vcpus: 2, pin: true, memory: 128M, nic: none", 2)
    assert line.endswith("need 4 cores, the host has 2: at most 1 instances, or pin: false")


def test_a_group_larger_than_the_run_network_or_its_start_allowance_is_refused():
    # the run's network has addresses for 65525 instances (a storm of hundreds fits); a guest
    # without a NIC takes none
    addresses = [ln for ln in misfits("driver: native", 65526) if "addresses" in ln]
    assert [ln[-40:] for ln in addresses] == ["which has 65525: at most 65525 instances"]
    assert misfits("driver: native", 256) == []
    # a start is CPU work: on 2 cores, 300 s start at most 2 × 300 / core_s TCG guests
    most = int(300 * 2 / TCG_PACE.core_s)
    over = misfits("driver: qemu, accel: tcg, memory: 128M, nic: none", most + 1)
    assert [ln for ln in over if "past the 300 s a group has to start" in ln] == [
        f"platform p: starting {most + 1} instances at once takes about "
        f"{(most + 1) * TCG_PACE.core_s / 2:.0f} s of the host's 2 cores ({TCG_PACE.core_s:g} "
        f"core-seconds each), past the 300 s a group has to start: at most {most} instances"
    ]
    longer = "driver: qemu, accel: tcg, memory: 128M, nic: none, boot_timeout: 900"
    assert not [ln for ln in misfits(longer, most + 1) if "has to start" in ln]


def _probed(*args: object) -> None:
    raise AssertionError("a plan for a made-up host probed this one")


def test_a_study_is_planned_for_a_made_up_host(monkeypatch):
    """Nothing of this host is read: four guests of 1G fit a host of 64 GiB with KVM, not one of
    2 GiB whose kernel has 30 pids free, where they also take longer, under TCG on one core."""
    for probe in ("capacity", "kernel_limits", "kvm_runs_guests"):
        monkeypatch.setattr(plan, probe, _probed)
    disk = "{name: disk, tool: dd, size: 1G}"
    four = parse_study(study("driver: qemu, accel: auto, memory: 1G, nic: none", 4, disk), "s")
    large = HostCapacity(memory=64 << 30, cores=16, kvm=True, limits=ROOMY)
    small = HostCapacity(memory=2 << 30, cores=1, kvm=False, limits=replace(ROOMY, pid_max=530))
    assert plan.misfits(four, large) == []
    assert plan.misfits(four, small) == [
        "platform p: 4 instances × 1161M (1G of memory + 137M the host holds besides) need "
        "4.5 GiB, the host has 2.0 GiB: at most 1 instances, or less memory each",
        "platform p: 4 instances × 12 host tasks (threads) need 48, the host has 30 free pids "
        "(kernel.pid_max 530, 500 in use): at most 2 instances, or raise kernel.pid_max (sysctl)",
    ]
    assert plan.misfits_at(four, "p", 1, small) == []  # an ascent's first step would fit
    assert plan.estimate_seconds(four, False, large) < plan.estimate_seconds(four, False, small)


def test_this_hosts_limits_are_read():
    limits = kernel_limits()
    assert limits.pid_max >= 301 and limits.threads_max > 0
    assert 0 < limits.tasks < min(limits.pid_max, limits.threads_max)
    assert limits.net_namespaces > 0 and limits.pid_namespaces > 0


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_every_driver_has_a_pace(name):
    settings = DRIVERS[name].settings_model.model_validate({"driver": name})
    for kvm in (False, True):
        pace = settings.pace(kvm)
        assert isinstance(pace, Pace) and pace.core_s > 0
        assert pace.slowdown >= 1 and pace.io_slowdown >= 1
        assert pace.group_seconds(1, 2) == pace.start_s
        assert pace.group_seconds(100, 2) == 100 * pace.core_s / 2


def test_fixed_time_does_not_slow_down_fixed_work_does():
    iperf3 = workload_of(Iperf3Settings(name="net", tool="iperf3", seconds=10))
    memory = workload_of(MemorySettings(name="memory"))
    dd = workload_of(DdSettings(name="disk", tool="dd", size="1G"))
    native = DRIVERS["native"].settings_model.model_validate({"driver": "native"}).pace(False)
    assert memory.seconds_at(False, TCG_PACE) == memory.estimate_seconds(False)
    # dd's work is the data disk's: it slows by the platform's I/O slowdown, not its CPU's
    assert dd.seconds_at(False, TCG_PACE) == TCG_PACE.io_slowdown * dd.estimate_seconds(False)
    assert dd.seconds_at(False, native) == dd.estimate_seconds(False)
    here, tcg = iperf3.seconds_at(False, native), iperf3.seconds_at(False, TCG_PACE)
    assert here == iperf3.estimate_seconds(False) and 20 < here < tcg < 1.5 * here


def test_accel_auto_is_tcg_here_and_kvm_on_a_host_with_kvm():
    qemu = DRIVERS["qemu"].settings_model.model_validate({"driver": "qemu", "accel": "auto"})
    assert qemu.pace(kvm=False) == TCG_PACE and qemu.pace(kvm=True).slowdown < 1.1
    tcg = DRIVERS["qemu"].settings_model.model_validate({"driver": "qemu", "accel": "tcg"})
    assert tcg.pace(kvm=True) == TCG_PACE  # what the study says wins
    if Path("/sys/module/kvm_pvm").exists() or not Path("/dev/kvm").exists():
        assert not plan.this_host().kvm  # this host: kvm_pvm runs no stock guest


def test_the_default_study_takes_longer_here_than_on_a_host_with_kvm():
    default = default_study()
    tcg, kvm = (
        plan.estimate_seconds(default, False, replace(HOST, kvm=kvm)) for kvm in (False, True)
    )
    assert 2 * 60 < kvm < tcg < 10 * 60, (kvm, tcg)  # the README's first run: ten minutes
    assert plan.estimate_seconds(default, True, HOST) < tcg / 2  # --quick: one repetition
    # the cpu programs dominate under TCG: fixed work, eight times native's
    cpu = next(c for c in default.cells() if c.platform == "qemu-virtio" and "cpu" in c.workload)
    tcg, kvm = (plan.sample_seconds(default, cpu, False, kvm) for kvm in (False, True))
    assert tcg > 5 * kvm


def test_study_show_json_gives_both_estimates(tmp_path):
    file = tmp_path / "s.yaml"
    file.write_text(
        "name: show\nbaseline: native\nplatforms:\n  native: {driver: native}\n"
        "  vm: {driver: qemu, accel: auto, memory: 512M}\n"
        "workloads:\n  - {name: disk, tool: dd, size: 1G}\n"
        "  - {name: net, tool: iperf3, seconds: 5}\nrepetitions: 3\n"
    )
    shown = hvbench("study", "show", str(file), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["repetitions"] == 3 and len(data["cells"]) == 4
    here, kvm = data["estimate_s"]["this_host"], data["estimate_s"]["kvm_host"]
    assert here == kvm if data["kvm_here"] else here > kvm > 0
    by_cell = {(c["platform"], c["workload"].split()[0]): c["sample_s"] for c in data["cells"]}
    assert by_cell[("native", "disk")]["this_host"] == by_cell[("native", "disk")]["kvm_host"]
    quick = json.loads(hvbench("study", "show", str(file), "--json", "--quick").stdout)
    assert quick["quick"] and quick["repetitions"] == 1
    assert quick["estimate_s"]["this_host"] < here


def test_a_group_past_a_bridge_s_ports_is_refused():
    """Each instance with an address is a port of a Linux bridge, which takes 1023: with starts
    in parallel (0.08 core-seconds a runc container) the start allowance no longer stops a
    group of a thousand before the bridge does."""
    ports = plan.BRIDGE_PORTS
    assert not [ln for ln in misfits("driver: container, memory: 16M", ports) if "bridge" in ln]
    assert [
        ln for ln in misfits("driver: container, memory: 16M", ports + 1) if "bridge" in ln
    ] == [
        f"platform p: {ports + 1} instances need as many ports of a Linux bridge, which takes "
        f"1023 (8 kept for the engines' hosts): at most {ports} instances"
    ]
    assert not [ln for ln in misfits("driver: container, memory: 16M", ports) if "to start" in ln]
