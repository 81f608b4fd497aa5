"""The end of ``hvbench run``: one screen (the matrix of verdicts, the claims, the warnings
counted, the time, the report's path), the same matrix as data in ``--json`` and the JSON lines,
and every table still in ``hvbench report``."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from builders import RunBuilder
from known_runs import default_run, real_claims_run
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.claims import HELD, REFUTED
from hvbench.analysis.matrix import MARKS
from hvbench.analysis.readings import Reading
from hvbench.analysis.warning_counts import WarningCounts
from hvbench.cli import app
from hvbench.cli.run import print_end
from hvbench.report import render
from hvbench.report.summary import print_summary, summarize
from hvbench.report.tables import all_tables
from hvbench.store import Store, TimeRecord

SCREEN_LINES = 40
COLUMNS = 80


@pytest.fixture
def default_store(tmp_path) -> Store:
    """A run of the packaged default study as it comes out on a 2-core host without KVM."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    default_run(s)
    return s


def screen_lines(text: str, columns: int = COLUMNS) -> int:
    """Lines a terminal ``columns`` wide shows ``text`` in, long lines wrapped."""
    return sum(max(1, math.ceil(cell_len(line) / columns)) for line in text.splitlines())


def test_the_default_studys_end_is_one_screen_at_80_columns(default_store):
    """The end of a default run (after its progress bar) at 80 columns: at most 40 lines,
    with the matrix of every platform and workload, the warnings counted with where to read
    them, where the time went and the report's path."""
    a = analyse(default_store, "latest")
    spent = TimeRecord(
        total_s=512.0,
        steps={"images": 80.0, "boots": 120.0, "calibration": 20.0, "analysis": 12.0},
        workloads={c.workload: 60.0 for c in a.cells},
    )
    out = io.StringIO()
    last = f"run {a.run_id}: finished, 0 failed sample(s); report: /root/x/{a.run_id}.html"
    print_end(Console(file=out, width=COLUMNS), a.run_id, summarize(a), spent, last)
    text = out.getvalue()
    assert screen_lines(text) <= SCREEN_LINES, text
    assert all(cell_len(line) <= COLUMNS for line in text.splitlines()[:-1]), text
    for label in ("qemu-virtio [tcg]", "qemu-emulated [tcg]", "uml", "container", "gvisor"):
        assert label in text
    header = text.split("─")[0]  # the workloads' names, above the matrix's rule
    assert all(w in header for w in ("cpu (", "disk (dd)", "net (iperf3)"))
    # native does not boot: no % of it; each platform's boot is an absolute time on its line
    assert "boot to ready, 95% intervals: qemu-virtio [tcg] " in " ".join(text.split())
    assert "no figure against native" not in text
    assert "warnings: " in text and f"hvbench report {a.run_id}" in " ".join(text.split())
    assert "time: 8 min 32 s in all" in text and text.splitlines()[-1] == last
    assert "noisy figures, worst first" not in text  # the tables are the report's


