"""Study files: valid ones expand into the right matrix; malformed ones get one clear line."""

from __future__ import annotations

import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hvbench.analysis.platforms import label
from hvbench.drivers import driver_class
from hvbench.errors import StudyError
from hvbench.host.kvm import AccelVerdict
from hvbench.plan import estimate_seconds, misfits, this_host
from hvbench.store import Store, WhatRan
from hvbench.study import Study, default_study, load_study, parse_study

VALID = """\
name: demo
baseline: native
platforms:
  native: {driver: native}
  other: {driver: native, instances: [1, 2]}
workloads:
  - {name: cpu}
instances: [1, 2, 4]
repetitions: 2
"""


def test_valid_study_expands_platform_by_count_by_workload():
    study = parse_study(VALID, "demo.yaml")
    cells = study.cells()
    # native defaults to a single instance; `other` lists its own counts
    assert [(c.platform, c.instances) for c in cells] == [("native", 1), ("other", 1), ("other", 2)]
    assert study.repetitions == 2
    here = this_host()
    assert estimate_seconds(study, True, here) < estimate_seconds(study, False, here)


def test_a_workload_runs_on_the_platforms_it_names():
    study = parse_study(
        VALID.replace("  - {name: cpu}", "  - {name: cpu, platforms: [native]}\n  - {name: boot}"),
        "demo.yaml",
    )
    cells = [(c.platform, c.workload, c.instances) for c in study.cells()]
    assert cells == [
        ("native", "cpu apps", 1),
        ("native", "boot", 1),
        ("other", "boot", 1),
        ("other", "boot", 2),
    ]
    # a platform left out (one this host cannot run) leaves the workloads' lists too
    default = default_study()
    assert default.without(set(default.platforms) - {"native"}).workloads[1].platforms == ["native"]


