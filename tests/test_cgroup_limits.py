"""The cgroup limits of a VM's size, one record in each dialect that sets them: an OCI spec, an
engine's flags, a cgroup's files (v1 and v2) and LXC's keys say the same CPU quota, memory, no
swap, and the cpuset of a pinned instance; the OS-level drivers' settings build it once."""

from __future__ import annotations

import pytest

from hvbench.drivers.lxc import LxcSettings
from hvbench.errors import HvbenchError
from hvbench.host.cgroup import own_cgroup
from hvbench.host.cgroup_limits import CgroupLimits

MIB = 1 << 20


def test_every_dialect_says_the_same_limit():
    limits = CgroupLimits(vcpus=2, memory=256 * MIB)
    memory = str(256 * MIB)
    assert limits.oci(0) == {
        "cpu": {"quota": 200_000, "period": 100_000},
        "memory": {"limit": 256 * MIB, "swap": 256 * MIB},
    }
    assert limits.engine_flags(0) == [
        "--cpu-period=100000", "--cpu-quota=200000", f"--memory={memory}",
        f"--memory-swap={memory}",
    ]  # fmt: skip
    assert limits.files(2, 0) == {
        "cpu.max": "200000 100000", "memory.max": memory, "memory.swap.max": "0",
    }  # fmt: skip
    assert list(limits.files(1, 0).items()) == [
        ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "200000"),
        ("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory),
    ]  # fmt: skip
    assert limits.lxc_keys(2, 0) == [
        "lxc.cgroup2.cpu.max = 200000 100000", f"lxc.cgroup2.memory.max = {memory}",
        "lxc.cgroup2.memory.swap.max = 0",
    ]  # fmt: skip
    assert limits.lxc_keys(1, 0)[-1] == f"lxc.cgroup.memory.memsw.limit_in_bytes = {memory}"
    assert limits.described() == {
        "cpu": "CFS quota 200000 us per 100000 us",
        "memory": f"{memory} bytes, no swap",
    }


def test_a_pinned_instance_has_cores_of_its_own_round_robin(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    limits = CgroupLimits(vcpus=2, memory=64 * MIB, pin=True)
    assert [limits.cpuset(i) for i in range(3)] == ["0,1", "2,0", "1,2"]
    assert limits.oci(1)["cpu"]["cpus"] == "2,0"
    assert limits.engine_flags(1)[-1] == "--cpuset-cpus=2,0"
    assert limits.lxc_keys(2, 1)[-1] == "lxc.cgroup2.cpuset.cpus = 2,0"
    assert limits.lxc_keys(1, 1)[-1] == "lxc.cgroup.cpuset.cpus = 2,0"
    assert limits.described()["cpu"].endswith(" and a cpuset of as many cores")
    assert CgroupLimits(vcpus=2, memory=64 * MIB).cpuset(1) is None


def test_the_settings_build_the_record_and_hvbench_refuses_to_pin_its_own_cgroups():
    settings = LxcSettings(driver="lxc", vcpus=3, memory="1G", pin=True)
    assert settings.limits == CgroupLimits(vcpus=3, memory=1 << 30, pin=True)
    with pytest.raises(HvbenchError, match="pin: true is not supported"):
        own_cgroup("/hvb-test/never-made", settings.limits, 0)
