"""Host conditions: read for real on this host (a VM: no cpufreq, so "not exposed"), tuned and
reset for real on the knobs it has (KSM and THP under /sys/kernel/mm), a tune killed midway
undone by ``hvbench cleanup``, the report's section, and 80-column output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import RunBuilder

from hvbench.analysis import analyse
from hvbench.host import conditions, inventory, tuning
from hvbench.host.conditions import NOT_EXPOSED, selected
from hvbench.report import render
from hvbench.store import Store

MM = Path("/sys/kernel/mm")
KNOBS = {
    "ksm.run": MM / "ksm/run",
    "thp.enabled": MM / "transparent_hugepage/enabled",
    "thp.defrag": MM / "transparent_hugepage/defrag",
}
DRIFTING = {"ksm.run": "1", "thp.enabled": "always", "thp.defrag": "always"}
"""What the real knobs are set to before a tune: none of them benchmark-grade."""
NAMES = [
    "cpufreq.driver", "cpufreq.governor", "turbo", "cpuidle.driver", "cpuidle.governor",
    "cstate.deepest", "cstate.max", "smt.control", "smt.siblings", "ksm.run",
    "ksm.pages_sharing", "thp.enabled", "thp.defrag", "numa.nodes", "numa.placement",
    "irqbalance", "swap", "perf_event_paranoid", "load.average", "load.busy", "kvm.module",
    "kvm.nested",
]  # fmt: skip
STATUSES = {"ok", "not benchmark-grade", NOT_EXPOSED, "info"}
HALF_TUNE = """\
import time
from hvbench.host import conditions, tuning

class Stalls(list):
    '''Hands tune the first conditions, then stalls as a tune killed midway would.'''
    def __iter__(self):
        yield from list.__iter__(self)
        print("half tuned", flush=True)
        time.sleep(120)