EXAMPLES = {
    # file: (its platforms' drivers, its workloads' names, its baseline)
    "boot-storm": ({"container", "docker", "podman", "lxc", "nspawn", "uml"}, ["boot"], None),
    "consolidation": ({"native", "qemu"}, ["consolidation"], "native"),  # seed 003
    "container-engines": (
        {"native", "container", "docker", "podman", "lxc", "nspawn", "gvisor", "qemu"},
        ["cpu", "disk", "net", "boot"],
        "native",
    ),  # issue 46
    "kvm-settings": ({"qemu"}, ["cpu", "net", "net"], "plain"),
    "lifecycle": ({"qemu"}, ["migration"] * 4 + ["snapshot"], None),  # seed 004
    "firecracker-spec": (
        {"native", "firecracker"},
        ["boot", "memory", "cpu", "disk", "net"],
        "native",
    ),
    "microvm": (
        {"native", "qemu", "firecracker", "cloud-hypervisor", "container", "gvisor"},
        ["boot", "memory", "cpu", "disk", "net", "snapshot"],
        "native",
    ),  # issue 35
    "oslevel": ({"container", "gvisor", "native", "qemu"}, ["cpu", "disk", "net"], "native"),
    "paravirt": ({"native", "qemu", "uml"}, ["cpu", "disk", "disk", "net"], "native"),
    "qemu-versions": ({"qemu"}, ["boot", "cpu", "migration", "migration", "snapshot"], "qemu-7-2"),
    "snapshot": ({"container", "gvisor", "libvirt", "qemu"}, ["snapshot"], None),  # seed 004
    "tcg-claims": ({"native", "qemu"}, ["boot", "cpu"], "native"),  # issue 36's claims
    "virtio-article": ({"native", "qemu"}, ["disk", "net"], "native"),  # seed 002
    "wiki-disk": ({"native", "qemu"}, ["disk", "disk", "kernbench", "boot"], "native"),  # 001
    "xen-vs-kvm": ({"native", "qemu", "xen"}, ["cpu", "net", "disk"], "native"),  # seed 000
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_is_what_it_reproduces_with_jobs_long_enough(name):
    path = Path(__file__).parent.parent / "examples" / f"{name}.yaml"
    study = load_study(path)
    drivers, workloads, baseline = EXAMPLES[name]
    assert {p.driver for p in study.platforms.values()} == drivers
    assert [w.name for w in study.workloads] == workloads
    assert study.baseline == baseline
    assert study.short_jobs(quick=False) == []  # every timed job a second or more natively


def test_the_examples_are_all_listed():
    found = {p.stem for p in (Path(__file__).parent.parent / "examples").glob("*.yaml")}
    assert found == set(EXAMPLES)


def test_a_study_without_platforms_is_a_study_of_its_own():
    default = default_study()
    study = default.without(set(default.platforms) - {"native"})
    assert {s.driver for s in study.platforms.values()} == {"native"}
    assert study.baseline == "native" and study.source == default.source
    assert parse_study(study.text, "stored").platforms.keys() == {"native"}


def ran(study: Study, platform: str, accel: AccelVerdict | None = None) -> WhatRan:
    """What a platform's driver writes it ran: what its settings say, and for accel: auto the
    accelerator doctor's verdict gives (``accel``; None: not resolved, the start failed)."""
    settings = study.platforms[platform]
    said = driver_class(settings).ran_by_settings(settings)
    if accel is not None and said.mode is None and said.modes == ("kvm", "tcg"):
        return replace(said, mode=accel.accel, mode_reason=accel.reason)
    return said


def labelled(study: Study, accel: AccelVerdict | None = None) -> dict[str, str]:
    return {
        p: label(p, [r.mode] if (r := ran(study, p, accel)).mode else [], r.modes)
        for p in study.platforms
    }


@pytest.mark.parametrize(
    "verdict",
    [AccelVerdict("kvm", "a stock guest reached init"), AccelVerdict("tcg", "no /dev/kvm")],
)
def test_default_study_names_what_ran_whatever_doctor_finds(verdict):
    """No platform name claims an accelerator it may not get; the labels name the one doctor's
    probe gives accel: auto, and gVisor's interception."""
    study = default_study()
    assert {"qemu-virtio", "qemu-emulated"} <= set(study.platforms)
    labels = labelled(study, verdict)
    assert labels["qemu-virtio"] == f"qemu-virtio [{verdict.accel}]"
    assert labels["qemu-emulated"] == f"qemu-emulated [{verdict.accel}]"
    assert labels["gvisor"] == "gvisor [systrap]"
    assert {labels[p] for p in ("native", "uml", "container")} == {"native", "uml", "container"}


LABELS = """\
name: labels
platforms:
  kvm-virtio: {driver: qemu, accel: auto}
  kvm: {driver: qemu, accel: kvm}
  tcg: {driver: qemu, accel: tcg}
  virtio: {driver: qemu, accel: tcg}
  lv-kvm: {driver: libvirt, accel: auto}
  lv-xen: {driver: libvirt, uri: "xen:///system", mode: pvh}
  xen-pv: {driver: xen, mode: hvm}
  xen-pvh: {driver: xen, mode: pvh}
  sandbox-ptrace: {driver: gvisor, platform: ptrace}
  uml: {driver: uml}
workloads: [{name: boot}]
"""


def test_labels_name_what_each_driver_ran():
    """kvm-virtio on a host without KVM is kvm-virtio [tcg]; a name that says what ran stays as
    it is; xen names its mode (and a name claiming another is corrected), gVisor its
    interception; uml has nothing to choose."""
    study = parse_study(LABELS, "labels.yaml")
    assert labelled(study, AccelVerdict("tcg", "no /dev/kvm")) == {
        "kvm-virtio": "kvm-virtio [tcg]",
        "kvm": "kvm",
        "tcg": "tcg",
        "virtio": "virtio [tcg]",
        "lv-kvm": "lv-kvm [tcg]",
        "lv-xen": "lv-xen [pvh]",
        "xen-pv": "xen-pv [hvm]",
        "xen-pvh": "xen-pvh",
        "sandbox-ptrace": "sandbox-ptrace",
        "uml": "uml",
    }
    assert labelled(study, AccelVerdict("kvm", "probe booted"))["kvm-virtio"] == "kvm-virtio"
    assert ran(study, "kvm-virtio").mode is None  # the start failed before it resolved
    assert label("kvm-virtio", ["kvm", "tcg"]) == "kvm-virtio [kvm/tcg]"
    # KVM nested in a virtual machine: its figures are no KVM's, and the label says so
    assert label("firecracker", ["kvm"], ["kvm"], nested=True) == "firecracker [kvm, nested]"
    assert label("pc-kvm", ["kvm"], ["kvm", "tcg"], nested=True) == "pc-kvm [nested]"


# (study text, line, words the message must contain)
MALFORMED = [
    ("name: x\nplatforms: {a: {driver: native}\nworkloads: []\n", 3, ["YAML syntax"]),
    ("- just\n- a list\n", 1, ["expected a mapping"]),
    ("", 1, ["expected a mapping"]),
    (VALID.replace("baseline: native", "baseline: native\ncolour: red"), 3, ["colour", "unknown"]),
    (VALID.replace("name: demo\n", ""), 1, ["name", "missing"]),
    (VALID.replace("name: demo", "name: ''"), 1, ["name"]),
    (VALID.replace("repetitions: 2", "repetitions: 0"), 9, ["repetitions", "> 0", "0"]),
    (VALID.replace("repetitions: 2", "repetitions: -3"), 9, ["repetitions", "-3"]),
    (VALID.replace("repetitions: 2", "repetitions: three"), 9, ["repetitions", "three"]),
    (VALID.replace("instances: [1, 2, 4]", "instances: [1, 0]"), 8, ["instances.1", "0"]),
    (VALID.replace("instances: [1, 2, 4]", "instances: []"), 8, ["instances", "at least"]),
    (VALID.replace("instances: [1, 2, 4]", "instances: [2, 2]"), 8, ["instances", "duplicate"]),
    (VALID.replace("instances: [1, 2, 4]", "instances: 4"), 8, ["instances", "4"]),
    (VALID.replace("baseline: native", "baseline: xen"), 2, ["baseline", "xen", "native"]),
    (VALID.replace("{driver: native}", "{driver: vmware}", 1), 4, ["driver", "vmware"]),
    (VALID.replace("{driver: native}", "{}", 1), 4, ["driver", "None"]),
    (VALID.replace("{driver: native}", "{driver: native, nic: e1000}", 1), 4, ["nic", "unknown"]),
    (VALID.replace("{driver: native}", "native", 1), 4, ["platforms.native", "mapping"]),
    (VALID.replace("  native: {driver: native}", "  Native X: {driver: native}"), 4, ["name"]),
    (VALID.replace("instances: [1, 2]}", "instances: [1, 1]}"), 5, ["duplicate"]),
    (VALID.replace("instances: [1, 2]}", "instances: [-1]}"), 5, ["other.instances.0", "-1"]),
    (VALID.replace("  other:", "  native:"), 5, ["native", "duplicate key"]),
    (
        VALID.split("platforms:")[0] + "platforms: {}\nworkloads: [{name: cpu}]\n",
        3,
        ["platforms", "at least"],
    ),
    (VALID.replace("  - {name: cpu}", "  - {name: spec2006}"), 7, ["workloads.0.name", "spec2006"]),
    (VALID.replace("  - {name: cpu}", "  - cpu"), 7, ["workloads.0", "mapping"]),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu}\n  - {name: cpu}"),
        8,
        ["duplicate workload"],
    ),
    (VALID.replace("  - {name: cpu}", "  - {tool: fio}"), 7, ["workloads.0.name", "None"]),
    (VALID.replace("  - {name: cpu}", "  - {name: cpu, speed: 11}"), 7, ["speed", "unknown"]),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu, suite: spec}"),
        7,
        ["workloads.0.suite", "['apps', 'micro']", "'spec'"],
    ),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu, integer: {duration: 3}}"),
        7,
        ["integer", "unknown", "scale"],  # micro's settings need suite: micro
    ),
    (VALID.replace("  - {name: cpu}", "  - {name: cpu, scale: 0}"), 7, ["scale", "> 0"]),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu, suite: micro, scale: 2}"),
        7,
        ["scale", "unknown"],
    ),
    (
        VALID.replace("{driver: native}", "{driver: native, disk: {size: huge}}", 1),
        4,
        ["disk.size", "huge"],
    ),
    (
        VALID.replace("{driver: native}", "{driver: native, disk: {backing: nfs}}", 1),
        4,
        ["backing", "nfs"],
    ),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu, platforms: [native, nope]}"),
        7,
        ["workloads.0.platforms", "['nope']", "study's platforms"],
    ),
    (
        VALID.replace("  - {name: cpu}", "  - {name: cpu, platforms: [other]}"),
        7,
        ["workloads.0.platforms", "baseline 'native'"],
    ),
    (
        "name: x\nplatforms:\n  a: {driver: native}\nworkloads: [{name: cpu}]\nworkloads: []\n",
        5,
        ["duplicate key"],
    ),
]


