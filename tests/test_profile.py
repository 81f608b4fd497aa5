"""The host's profile (study ``profile: true``): real perf during real native samples, stored,
analysed and shown in every report; and a run on a host without perf, which says so once and
goes on."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, console_errors
from conftest import require
from run_checks import CPU, leftovers

from hvbench.analysis import analyse
from hvbench.analysis.profile import platform_profiles
from hvbench.errors import StudyError
from hvbench.host.profile import NO_SYMBOLS
from hvbench.report import render
from hvbench.session import NewRun, RunSession
from hvbench.store import CellView, FunctionView, Store, WhatRan
from hvbench.study import parse_study

STUDY = f"""\
name: profile-test
profile: true
platforms:
  native: {{driver: native}}
  again: {{driver: native}}
workloads:
  - {CPU}
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[Store, str]:
    """A real run in --quick: two native platforms, one cpu sample each, profiled by perf."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('profile') / 'results.db'}")
    session = RunSession.preflight(store, NewRun(parse_study(STUDY, "t"), quick=True))
    assert session.run().status == "finished"
    assert leftovers(session.run_id) == []  # perf ended, its data files removed
    return store, session.run_id


def test_each_sample_stores_its_top_functions(profiled):
    store, run_id = profiled
    rows = store.profile_functions(run_id)
    samples = {(r.cell_id, r.repetition) for r in rows}
    assert len(samples) == len(store.samples(run_id)) == 2
    for sample in samples:
        mine = [r for r in rows if (r.cell_id, r.repetition) == sample]
        assert [r.rank for r in mine] == list(range(1, len(mine) + 1))
        # about 99 samples a second on every CPU over the measured window of seconds
        assert mine[0].profile_samples > 99
        assert sum(r.samples for r in mine) <= mine[0].profile_samples
        assert sum(r.percent for r in mine) == pytest.approx(
            100 * sum(r.samples for r in mine) / mine[0].profile_samples
        )
    # the micro suite's own programs are among what the host ran
    assert {"stress-ng", "sysbench"} <= {r.dso for r in rows}
    # bare addresses of a binary without symbols are summed as one line per binary
    assert not [r for r in rows if re.match(r"0x[0-9a-f]+$", r.symbol)]
    assert ("(no symbols)", "sysbench") in {(r.symbol, r.dso) for r in rows}


@pytest.mark.browser
def test_each_platform_profile_is_in_the_json_markdown_and_html_reports(profiled, tmp_path):
    require(shutil.which("chromium") is not None, "chromium (apt-get install chromium)")
    store, run_id = profiled
    a = analyse(store, run_id)
    assert [(p.platform, p.workload) for p in a.profiles] == [
        ("native", a.workloads()[0]),
        ("again", a.workloads()[0]),
    ]
    lines = [json.loads(line) for line in render(a, "json").splitlines()]
    shares = [x for x in lines if x["metric"] == "host.profile.share"]
    assert {x["metadata"]["platform"] for x in shares} == {"native", "again"}
    first = a.profiles[0].functions[0]
    assert shares[0]["value"] == first.percent and shares[0]["metadata"]["dso"] == first.dso
    assert f"| 1 | {first.samples} | {first.percent:.2f} |" in render(a, "md")

    page = tmp_path / "report.html"
    page.write_text(render(a, "html"), encoding="utf-8")
    dom, stderr = chromium(tmp_path, page, "--dump-dom")
    assert console_errors(stderr) == []
    assert 'id="profile"' in dom
    tables = re.findall(r'<table class="profile sortable">(.*?)</table>', dom, re.S)
    assert len(tables) == 2
    assert all(
        t.count("<tr>") - 1 == len(p.functions) for t, p in zip(tables, a.profiles, strict=True)
    )


def _without_perf(tmp_path: Path) -> str:
    """A PATH with every program of this host except perf: a host without linux-perf."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in Path("/usr/bin").iterdir():
        if program.name != "perf":
            (bin_dir / program.name).symlink_to(program)
    return f"{bin_dir}:/usr/sbin"


def test_without_perf_the_run_says_so_once_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", _without_perf(tmp_path))
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(STUDY, "t"), quick=True))
    assert session.run().status == "finished"
    said = [line for line in capsys.readouterr().err.splitlines() if "perf" in line]
    assert said == [
        "profile: perf is not installed (./setup.sh --with-perf); the run goes on without profiles"
    ]
    assert [s.status for s in store.samples(session.run_id)] == ["ok", "ok"]
    assert store.profile_functions(session.run_id) == []
    assert store.artifacts(session.run_id)["profile"] == {"notice": said[0]}


def test_study_check_warns_where_perf_is_missing(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    env = {**os.environ, "PATH": _without_perf(tmp_path)}
    check = [sys.executable, "-m", "hvbench", "study", "check", str(study)]
    warned = subprocess.run(check, capture_output=True, text=True, env=env, check=True)
    assert warned.stderr.splitlines() == [
        f"{study}: warning: profile: perf is not installed (./setup.sh --with-perf); runs "
        "here will have no profiles"
    ]
    assert subprocess.run(check, capture_output=True, text=True, check=True).stderr == ""


def test_profile_is_a_boolean():
    with pytest.raises(StudyError, match=r"^t:2: profile: expected a valid boolean, found 'maybe'"):
        parse_study(STUDY.replace("profile: true", "profile: maybe"), "t")
    assert parse_study(STUDY.replace("profile: true\n", ""), "t").profile is False


def test_a_platform_profile_sums_its_samples_counts():
    """Two samples of 200 and 100 perf samples: a function's share is its samples over 300."""
    cells = {
        1: CellView("kvm|cpu|1", "kvm", "qemu", "cpu", "cpu", 1, {}, {}, WhatRan(), 1),
        2: CellView("native|cpu|1", "native", "native", "cpu", "cpu", 1, {}, {}, WhatRan(), 2),
    }
    rows = [
        FunctionView(1, 1, 1, 150, 75.0, "vmx_vcpu_run", "[kernel.kallsyms]", 200),
        FunctionView(1, 1, 2, 50, 25.0, NO_SYMBOLS, "qemu-system-x86_64", 200),
        FunctionView(1, 2, 1, 60, 60.0, NO_SYMBOLS, "qemu-system-x86_64", 100),
        FunctionView(1, 2, 2, 30, 30.0, "vmx_vcpu_run", "[kernel.kallsyms]", 100),
        FunctionView(2, 1, 1, 10, 100.0, "main", "sysbench", 10),
    ]
    kvm, native = platform_profiles(rows, cells, top=1)
    assert (kvm.platform, kvm.samples, kvm.profiles) == ("kvm", 300, 2)
    (f,) = kvm.functions
    assert (f.symbol, f.samples, f.percent) == ("vmx_vcpu_run", 180, 60.0)
    assert native.functions[0].percent == 100.0