def test_the_matrix_is_data_in_the_json_lines(default_store):
    """``hvbench report --format json`` holds the matrix, one line a cell, as
    ``summarize(...).as_json()`` has it (what ``hvbench run --json`` prints)."""
    res = CliRunner().invoke(
        app, ["report", "latest", "--format", "json", "--db", default_store.url]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    cells = [x for x in lines if x["metric"] == "verdict"]
    matrix = summarize(analyse(default_store, "latest")).as_json()["matrix"]
    keys = set(matrix[0])
    assert [{k: c["metadata"][k] for k in keys} for c in cells] == matrix
    assert all(c["value"] == c["metadata"]["pct_of_baseline"] for c in cells)
    by_cell = {(m["label"], m["workload"].split()[0]): m for m in matrix}
    # the study leaves the cpu programs and dd out of qemu-emulated: no cell, not an empty one
    assert ("qemu-emulated [tcg]", "cpu") not in by_cell
    assert ("qemu-emulated [tcg]", "net") in by_cell
    cpu = by_cell["qemu-virtio [tcg]", "cpu"]
    assert (
        cpu["reading"] == Reading.LOSS and cpu["ci_low"] < cpu["pct_of_baseline"] < cpu["ci_high"]
    )
    assert cpu["pct_of_baseline"] == pytest.approx(8, abs=2)
    assert cpu["text"].startswith(f"{cpu['text'].split('%')[0]}% [")
    container = by_cell["container", "cpu"]
    assert container["reading"] in (Reading.EQUIVALENT, Reading.INCONCLUSIVE)
    assert container["why"]  # what it reads as, in words


def test_a_left_out_cell_says_so(tmp_path):
    """A platform whose samples all failed is a cell that says it was left out, not a gap."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    for platform in ("native", "kvm"):
        cell = b.cell(platform, "disk")
        for rep, v in enumerate([100.0, 101.0, 99.0]):
            ok = platform == "native"
            b.sample(
                cell, rep, {"disk.x": [v]}, headline={"disk.x"}, status="ok" if ok else "failed"
            )
    s_ = summarize(analyse(s, "latest"))
    (v,) = s_.verdicts
    assert (v.label, v.reading, v.text) == ("kvm", Reading.LEFT_OUT, "")
    out = io.StringIO()
    print_end(Console(file=out, width=COLUMNS), "run-a", s_, TimeRecord(), "last")
    assert "× left out" in out.getvalue()


def test_hvbench_report_still_prints_every_table(default_store):
    """The run's end is a screen; ``hvbench report`` keeps every table."""
    res = CliRunner().invoke(app, ["report", "latest", "--db", default_store.url])
    assert res.exit_code == 0, res.output
    tables = all_tables(analyse(default_store, "latest"))
    assert len(tables) > 10
    assert all(f"### {t.title}" in res.stdout for t in tables)
    assert "## Warnings" in res.stdout and "noisy figures, worst first" in res.stdout


def test_run_json_ends_with_the_matrix_the_json_lines_hold(tmp_path):
    """A real run (two native platforms) with ``--json``: stdout is one JSON document, its
    summary's matrix the one ``hvbench report --format json`` gives; the run's id on stderr."""
    study = tmp_path / "study.yaml"
    study.write_text(
        """\
name: summary-json
baseline: native
platforms:
  native: {driver: native}
  again: {driver: native}
workloads:
  - {name: cpu, suite: micro, integer: {duration: 1}, float: {duration: 1},
     memory: {duration: 1}, branchy: {duration: 1}}
repetitions: 2
"""
    )
    db = f"sqlite:///{tmp_path}/results.db"
    res = CliRunner().invoke(app, ["run", str(study), "--json", "--db", db])
    assert res.exit_code == 0, res.output
    ended = json.loads(res.stdout)
    html = Path(ended["report"])
    try:
        assert html.name == f"{ended['run']}.html" and html.exists()
    finally:
        html.unlink(missing_ok=True)
    assert f"run {ended['run']}" in res.stderr
    assert ended["status"] == "finished" and ended["failed_samples"] == 0
    assert ended["time"]["total_s"] > 0
    (cell,) = ended["summary"]["matrix"]
    assert (cell["label"], cell["workload"].split()[0]) == ("again", "cpu")
    assert cell["reading"] in MARKS and cell["text"] and cell["pct_of_baseline"] > 0
    report = CliRunner().invoke(app, ["report", ended["run"], "--format", "json", "--db", db])
    lines = [json.loads(line) for line in report.stdout.splitlines()]
    (verdict,) = [x["metadata"] for x in lines if x["metric"] == "verdict"]
    assert {k: verdict[k] for k in cell} == cell


def test_the_claims_outcomes_are_counted_and_those_not_held_said(tmp_path):
    """examples/tcg-claims.yaml on real figures (one claim held, one refuted, one
    inconclusive): the end counts them and gives a line to each that did not hold; the JSON has
    every claim."""
    s = Store(f"sqlite:///{tmp_path}/real.db")
    real_claims_run(s)
    summary = summarize(analyse(s, "latest"))
    outcomes = [c["outcome"] for c in summary.as_json()["claims"]]
    assert outcomes == [HELD, REFUTED, Reading.INCONCLUSIVE]
    out = io.StringIO()
    print_summary(Console(file=out, width=COLUMNS), summary, "hvbench report run-a")
    text = out.getvalue()
    assert "claims: 1 refuted, 1 inconclusive, 1 held" in text.splitlines()
    said = " ".join(text.split("claims: ", 1)[1].split())  # unwrapped
    assert said.count("claim: ") == 2 and "at most 60 s" not in said  # the held one: counted
    assert said.index(f": {REFUTED}") < said.index(f": {Reading.INCONCLUSIVE}")


def test_the_default_runs_end_shows_each_platforms_boot(default_store):
    """Boot, the seeds' own headline, on the first screen and in --json: each platform's boot
    to ready with its interval, in absolute seconds (native boots nothing: it is not named,
    and nothing is set against it); "boot: no figure against native" no longer said."""
    s = summarize(analyse(default_store, "default"))
    labels = [b.label for b in s.boots]
    assert labels == [p for p in s.platforms if not p.startswith("native")], labels
    for b in s.boots:
        assert b.ready is not None and b.all_ready is None
        assert b.ready.ci_low_s is not None and b.ready.ci_low_s <= b.ready.mean_s
        assert b.ready.ci_high_s is not None and b.ready.mean_s <= b.ready.ci_high_s
    assert not any("boot" in w for w in s.elsewhere)
    out = Console(file=io.StringIO(), width=COLUMNS)
    print_summary(out, s, "hvbench report default")
    shown = " ".join(out.file.getvalue().split())
    assert "boot to ready, 95% intervals: qemu-virtio [tcg] " in shown, shown
    assert "no figure against native" not in shown
    booted = json.loads(json.dumps(s.as_json()))["boot"]
    assert [b["platform"] for b in booted] == labels
    assert all(b["ready"]["ci_low_s"] <= b["ready"]["mean_s"] for b in booted)


def test_a_storms_end_shows_all_ready_at_its_largest_count(tmp_path):
    """A storm of 1 and 8: boot to ready at 1, all 8 ready at the largest count, with
    intervals; the HTML report's first screen says the same line."""
    store = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(store)
    for count, ready in {1: 0.08, 8: 0.3}.items():
        cid = b.cell("runc", "boot", count, "container")
        for rep, noise in enumerate([0.97, 1.0, 1.04]):
            values = {
                "boot.ready_s": [ready * noise] * count,
                "boot.storm.all_ready_s": [ready * noise * 1.5] + [None] * (count - 1),
            }
            b.sample(cid, rep, values, "s", False, headline={"boot.ready_s"})
    s = summarize(analyse(store, b.run_id))
    (boot,) = s.boots
    assert boot.ready is not None and boot.ready.instances == 1
    assert boot.all_ready is not None and boot.all_ready.instances == 8
    assert boot.text().startswith(f"runc {boot.ready.text} s, all 8 ready in ")
    html = tmp_path / "report.html"
    assert (
        CliRunner()
        .invoke(app, ["report", b.run_id, "--db", store.url, "--format", "html", "-o", str(html)])
        .exit_code
        == 0
    )
    assert "all 8 ready in " in html.read_text()


def test_a_boot_as_long_in_every_repetition_is_within_its_millisecond(tmp_path):
    """Boot figures are rounded to the millisecond: three equal ones read as that, with an
    interval, not as "identical repetitions: resolution unknown" (a real run's container boot,
    0.065 s three times)."""
    b = RunBuilder(Store(f"sqlite:///{tmp_path}/results.db"))
    cid = b.cell("runc", "boot", 1, "container")
    for rep in range(3):
        b.sample(
            cid, rep, {"boot.ready_s": [0.065]}, "s", False, headline={"boot.ready_s"},
            resolutions={"boot.ready_s": [0.001]},
        )  # fmt: skip
    (boot,) = summarize(analyse(b.store, b.run_id)).boots
    assert boot.ready is not None and "unknown" not in boot.ready.text, boot.ready.text
    assert boot.ready.ci_low_s is not None and boot.ready.ci_high_s is not None
    assert boot.ready.ci_low_s <= 0.065 <= boot.ready.ci_high_s


def test_the_warnings_counted_are_one_count_at_the_end_in_json_and_in_the_reports(
    default_store,
):
    """A default run's warnings, counted once from its analysis (``WarningCounts``): the same
    count at the end of ``hvbench run``, in its ``--json`` summary, and at the top of the HTML
    and Markdown reports (which once counted the noise table's rows and the other warnings
    alone, where the end counted the noisy side figures and the host's conditions too)."""
    a = analyse(default_store, "latest")
    counts = WarningCounts.of(a)
    line = counts.line()
    assert line is not None and counts.noisy_figures and counts.noisy_side_figures
    out = io.StringIO()
    print_end(Console(file=out, width=COLUMNS), a.run_id, summarize(a), TimeRecord(1.0), "end")
    assert f"warnings: {line};" in " ".join(out.getvalue().split())
    as_json = json.loads(json.dumps(summarize(a).as_json()))["warnings"]
    assert as_json == counts.as_json() and WarningCounts(**as_json) == counts
    assert f'<a href="#warnings">warnings: {line}</a>' in render(a, "html")
    assert f"[warnings: {line}](#warnings)" in render(a, "md")