@pytest.mark.parametrize(("text", "line", "words"), MALFORMED)
def test_malformed_study_gets_one_clear_line(text, line, words):
    with pytest.raises(StudyError) as exc:
        parse_study(text, "bad.yaml")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"bad.yaml:{line}: "), message
    for word in words:
        assert word in message, message


def test_malformed_study_on_the_command_line_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(VALID.replace("repetitions: 2", "repetitions: 0"))
    proc = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{bad}:9: repetitions" in proc.stderr


def test_unknown_cpu_suite_is_refused_by_study_check_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(VALID.replace("  - {name: cpu}", "  - {name: cpu, suite: hepspec}"))
    proc = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"{bad}:7: workloads.0.suite: expected one of ['apps', 'micro']" in proc.stderr


def test_missing_study_file_is_one_line(tmp_path):
    with pytest.raises(StudyError, match="cannot read the study"):
        load_study(tmp_path / "nope.yaml")


def test_workload_instances_override_the_study_but_not_native():
    text = VALID.replace("  - {name: cpu}", "  - {name: cpu}\n  - {name: boot, instances: [1, 8]}")
    text = text.replace("  other: {driver: native, instances: [1, 2]}\n", "")
    text = text.replace("platforms:\n", "platforms:\n  vm: {driver: qemu}\n")
    study = parse_study(text, "t")
    got = [(c.platform, c.workload, c.instances) for c in study.cells()]
    assert got == [
        ("vm", "cpu apps", 1),
        ("vm", "boot", 1),
        ("vm", "cpu apps", 2),
        ("vm", "cpu apps", 4),
        ("vm", "boot", 8),
        ("native", "cpu apps", 1),
        ("native", "boot", 1),
    ]


