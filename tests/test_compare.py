"""hvbench compare: verdicts on a planted regression, on pure noise, and its exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from test_analysis import RunBuilder
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.compare import compare, judge
from hvbench.analysis.stats import welch
from hvbench.cli.reporting import compare as compare_cmd
from hvbench.errors import HvbenchError
from hvbench.report import render_comparison
from hvbench.store import Store


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path}/results.db")


def write(store: Store, run_id: str, throughput: np.ndarray, elapsed: np.ndarray) -> None:
    b = RunBuilder(store, run_id=run_id)
    cell = b.cell("kvm", "disk")
    for rep, (t, e) in enumerate(zip(throughput, elapsed, strict=True)):
        b.sample(cell, rep, {"disk.write_mbps": [float(t)]})
        b.sample(b.cell("kvm", "kernbench"), rep, {"kernbench.elapsed_s": [float(e)]}, "s", False)


def test_planted_regression_is_found_with_its_direction(store):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 10), rng.normal(50, 0.5, 10))
    # throughput 10% lower (worse), elapsed 10% lower (better)
    write(store, "after", rng.normal(90, 1, 10), rng.normal(45, 0.5, 10))
    c = compare(analyse(store, "before"), analyse(store, "after"))
    verdicts = {ch.name: ch for ch in c.changes}
    assert verdicts["disk.write_mbps"].verdict == "regression"
    assert verdicts["disk.write_mbps"].diff.change == pytest.approx(-0.10, abs=0.02)
    assert verdicts["disk.write_mbps"].diff.ci_low < -0.05
    assert verdicts["kernbench.elapsed_s"].verdict == "improvement"
    assert [ch.name for ch in c.regressions] == ["disk.write_mbps"]
    text = render_comparison(c, "md")
    assert "regression: kvm / disk / 1 inst. / disk.write_mbps: 10" in text


@pytest.mark.parametrize("seed", range(5))
def test_pure_noise_in_a_store_is_not_called(store, seed):
    rng = np.random.default_rng(seed)
    write(store, "a", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    write(store, "b", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    c = compare(analyse(store, "a"), analyse(store, "b"))
    assert {ch.verdict for ch in c.changes} <= {"no significant change", "below threshold"}


def test_false_regression_rate_on_pure_noise_is_below_alpha():
    """3% noise, 5 repetitions a side: a regression is called in far fewer than 1% of cases."""
    rng = np.random.default_rng(11)
    trials = 2000
    called = sum(
        judge(welch(rng.normal(100, 3, 5), rng.normal(100, 3, 5)), True) == "regression"
        for _ in range(trials)
    )
    assert called / trials < 0.01


def test_small_significant_change_is_below_threshold(store):
    rng = np.random.default_rng(3)
    write(store, "a", rng.normal(100, 0.2, 10), rng.normal(50, 0.1, 10))
    write(store, "b", rng.normal(98, 0.2, 10), rng.normal(50, 0.1, 10))
    c = compare(analyse(store, "a"), analyse(store, "b"))
    ch = next(ch for ch in c.changes if ch.name == "disk.write_mbps")
    assert ch.diff.significant(0.01) and ch.verdict == "below threshold"
    assert not c.regressions
    assert compare(analyse(store, "a"), analyse(store, "b"), threshold=0.01).regressions


def test_cli_exit_codes(store, tmp_path):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 6), rng.normal(50, 0.5, 6))
    write(store, "after", rng.normal(80, 1, 6), rng.normal(50, 0.5, 6))
    app = typer.Typer()
    app.command()(compare_cmd)
    runner = CliRunner()
    out = tmp_path / "cmp.md"
    res = runner.invoke(app, ["before", "after", "--db", store.url, "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "| regression |" in out.read_text()
    res = runner.invoke(app, ["before", "before", "--db", store.url])
    assert res.exit_code == 0, res.output
    assert "no significant regression" in res.output
    res = runner.invoke(app, ["before", "missing", "--db", store.url])
    assert isinstance(res.exception, HvbenchError)  # the main app turns it into exit code 2
    res = runner.invoke(app, ["before", "after", "--db", store.url, "--format", "pdf"])
    assert isinstance(res.exception, HvbenchError) and "--format 'pdf'" in str(res.exception)


def test_comparison_as_json_lines(store):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 6), rng.normal(50, 0.5, 6))
    write(store, "after", rng.normal(80, 1, 6), rng.normal(50, 0.5, 6))
    c = compare(analyse(store, "before"), analyse(store, "after"))
    lines = [json.loads(x) for x in render_comparison(c, "json").splitlines()]
    by_name = {x["metric"]: x for x in lines}
    assert by_name["disk.write_mbps"]["metadata"]["verdict"] == "regression"
    assert by_name["disk.write_mbps"]["value"] == pytest.approx(-0.2, abs=0.02)


def test_a_platform_that_ran_under_another_accelerator_is_named_so(store):
    """qemu-virtio under KVM in A and under TCG in B: the regression is there, and the output
    says that the accelerator changed, not the platform alone."""
    rng = np.random.default_rng(2)
    for run_id, accel, mean in (("kvm-run", "kvm", 100), ("tcg-run", "tcg", 20)):
        b = RunBuilder(store, run_id=run_id)
        settings = {"accel": "auto", "resolved": {"accel": accel, "accel_reason": "probe"}}
        cell = b.cell("qemu-virtio", "disk", platform_settings=settings)
        for rep, v in enumerate(rng.normal(mean, 1, 5)):
            b.sample(cell, rep, {"disk.write_mbps": [float(v)]})
    c = compare(analyse(store, "kvm-run"), analyse(store, "tcg-run"))
    assert [ch.verdict for ch in c.changes] == ["regression"]
    text = render_comparison(c, "md")
    assert "- qemu-virtio [kvm → tcg]: ran differently in A and B" in text
    assert "regression: qemu-virtio [kvm → tcg] / disk / 1 inst. / disk.write_mbps" in text
    (line,) = [json.loads(x) for x in render_comparison(c, "json").splitlines()]
    assert (line["metadata"]["accel_a"], line["metadata"]["accel_b"]) == ("kvm", "tcg")
    same = compare(analyse(store, "tcg-run"), analyse(store, "tcg-run"))
    assert "| qemu-virtio [tcg] | disk |" in render_comparison(same, "md")
