"""The runner on the native platform with a real (short) cpu workload: order, failures,
interruption and resumption, and cleanup of everything a run made."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
from builders import RunBuilder
from polling import wait_for
from run_checks import CPU, leftovers
from typer.testing import CliRunner

from hvbench import doctor
from hvbench import runner as runner_module
from hvbench import session as session_module
from hvbench.analysis import analyse
from hvbench.analysis.cache import run_key
from hvbench.analysis.model import COMPOSITE
from hvbench.analysis.series import FIGURES, RunFigures
from hvbench.cli import app as cli_app
from hvbench.cli.run import REPORTS, imprecise_cells
from hvbench.errors import HvbenchError
from hvbench.host.process import processes
from hvbench.plan import START_TIMEOUT_S, start_allowance
from hvbench.runner import RunScope, needs_of
from hvbench.session import NewRun, Resume, RunSession
from hvbench.store import TIME, Store, TimeRecord, WhatRan
from hvbench.study import parse_study

STUDY = f"""\
name: runner-test
baseline: native
platforms:
  native: {{driver: native}}
  again: {{driver: native}}
workloads:
  - {CPU}
repetitions: 3
"""


def test_samples_are_interleaved_across_platforms_and_cleaned_up():
    store = Store()
    study = parse_study(STUDY.replace("repetitions: 3", "repetitions: 2"), "t")
    session = RunSession.preflight(store, NewRun(study))
    assert session.run().status == "finished"
    cells = {c.id: c.platform for c in store.cells(session.run_id)}
    order = [(s.repetition, cells[s.cell_id]) for s in store.samples(session.run_id)]
    assert order == [(1, "native"), (1, "again"), (2, "native"), (2, "again")]
    names = {r.name for r in store.metric_rows(session.run_id)}
    assert "cpu.branchy.primes_events_per_s" in names
    sample = store.samples(session.run_id)[0]
    assert sample.host_cpu is not None
    assert sample.host_cpu.busy_s > 0 and sample.host_cpu.wall_s >= 3
    cores = os.cpu_count() or 1  # native's one instance has the host's every core: not over
    assert sample.platform_state.host_cores == cores == sample.platform_state.vcpus_total
    assert sample.platform_state.overcommit is False
    assert [c.ran for c in store.cells(session.run_id)] == [WhatRan(bare=True)] * 2
    assert leftovers(session.run_id) == []


def test_a_failing_cell_is_recorded_and_the_run_goes_on():
    study = (
        STUDY.replace("repetitions: 3", "repetitions: 1")
        .replace(
            "again: {driver: native}",
            "broken: {driver: native, disk: {backing: block, path: /dev/hvbench-no-such-disk}}",
        )
        .replace(f"  - {CPU}", f"  - {CPU}\n  - {{name: disk, tool: dd, size: 16M}}")
    )
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(study, "t"), quick=True))
    assert session.run().status == "failed"
    by_platform = {}
    cells = {c.id: c.platform for c in store.cells(session.run_id)}
    for s in store.samples(session.run_id):
        by_platform.setdefault(cells[s.cell_id], []).append(s)
    assert [s.status for s in by_platform["native"]] == ["ok", "ok"]
    assert [s.status for s in by_platform["broken"]] == ["failed", "failed"]
    assert "hvbench-no-such-disk" in by_platform["broken"][0].error
    assert store.run(session.run_id).status == "failed"
    assert leftovers(session.run_id) == []


@pytest.fixture
def slow_git(tmp_path, monkeypatch):
    """A git on PATH that takes longer than the runner waits for it, as in the nested lab's L1;
    the runner's cached answer forgotten before and after."""
    git = tmp_path / "git"
    git.write_text("#!/bin/sh\nsleep 5\n")
    git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(session_module, "GIT_TIMEOUT_S", 0.2)
    session_module._git_commit.cache_clear()
    yield
    session_module._git_commit.cache_clear()


def test_a_commit_git_cannot_tell_in_time_is_unknown_said_once(slow_git, capsys):
    store = Store()
    study = parse_study(STUDY.replace("repetitions: 3", "repetitions: 1"), "t")
    # each session dropped unrun, which lets go of the host for the next
    first, second = (RunSession.preflight(store, NewRun(study, quick=True)).run_id for _ in "12")
    assert store.run(first).git_commit is None is store.run(second).git_commit
    said = [ln for ln in capsys.readouterr().err.splitlines() if "git commit" in ln]
    assert said == ["hvbench: the run's git commit is unknown (git rev-parse took over 0.2 s)"]