tuning.tune(Stalls(c for c in conditions.tunable() if c.name in ("ksm.run", "thp.enabled")))
"""


def read(path: Path) -> str:
    return selected(path.read_text())


def hvbench(state: Path, *args: str, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HVBENCH_STATE_DIR": str(state)}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "hvbench", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def drifting() -> Iterator[None]:
    """KSM merging and THP always, for real; the machine's own values written back whatever
    the test does."""
    before = {name: read(path) for name, path in KNOBS.items()}
    try:
        for name, value in DRIFTING.items():
            KNOBS[name].write_text(value)
        assert {n: read(p) for n, p in KNOBS.items()} == DRIFTING
        yield
    finally:
        for name, value in before.items():
            KNOBS[name].write_text(value)


def fake_sysfs(root: Path) -> Path:
    """What this VM cannot show: four CPUs with cpufreq (two not at performance), turbo on,
    SMT siblings 0-1 and 2-3, idle states down to C6, and THP madvise but always for 64 kB
    pages (multi-size THP)."""
    cpu = root / "devices/system/cpu"
    for n, governor in enumerate(["performance", "performance", "powersave", "powersave"]):
        d = cpu / f"cpu{n}"
        (d / "cpufreq").mkdir(parents=True)
        (d / "cpufreq/scaling_driver").write_text("intel_pstate\n")
        (d / "cpufreq/scaling_governor").write_text(f"{governor}\n")
        (d / "topology").mkdir()
        (d / "topology/thread_siblings_list").write_text(f"{n & ~1}-{n | 1}\n")
        for i, (name, latency) in enumerate([("POLL", 0), ("C1", 2), ("C6", 133)]):
            (d / f"cpuidle/state{i}").mkdir(parents=True)
            (d / f"cpuidle/state{i}/name").write_text(f"{name}\n")
            (d / f"cpuidle/state{i}/latency").write_text(f"{latency}\n")
            (d / f"cpuidle/state{i}/disable").write_text("0\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate/no_turbo").write_text("0\n")
    thp = root / "kernel/mm/transparent_hugepage"
    for size, policy in (("64", "[always] inherit madvise never"), ("2048", "always [inherit]")):
        (thp / f"hugepages-{size}kB").mkdir(parents=True)
        (thp / f"hugepages-{size}kB/enabled").write_text(f"{policy}\n")
    (thp / "enabled").write_text("always [madvise] never\n")
    return root


def by_name(found: list[conditions.Condition]) -> dict[str, conditions.Condition]:
    return {c.name: c for c in found}


def test_this_host_read_as_it_is():
    """Every value is what the file says, or None and "not exposed" where there is no file."""
    found = by_name(conditions.check(sample=0.1))
    assert list(found) == NAMES
    governors = list(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"))
    governor = found["cpufreq.governor"]
    if governors:
        assert governor.value and governors[0].read_text().strip() in governor.value
    else:  # this VM: its hypervisor owns the frequency
        assert (governor.value, governor.status, governor.benchmark_grade) == (
            None,
            NOT_EXPOSED,
            None,
        )
    for name, path in KNOBS.items():  # thp.enabled may go on with multi-size THP's sizes
        assert found[name].value.split(";")[0] == read(path)
    assert found["ksm.run"].benchmark_grade == (read(KNOBS["ksm.run"]) != "1")
    loaded = [m for m in conditions.KVM_MODULES if Path("/sys/module", m).is_dir()]
    assert found["kvm.module"].value == (", ".join(loaded) or "none loaded")
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert found["numa.nodes"].value.startswith(f"{len(nodes)} (node")
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    assert found["perf_event_paranoid"].value == paranoid
    for c in found.values():
        assert c.status in STATUSES
        assert (c.value is None) == (c.status == NOT_EXPOSED)
        if c.benchmark_grade is False:
            assert c.effect and c.fix, c


def test_per_cpu_values_and_grades_on_a_tree_this_vm_lacks(tmp_path):
    found = by_name(conditions.check(sample=0.1, sys=fake_sysfs(tmp_path / "sys")))
    governor = found["cpufreq.governor"]
    assert governor.value == "performance (cpus 0-1), powersave (cpus 2-3)"
    assert governor.benchmark_grade is False
    assert [w.path.split("/")[-3] for w in governor.tune] == ["cpu2", "cpu3"]
    assert (found["turbo"].value, found["turbo"].benchmark_grade) == ("on", False)
    assert found["cstate.deepest"].value == "C6 (exit latency 133 µs)"
    assert found["cstate.deepest"].benchmark_grade is False
    assert found["cpufreq.driver"].value == "intel_pstate (cpus 0-3)"
    siblings = found["smt.siblings"]
    assert siblings.benchmark_grade is False and "siblings 0-1" in siblings.value
    thp = found["thp.enabled"]
    assert (thp.value, thp.benchmark_grade) == ("madvise; always for 64kB", False)
    assert [w.path.split("/")[-2] for w in thp.tune] == ["hugepages-64kB"]
    assert found["ksm.run"].status == NOT_EXPOSED  # no kernel/mm/ksm in the tree


def test_tune_and_reset_per_file_on_that_tree(tmp_path):
    """The governor of each slow CPU, turbo and a THP size: written, recorded, written back."""
    tree, state = fake_sysfs(tmp_path / "sys"), tmp_path / "state"
    cpu = tree / "devices/system/cpu"
    changes = tuning.tune(conditions.tunable(sys=tree), root=state)
    assert [(x.name, x.old, x.new, x.error) for x in changes] == [
        ("cpufreq.governor", "powersave", "performance", ""),
        ("cpufreq.governor", "powersave", "performance", ""),
        ("turbo", "0", "1", ""),
        ("thp.enabled", "always", "madvise", ""),
    ]
    assert (cpu / "cpu3/cpufreq/scaling_governor").read_text() == "performance"
    assert all(c.benchmark_grade is not False for c in conditions.tunable(sys=tree))
    assert len(tuning.tuned(state)) == 4
    assert tuning.tune(conditions.tunable(sys=tree), root=state) == []  # nothing left to do
    assert len(tuning.tuned(state)) == 4  # and the first tune still in place
    restored = tuning.reset(state)
    assert {(x.old, x.new, x.error) for x in restored} == {
        ("performance", "powersave", ""),
        ("1", "0", ""),
        ("madvise", "always", ""),
    }
    assert (cpu / "cpu2/cpufreq/scaling_governor").read_text() == "powersave"
    assert (cpu / "intel_pstate/no_turbo").read_text() == "0"
    assert not (state / tuning.LEDGER).exists() and tuning.reset(state) == []


def test_tune_then_reset_for_real_and_cleanup_keeps_a_finished_tune(drifting, tmp_path):
    tuned = hvbench(tmp_path, "host", "tune", "--json")
    assert tuned.returncode == 0, tuned.stderr
    changed = {
        x["name"]: (x["old"], x["new"], x["error"]) for x in json.loads(tuned.stdout)["changed"]
    }
    assert changed == {
        "ksm.run": ("1", "0", ""),
        "thp.enabled": ("always", "madvise", ""),
        "thp.defrag": ("always", "madvise", ""),
    }
    assert {n: read(p) for n, p in KNOBS.items()} == {
        "ksm.run": "0",
        "thp.enabled": "madvise",
        "thp.defrag": "madvise",
    }
    check = json.loads(hvbench(tmp_path, "host", "check", "--json").stdout)
    assert {c["name"]: c["status"] for c in check["conditions"] if c["name"] in KNOBS} == {
        n: "ok" for n in KNOBS
    }
    assert sorted(x["path"] for x in check["tuned"]) == sorted(str(p) for p in KNOBS.values())
    cleanup = hvbench(tmp_path, "cleanup", "--json")
    assert cleanup.returncode == 0 and json.loads(cleanup.stdout) == [], cleanup.stderr
    assert read(KNOBS["ksm.run"]) == "0"  # a finished tune is kept until reset
    reset = hvbench(tmp_path, "host", "reset", "--json")
    assert reset.returncode == 0, reset.stderr
    assert all(not x["error"] for x in json.loads(reset.stdout)["restored"])
    assert {n: read(p) for n, p in KNOBS.items()} == DRIFTING
    assert not (tmp_path / tuning.LEDGER).exists()


def test_a_tune_killed_midway_is_undone_by_cleanup(drifting, tmp_path):
    env = {**os.environ, "HVBENCH_STATE_DIR": str(tmp_path)}
    tuner = subprocess.Popen(
        [sys.executable, "-c", HALF_TUNE], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert tuner.stdout.readline().strip() == "half tuned"
        assert (read(KNOBS["ksm.run"]), read(KNOBS["thp.enabled"])) == ("0", "madvise")
    finally:
        tuner.kill()
        tuner.wait()
    cleanup = hvbench(tmp_path, "cleanup", "--json")
    assert cleanup.returncode == 0, cleanup.stderr
    removed = {r["run"]: r["removed"] for r in json.loads(cleanup.stdout)}
    assert sorted(removed[tuning.LEDGER]) == [
        f"setting {KNOBS['ksm.run']}",
        f"setting {KNOBS['thp.enabled']}",
    ]
    assert {n: read(p) for n, p in KNOBS.items()} == DRIFTING
    assert not (tmp_path / tuning.LEDGER).exists()


def test_check_json_schema(tmp_path):
    result = hvbench(tmp_path, "host", "check", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"conditions", "tuned"} and data["tuned"] == []
    assert [c["name"] for c in data["conditions"]] == NAMES
    keys = {"name", "value", "status", "benchmark_grade", "source", "effect", "fix", "tune"}
    for c in data["conditions"]:
        assert set(c) == keys
        assert c["status"] in STATUSES
        assert c["value"] is None or isinstance(c["value"], str)
        assert c["benchmark_grade"] in (True, False, None)
        assert all(set(w) == {"path", "value"} for w in c["tune"])


@pytest.mark.parametrize("command", [["host", "check"], ["doctor"]])
def test_80_columns(command, tmp_path):
    result = hvbench(tmp_path, *command, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) > 10
    assert [ln for ln in lines if len(ln) > 80] == []


def test_doctor_checks_the_drivers_named_and_refuses_an_unknown_one(tmp_path):
    """``hvbench doctor DRIVER...`` runs those drivers' probes alone (each takes a minute
    under emulation); a name no driver has is one line that lists the drivers."""
    result = hvbench(tmp_path, "doctor", "native", "container", "--json")
    assert result.returncode == 0, result.stderr
    findings = json.loads(result.stdout)
    assert [f["name"] for f in findings if f["kind"] == "driver"] == ["native", "container"]
    assert any(f["kind"] == "tool" for f in findings)
    result = hvbench(tmp_path, "doctor", "qemu", "kvm")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("hvbench: doctor: no driver named kvm; the drivers: ") and "qemu" in line


def test_every_run_records_the_conditions_and_the_report_names_what_drifts(tmp_path):
    assert [c["name"] for c in inventory.collect().conditions] == NAMES
    found = conditions.check(sample=0.1, sys=fake_sysfs(tmp_path / "sys"))
    store = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(
        store, inventory={"cores_logical": 2, "conditions": [c.as_json() for c in found]}
    )
    for rep in range(3):
        b.sample(b.cell("native", "disk"), rep, {"disk.bonnie.block_kbps": [58000.0 + rep]}, "KB/s")
    a = analyse(store, "latest")
    assert {c.name for c in a.conditions if c.benchmark_grade is False} >= {
        "cpufreq.governor",
        "turbo",
        "cstate.deepest",
        "smt.siblings",
    }
    md = render(a, "md")
    assert "## Host conditions" in md
    assert "| turbo | on | the turbo frequency depends on temperature" in md
    assert "not exposed by this host (not guessed): " in md and "ksm.run" in md
    html = render(a, "html")
    assert '<h2 id="host-conditions">Host conditions</h2>' in html
    assert "hvbench host tune (sets performance on every CPU)" in html