def test_alias_bomb_is_refused_at_once(tmp_path):
    """Nine levels of nine aliases (9^9 values once expanded): one line, exit 2, from a process
    whose address space holds far less than the expansion would (a limit, not a clock: the
    refusal must come before the expansion, however loaded the host)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\nname: *a9\n")
    limit = 2 << 30  # 9^9 references alone take 3 GiB

    def small_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(bomb)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=small_address_space,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "alias" in proc.stderr, proc.stderr
    with pytest.raises(StudyError, match="YAML aliases"):
        parse_study(bomb.read_text(), "bomb.yaml")


def test_a_few_aliases_are_fine():
    shared = "platforms:\n  vm1: &vm {driver: qemu, memory: 1G}\n  vm2: *vm\n"
    study = parse_study(VALID.replace("platforms:\n", shared), "t")
    assert study.platforms["vm1"] == study.platforms["vm2"]


def test_a_native_platform_says_it_runs_one_instance_whatever_the_study_lists(tmp_path):
    """Native runs one instance, the host itself, unless its platform lists its own counts: a
    native platform other than the baseline that would take the study's runs one, and study
    check and run say so in one warning line each (the study's counts are for its guests, and
    the study runs as it did). The baseline runs one by design and is not named."""
    text = VALID.replace("instances: [1, 2]}", "}").replace("[1, 2, 4]", "[100000]")
    study = parse_study(text, "native.yaml")
    assert [(c.platform, c.instances) for c in study.cells()] == [("native", 1), ("other", 1)]
    line = (
        "platform other: runs 1 instance(s), the native driver's default, not the study's "
        "counts [100000]; to run those, give the platform instances: [100000]"
    )
    assert study.ignored_counts() == [line]
    assert parse_study(VALID, "valid.yaml").ignored_counts() == []  # other lists its own
    unnamed = parse_study(text.replace("baseline: native\n", ""), "t")
    assert unnamed.ignored_counts() == [line]  # the first native platform is the reference

    path = tmp_path / "native.yaml"
    path.write_text(text)
    check = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0 and check.stderr == f"{path}: warning: {line}\n", check.stderr
    # run warns before it starts anything; a guest too many for the host keeps this one short
    path.write_text(text.replace("platforms:\n", "platforms:\n  vm: {driver: qemu, memory: 1G}\n"))
    db = f"sqlite:///{tmp_path}/results.db"
    run = subprocess.run(
        [sys.executable, "-m", "hvbench", "run", str(path), "--db", db],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    warning, refusal = run.stderr.splitlines()
    assert warning == f"hvbench: warning: {line}"
    assert "cannot run on this host: platform vm: 100000 instances" in refusal


def test_a_study_larger_than_the_host_is_refused_before_anything_starts(tmp_path):
    big = VALID.replace("platforms:\n", "platforms:\n  vm: {driver: qemu, memory: 1G}\n")
    big = big.replace("instances: [1, 2, 4]", "instances: [100000]")
    study = parse_study(big, "big.yaml")
    host = replace(this_host(), memory=24 << 30, cores=2)
    lines = misfits(study, host)
    assert lines[0] == (
        "platform vm: 100000 instances × 1161M (1G of memory + 137M the host holds besides) "
        "need 113378.9 GiB, the host has 24.0 GiB: at most 21 instances, or less memory each"
    )
    assert all(m.startswith("platform vm: ") for m in lines)  # native runs one instance
    pinned = parse_study(big.replace("memory: 1G}", "memory: 1G, vcpus: 2, pin: true}"), "p")
    assert "100000 instances × 2 pinned vCPU(s) need 200000 cores, the host has 2" in "; ".join(
        misfits(pinned, host)
    )
    assert misfits(parse_study(VALID, "t"), host) == []

    study_file = tmp_path / "big.yaml"
    study_file.write_text(big)
    db = f"sqlite:///{tmp_path}/results.db"
    run = subprocess.run(
        [sys.executable, "-m", "hvbench", "run", str(study_file), "--db", db],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "cannot run on this host" in run.stderr and "100000 instances" in run.stderr
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert Store(db).runs() == []  # nothing was started, not even a run record
    check = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(study_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0 and "warning: not on this host" in check.stderr, check.stderr


SHORT = VALID.replace(
    "  - {name: cpu}",
    "  - {name: cpu, scale: 0.005, skip: [povray, aes, sha256]}\n"
    "  - {name: net, tool: iperf, seconds: 0.3}\n"
    "  - {name: disk, tool: fio, runtime: 2}",
)


def test_jobs_too_short_for_their_clock_are_warned_about_with_the_fix(tmp_path):
    study = parse_study(SHORT, "short.yaml")
    lines = study.short_jobs(quick=False)
    # every fixed-work cpu program at a two-hundredth of its size, and iperf's 0.3 s; not fio's
    # 2 s, nor the calibrated default (each job sized to 1.5 s natively)
    assert [line.split(": ")[1].split()[0] for line in lines] == [
        "stockfish", "xz", "zstd", "sqlite", "iperf"
    ]  # fmt: skip
    assert all("under the 0.5 s a job needs" in line for line in lines)
    assert "scale: auto" in lines[0] and lines[-1].endswith("raise seconds")
    assert parse_study(VALID, "valid.yaml").short_jobs(quick=False) == []
    path = tmp_path / "short.yaml"
    path.write_text(SHORT)
    proc = subprocess.run(
        [sys.executable, "-m", "hvbench", "study", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(f"{path}: warning: ") == 5, proc.stderr


def test_an_operation_the_baseline_cannot_do_runs_on_the_other_platforms_alone():
    """native cannot snapshot itself: a snapshot workload leaves it out (nothing to divide by),
    where a workload with figures to normalise must hold the baseline."""
    text = (
        "name: s\nbaseline: native\nplatforms:\n  native: {driver: native}\n"
        "  q: {driver: qemu, accel: tcg}\nworkloads:\n  - {name: %s, platforms: [q]}\n"
    )
    assert [w.name for w in parse_study(text % "snapshot", "s.yaml").workloads] == ["snapshot"]
    with pytest.raises(StudyError, match="expected the baseline 'native' among them"):
        parse_study(text % "boot", "s.yaml")
    with pytest.raises(StudyError, match="snapshot cannot run on platform native"):
        parse_study(text.replace(", platforms: [q]", "") % "snapshot", "s.yaml")