def test_a_platforms_longer_boot_timeout_is_its_start_allowance():
    study = parse_study(
        STUDY.replace("again: {driver: native}", "xen: {driver: xen, boot_timeout: 1200}")
        .replace("native: {driver: native}", "qemu: {driver: qemu, boot_timeout: 60}")
        .replace("baseline: native", "baseline: qemu"),
        "t",
    )
    allowed = {name: start_allowance(s) for name, s in study.platforms.items()}
    assert allowed == {"qemu": START_TIMEOUT_S, "xen": 1200}


def _hvbench(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hvbench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _wait_for_samples(store: Store, run_id: str, count: int) -> None:
    what = f"{count} samples of run {run_id} stored"
    wait_for(lambda: len(store.samples(run_id)) >= count, 120, what, interval=0.2)


def _measuring(run_id: str) -> bool:
    """Whether the cpu workload's stress-ng runs for the run (its report goes to the run's
    scratch, so its command line names the run)."""
    for proc in processes(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if argv and os.path.basename(argv[0]) == "stress-ng" and run_id in " ".join(argv):
            return True
    return False


def _host_scratch() -> set[Path]:
    """Scratch directories of workloads in the host's /tmp (a native instance's must not be
    there: a killed run could not take them back)."""
    return set(Path("/tmp").glob("hvbench.*"))


def test_sigkill_mid_cell_then_cleanup_and_resume_gives_every_sample_once(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    scratch = _host_scratch()
    proc = _hvbench("run", str(study))
    run_id = proc.stdout.readline().split()[1]
    store = Store()
    _wait_for_samples(store, run_id, 2)
    wait_for(lambda: _measuring(run_id), 60, "the third sample measuring")
    proc.kill()
    proc.wait()
    assert store.run(run_id).status == "running"  # nobody could mark it
    assert leftovers(run_id) != []  # the namespace of the killed run is still there

    cleanup = subprocess.run(
        [sys.executable, "-m", "hvbench", "cleanup", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run_id in [r["run"] for r in json.loads(cleanup.stdout)]
    assert leftovers(run_id) == [] and _host_scratch() <= scratch

    resumed = _hvbench("run", "--resume", run_id, "--no-report")
    out, errors = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, errors
    assert out.splitlines()[0] == f"run {run_id}"
    # --no-report: the results stored, neither summary nor HTML report made; where the time
    # went (three lines), then the last line
    assert out.splitlines()[1].startswith("time: ") and len(out.splitlines()) == 5
    assert out.splitlines()[-1] == (
        f"run {run_id}: finished, 0 failed sample(s); no report (hvbench report {run_id} makes it)"
    )
    assert not (REPORTS / f"{run_id}.html").exists()
    samples = store.samples(run_id)
    keys = [(s.cell_id, s.repetition) for s in samples]
    assert len(keys) == 2 * 3 and len(set(keys)) == len(keys)
    assert all(s.status == "ok" for s in samples)
    assert store.run(run_id).status == "finished"
    assert leftovers(run_id) == []


def test_a_finished_run_is_summarised_reported_and_kept_for_the_history(tmp_path):
    """What ``hvbench run`` does as it ends a run (without ``--no-report``): the summary, the
    HTML report, and the figures a history reads in place of analysing the run again."""
    study = tmp_path / "study.yaml"
    study.write_text(STUDY.replace("repetitions: 3", "repetitions: 1"))
    db = f"sqlite:///{tmp_path}/results.db"
    out, errors = _hvbench("run", str(study), "--db", db).communicate(timeout=300)
    run_id = out.splitlines()[0].split()[1]
    html = REPORTS / f"{run_id}.html"
    try:
        assert out.splitlines()[-1] == (
            f"run {run_id}: finished, 0 failed sample(s); report: {html}"
        ), errors
        assert "<html" in html.read_text(encoding="utf-8")
    finally:
        html.unlink(missing_ok=True)
    lines = out.splitlines()
    time_line = next(i for i, line in enumerate(lines) if line.startswith("time: "))
    assert time_line == len(lines) - 4  # where the run's time went, above the last line
    assert lines[time_line + 2].startswith("  workloads: cpu ")
    listed = json.loads(_hvbench("runs", "--json", "--db", db).communicate(timeout=60)[0])
    spent = next(r["time"] for r in listed if r["id"] == run_id)
    # doctor: its platforms checked as `hvbench doctor` checks them, before the first sample
    assert set(spent["steps"]) == {"doctor", "images", "boots", "analysis"}
    assert set(spent["workloads"]) == {"cpu"}
    # each sample of the two platforms lasts over 4 s (four 1 s parts)
    assert spent["workloads"]["cpu"] >= 8
    parts = sum(spent["steps"].values()) + sum(spent["workloads"].values())
    assert parts + spent["other_s"] == pytest.approx(spent["total_s"])
    store = Store(db)
    key, content = store.derived(FIGURES)[run_id]
    assert key == run_key(store.run(run_id))
    assert content == RunFigures.of(analyse(store, run_id)).to_json()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_cleans_up_and_marks_the_run(tmp_path, sig):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    scratch = _host_scratch()
    # Ctrl-C as a terminal delivers it, whatever this test's own disposition: a shell's
    # background job starts with SIGINT ignored, and Python then installs no handler for it
    default = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    proc = _hvbench("run", str(study), preexec_fn=default)
    run_id = proc.stdout.readline().split()[1]
    store = Store()
    _wait_for_samples(store, run_id, 1)
    proc.send_signal(sig)
    _, errors = proc.communicate(timeout=60)
    assert proc.returncode == 130, errors
    assert "Traceback" not in errors
    assert store.run(run_id).status == "interrupted"
    assert leftovers(run_id) == [] and _host_scratch() <= scratch


def test_a_run_interrupted_while_it_claims_the_host_leaves_nothing(monkeypatch):
    """Ctrl-C between the run's ledger and its network: what was claimed is let go, the
    ledger with it (it was left for ``hvbench cleanup``)."""

    def interrupted(*args: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "RunNetwork", interrupted)
    run_id = session_module.new_run_id()
    with pytest.raises(KeyboardInterrupt):
        RunScope.claim(run_id, profile=False, notice=print)
    assert leftovers(run_id) == []


@pytest.mark.parametrize(
    ("adaptive", "expected", "stopped_by", "short"),
    [
        # never precise enough: stops at max, and says so
        ("{ci_target: 0.000001, max_repetitions: 4}", 4, "max_repetitions", ["native|cpu|1"]),
        # precise at once, yet not before five repetitions (the interval of 3 may be luck)
        ("{ci_target: 100, max_repetitions: 6}", 5, "max_repetitions", []),
        # no time for any more
        (
            "{ci_target: 0.000001, max_repetitions: 4, budget_minutes: 0.0001}",
            2,
            "budget_minutes",
            ["native|cpu|1"],
        ),
    ],
)
def test_adaptive_repetitions_are_bounded(adaptive, expected, stopped_by, short):
    text = STUDY.replace("  again: {driver: native}\n", "").replace(
        "repetitions: 3", f"repetitions: 2\nadaptive: {adaptive}"
    )
    store = Store()
    new = NewRun(parse_study(text, "t"))
    session = RunSession.preflight(store, new, judge=imprecise_cells)
    assert session.run().status == "finished"
    reps = [s.repetition for s in store.samples(session.run_id)]
    assert reps == list(range(1, expected + 1))
    record = store.artifacts(session.run_id)["adaptive"]
    assert (record["stopped_by"], record["short"]) == (stopped_by, short)
    noise = analyse(store, session.run_id).noise
    said = [x for x in noise if any(f"after {expected} repetitions" in r for r in x.reasons)]
    assert [x.result.name for x in said] == ([COMPOSITE] if short else [])


def test_adaptive_repetitions_without_a_judge_are_refused_before_the_run_is_stored(tmp_path):
    """The session measures; whether a cell needs more repetitions is the analysis's judgement,
    which its maker gives it: without one, an adaptive study is refused before it is stored."""
    text = STUDY.replace("repetitions: 3", "repetitions: 2\nadaptive: {max_repetitions: 4}")
    store = Store(f"sqlite:///{tmp_path}/results.db")
    with pytest.raises(ValueError, match="adaptive repetitions need a PrecisionJudge"):
        RunSession.preflight(store, NewRun(parse_study(text, "t")))
    assert store.runs() == []


def test_only_headline_metrics_ask_for_more_repetitions(tmp_path):
    """A retransmits count all over the place does not keep a net cell going; its throughput
    does; a cpu cell is judged by its composite, not by a wobbly sub-score."""
    store = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(store)
    net, cpu = b.cell("native", "net"), b.cell("native", "cpu")
    for rep in range(5):
        steady = {"net.x_gbps": [10.0 + 0.01 * rep], "net.retransmits": [float(rep**3)]}
        b.sample(net, rep, steady, headline={"net.x_gbps"})
        b.sample(
            cpu,
            rep,
            {"cpu.a.ops": [100.0 + 0.1 * rep], "cpu.b.ops": [50.0 + 0.05 * rep]},
            headline=set(),
        )
    assert imprecise_cells(store, b.run_id, 0.03, 10) == set()
    b.sample(net, 5, {"net.x_gbps": [5.0], "net.retransmits": [0.0]}, headline={"net.x_gbps"})
    b.sample(cpu, 5, {"cpu.a.ops": [30.0], "cpu.b.ops": [50.0]}, headline=set())
    assert imprecise_cells(store, b.run_id, 0.03, 10) == {"native|net|1", "native|cpu|1"}
    assert imprecise_cells(store, b.run_id, 0.03, 6) == set()  # at the cap


def test_auto_bytes_are_sized_on_the_baseline_native_platforms_disk():
    """dd's size: auto is sized on the disk the study measures natively (its baseline's: a
    block device, say), not on a loop device of native's defaults."""
    study = (
        STUDY.replace(
            "again: {driver: native}",
            "again: {driver: native}\n  disk: {driver: native, disk: "
            "{backing: block, path: /dev/hvbench-no-such-disk}}",
        )
        .replace("baseline: native", "baseline: disk")
        .replace(f"  - {CPU}", "  - {name: disk, tool: dd, size: auto}")
    )
    session = RunSession.preflight(Store(), NewRun(parse_study(study, "t")))
    with pytest.raises(HvbenchError, match=r"calibration: no native instance .*hvbench-no-such"):
        session.run()
    assert leftovers(session.run_id) == []


def test_auto_work_is_sized_once_per_run_and_kept_for_every_platform_and_a_resume(capsys):
    """scale: auto sizes the cpu jobs natively before the first sample; every platform's cell
    stores that work with its settings, and a resumed run takes it from the store."""
    text = STUDY.replace(
        CPU, "{name: cpu, copies: 1, target_seconds: 1, skip: [povray, stockfish, xz, sqlite]}"
    ).replace("repetitions: 3", "repetitions: 2")
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(text, "t")))
    assert session.run().status == "finished"
    assert capsys.readouterr().err.count("sizing the jobs of cpu apps") == 1
    (chosen,) = store.artifacts(session.run_id)["calibration"].values()
    assert set(chosen["work"]) == {"zstd", "aes", "sha256"} and chosen["work"]["aes"] == 1
    assert {json.dumps(c.workload_settings["work"]) for c in store.cells(session.run_id)} == {
        json.dumps(chosen["work"])
    }
    resumed = RunSession.preflight(store, Resume(session.run_id))
    assert resumed.run().status == "finished"
    assert "sizing" not in capsys.readouterr().err
    assert store.artifacts(session.run_id)["calibration"] == {"0": chosen}


def test_the_default_studys_examination_of_the_host_is_a_step_of_its_time(tmp_path, monkeypatch):
    """The default study keeps the platforms doctor finds usable, and says in one line what it
    leaves out; the examination (a KVM probe and the images it needs: 41 s on a fresh host of
    this kind) is the step ``doctor`` of the run's time, not part of "other". The platforms are
    cut to native after the real examination, so that the run takes seconds."""
    examine = doctor.unavailable

    def native_only(platforms):
        examine(platforms)  # the real examination, timed
        return {
            name: doctor.Finding("driver", settings.driver, False, "cut to native by the test")
            for name, settings in platforms.items()
            if name != "native"
        }

    monkeypatch.setattr(doctor, "unavailable", native_only)
    db = f"sqlite:///{tmp_path}/results.db"
    result = CliRunner().invoke(cli_app, ["run", "--quick", "--no-report", "--db", db])
    assert result.exit_code == 0, result.output
    assert result.output.count("leaving out what this host cannot run") == 1
    (run,) = Store(db).runs()
    spent = TimeRecord.from_json(Store(db).artifacts(run.id)[TIME])
    assert set(spent.steps) == {"doctor", "images", "boots"}
    assert spent.steps["doctor"] > 0
    assert spent.other_s() < spent.total_s / 2


def test_a_platform_gets_a_data_disk_only_where_a_disk_workload_runs_on_it():
    """One guest for all (the same tools everywhere), but no data disk made and formatted at
    every boot of a platform no disk workload runs on (the default study's qemu-emulated)."""
    study = parse_study(
        "name: n\nplatforms:\n  a: {driver: native}\n  b: {driver: native}\n"
        "workloads:\n  - {name: disk, tool: dd, size: 64M, platforms: [a]}\n  - {name: boot}\n",
        "needs",
    )
    a, b = needs_of(study, "a"), needs_of(study, "b")
    assert a.data_disk and not b.data_disk
    assert a.tools == b.tools == needs_of(study).tools and "dd" in a.tools
