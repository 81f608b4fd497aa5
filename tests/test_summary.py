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
from hvbench.analysis.stats import EQUIVALENT, INCONCLUSIVE, LOSS
from hvbench.cli import app
from hvbench.cli.run import print_end
from hvbench.report.summary import LEFT_OUT, MARKS, print_summary, summarize
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
    # native does not boot: no % of it, and the line says where boot's figures are
    assert f"boot: no figure against native to show; in hvbench report {a.run_id}" in text
    assert "warnings: " in text and f"hvbench report {a.run_id}" in text
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
    assert cpu["reading"] == LOSS and cpu["ci_low"] < cpu["pct_of_baseline"] < cpu["ci_high"]
    assert cpu["pct_of_baseline"] == pytest.approx(8, abs=2)
    assert cpu["text"].startswith(f"{cpu['text'].split('%')[0]}% [")
    container = by_cell["container", "cpu"]
    assert container["reading"] in (EQUIVALENT, INCONCLUSIVE)
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
    assert (v.label, v.reading, v.text) == ("kvm", LEFT_OUT, "")
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
    assert outcomes == [HELD, REFUTED, INCONCLUSIVE]
    out = io.StringIO()
    print_summary(Console(file=out, width=COLUMNS), summary, "hvbench report run-a")
    text = out.getvalue()
    assert "claims: 1 refuted, 1 inconclusive, 1 held" in text.splitlines()
    said = " ".join(text.split("claims: ", 1)[1].split())  # unwrapped
    assert said.count("claim: ") == 2 and "at most 60 s" not in said  # the held one: counted
    assert said.index(f": {REFUTED}") < said.index(f": {INCONCLUSIVE}")
