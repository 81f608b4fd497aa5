"""hvbench compare: verdicts on a planted regression, on pure noise, many metrics and whole runs
that differ, and its exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from test_analysis import RunBuilder
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.compare import compare, judge_family
from hvbench.cli.reporting import compare as compare_cmd
from hvbench.errors import HvbenchError
from hvbench.report import render_comparison
from hvbench.store import Store


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path}/results.db")


def write(store: Store, run_id: str, throughput: np.ndarray, elapsed: np.ndarray) -> None:
    """A run with two headline metrics (disk throughput, kernbench's time) and a side one."""
    b = RunBuilder(store, run_id=run_id)
    cell = b.cell("kvm", "disk")
    for rep, (t, e) in enumerate(zip(throughput, elapsed, strict=True)):
        b.sample(
            cell,
            rep,
            {"disk.write_mbps": [float(t)], "disk.cpu_pct": [50.0 + rep % 2]},
            kinds={"disk.cpu_pct": ("%", False)},
        )
        b.sample(b.cell("kvm", "kernbench"), rep, {"kernbench.elapsed_s": [float(e)]}, "s", False)


def app() -> typer.Typer:
    cli = typer.Typer()
    cli.command()(compare_cmd)
    return cli


def test_planted_regression_is_found_with_its_direction(store):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 10), rng.normal(50, 0.5, 10))
    # throughput 10% lower (worse), elapsed 10% lower (better)
    write(store, "after", rng.normal(90, 1, 10), rng.normal(45, 0.5, 10))
    # allowance 0: a host whose runs do not differ as a whole (test_run_to_run_* for the rest)
    c = compare(analyse(store, "before"), analyse(store, "after"), allowance=0.0)
    verdicts = {ch.name: ch for ch in c.changes}
    assert verdicts["disk.write_mbps"].verdict == "regression"
    assert verdicts["disk.write_mbps"].change == pytest.approx(-0.10, abs=0.02)
    assert verdicts["disk.write_mbps"].ci_low < -0.05
    assert verdicts["kernbench.elapsed_s"].verdict == "improvement"
    assert [ch.name for ch in c.regressions] == ["disk.write_mbps"]
    assert {ch.name for ch in c.changes if ch.headline} == {
        "disk.write_mbps",
        "kernbench.elapsed_s",
    }
    assert c.exit_code == 1
    text = render_comparison(c, "md")
    assert "regression: kvm / disk / 1 inst. / disk.write_mbps: 10" in text
    assert "Holm's step-down over them" in text


@pytest.mark.parametrize("seed", range(5))
def test_pure_noise_in_a_store_is_not_called(store, seed):
    rng = np.random.default_rng(seed)
    write(store, "a", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    write(store, "b", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    a, b = analyse(store, "a"), analyse(store, "b")
    # one run a side, the default run-to-run allowance: nothing called, the interval too wide
    # to rule out a 5% change
    c = compare(a, b)
    assert {ch.verdict for ch in c.changes} <= {"inconclusive"}
    assert c.exit_code == 3
    # a quiet host (allowance 0): 1% noise, 5 repetitions settle it
    quiet = compare(a, b, allowance=0.0)
    assert {ch.verdict for ch in quiet.changes} <= {"no significant change", "below threshold"}
    assert quiet.exit_code == 0


def test_small_significant_change_is_below_threshold(store):
    rng = np.random.default_rng(3)
    write(store, "a", rng.normal(100, 0.2, 10), rng.normal(50, 0.1, 10))
    write(store, "b", rng.normal(98, 0.2, 10), rng.normal(50, 0.1, 10))
    a, b = analyse(store, "a"), analyse(store, "b")
    c = compare(a, b, allowance=0.0)
    ch = next(ch for ch in c.changes if ch.name == "disk.write_mbps")
    assert ch.judged.p_holm < 0.01 and ch.verdict == "below threshold"
    assert not c.regressions
    assert compare(a, b, threshold=0.01, allowance=0.0).regressions


def aa_false_regressions(
    rng: np.random.Generator, trials: int, metrics: int, n: int, run_sd: float, **kw
) -> float:
    """Share of simulated A/A comparisons (``metrics`` metrics, ``n`` repetitions a side, 1%
    noise within a run, each run's mean off by ``run_sd`` at random) with a regression called."""
    scale = rng.uniform(10, 1000, (1, metrics, 1))
    shape = (trials, metrics, 1)
    a, b = (
        scale * (1 + rng.normal(0, run_sd, shape)) * (1 + rng.normal(0, 0.01, (trials, metrics, n)))
        for _ in range(2)
    )
    called = 0
    for ta, tb in zip(a, b, strict=True):
        judged = judge_family(list(zip(ta, tb, strict=True)), [True] * metrics, **kw)
        called += any(j.verdict == "regression" for j in judged)
    return called / trials


def test_aa_over_100_metrics_keeps_false_regressions_rare():
    """A/A, 100 metrics: Holm's step-down over the family keeps any false regression to about
    alpha (1%); judging each metric at alpha alone called one in several % of runs."""
    rng = np.random.default_rng(31)
    assert aa_false_regressions(rng, 400, 100, 5, 0.0, allowance=0.0) <= 0.05
    # even calling every significant change, however small
    assert aa_false_regressions(rng, 400, 100, 5, 0.0, allowance=0.0, threshold=0.0) <= 0.05
    x = rng.normal(100, 1, (2, 200, 100, 5))
    uncorrected = np.mean(
        [
            any(
                j.ratio.p_value < 0.01 and j.ratio.estimate < 1
                for j in judge_family(list(zip(ta, tb, strict=True)), [True] * 100)
            )
            for ta, tb in zip(x[0], x[1], strict=True)
        ]
    )
    assert uncorrected > 0.2


def test_run_to_run_variance_needs_the_allowance():
    """Whole runs off by 3% (sd), 1% within: between two runs, the repetitions alone call a
    false regression in nearly every A/A comparison of 100 metrics; with the 3% allowance, or
    with three runs a side as the observations, in at most 5%."""
    rng = np.random.default_rng(32)
    assert aa_false_regressions(rng, 50, 100, 5, 0.03, allowance=0.0) > 0.5
    assert aa_false_regressions(rng, 400, 100, 5, 0.03, allowance=0.03) <= 0.05
    # 3 runs a side: each run's mean (5 repetitions at 1%: sd 0.45%) is one observation
    trials, scale = 300, rng.uniform(10, 1000, (1, 1, 100))
    a, b = (
        scale
        * (1 + rng.normal(0, 0.03, (trials, 3, 100)))
        * (1 + rng.normal(0, 0.0045, (trials, 3, 100)))
        for _ in range(2)
    )
    called = 0
    for ta, tb in zip(a, b, strict=True):
        judged = judge_family(list(zip(ta.T, tb.T, strict=True)), [True] * 100)
        called += any(j.verdict == "regression" for j in judged)
    assert called / trials <= 0.05


@pytest.mark.parametrize(("metrics", "n", "sd"), [(10, 10, 5.0), (100, 10, 3.0)])
def test_detectable_change_is_found_most_of_the_time(metrics, n, sd):
    """A change the size compare reports as detectable (80% power at Holm's first step, beyond
    the threshold) planted in one metric of the family is called a regression 68–88% of the
    time at 10 repetitions (the data's spread is itself an estimate: measured 75% and 76%)."""
    rng = np.random.default_rng(33)

    def family(change: float) -> list:
        a, b = rng.normal(100, sd, (2, metrics, n))
        b[0] -= 100 * change  # the first metric regresses by ``change``
        return judge_family(list(zip(a, b, strict=True)), [True] * metrics)

    size = float(np.median([family(0.0)[0].detectable for _ in range(200)]))
    assert 0.05 < size < 0.2
    found = np.mean([family(size)[0].verdict == "regression" for _ in range(500)])
    assert 0.68 <= found <= 0.88, found


def test_cli_exit_codes(store, tmp_path):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 6), rng.normal(50, 0.5, 6))
    write(store, "after", rng.normal(80, 1, 6), rng.normal(50, 0.5, 6))
    runner = CliRunner()
    out = tmp_path / "cmp.md"
    res = runner.invoke(app(), ["before", "after", "--db", store.url, "-o", str(out)])
    assert res.exit_code == 1, res.output  # 20%: beyond the 3% run-to-run allowance too
    assert "| regression |" in out.read_text()
    res = runner.invoke(app(), ["before", "before", "--db", store.url])
    assert res.exit_code == 3, res.output  # one run a side cannot rule out 5% at 3% allowance
    assert "no significant regression" in res.output and "inconclusive: kvm" in res.output
    res = runner.invoke(app(), ["before", "before", "--db", store.url, "--allowance", "0"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app(), ["before", "missing", "--db", store.url])
    assert isinstance(res.exception, HvbenchError)  # the main app turns it into exit code 2
    res = runner.invoke(app(), ["before", "after", "--db", store.url, "--format", "pdf"])
    assert isinstance(res.exception, HvbenchError) and "--format 'pdf'" in str(res.exception)
    res = runner.invoke(app(), ["--help"])
    assert "Exit codes" in res.output and "interleaved" in res.output


def test_one_repetition_a_side_is_not_tested(store):
    write(store, "a", np.array([100.0]), np.array([50.0]))
    write(store, "b", np.array([60.0]), np.array([50.0]))
    c = compare(analyse(store, "a"), analyse(store, "b"))
    assert {ch.verdict for ch in c.changes} == {"not tested"}
    assert c.exit_code == 3 and not c.regressions
    assert "not tested: kvm / disk / 1 inst. / disk.write_mbps" in render_comparison(c, "md")


def test_several_runs_per_side_are_the_observations(store):
    rng = np.random.default_rng(4)
    levels = {"a1": 100, "a2": 101, "a3": 99, "b1": 80, "b2": 81, "b3": 79}
    for run_id, level in levels.items():
        write(store, run_id, rng.normal(level, 1, 3), rng.normal(50, 0.5, 3))
    a = [analyse(store, r) for r in ("a1", "a2", "a3")]
    b = [analyse(store, r) for r in ("b1", "b2", "b3")]
    c = compare(a, b)
    ch = next(ch for ch in c.changes if ch.name == "disk.write_mbps")
    assert (ch.judged.ratio.n_a, ch.judged.ratio.n_b) == (3, 3) and c.allowance == 0
    assert ch.a.mean == pytest.approx(
        np.mean([r.result("kvm", "disk", ch.name, 1).single.mean for r in a])
    )
    assert ch.verdict == "regression" and c.run_spread is not None and 0 < c.run_spread < 0.05
    text = render_comparison(c, "md")
    assert "observations: runs, 3 against 3" in text and "b1,b2,b3 against a1,a2,a3" in text
    res = CliRunner().invoke(app(), ["a1,a2,a3", "b1,b2,b3", "--db", store.url, "-f", "json"])
    assert res.exit_code == 1, res.output
    with pytest.raises(HvbenchError, match="1 run"):
        compare(a[0], b)
    with pytest.raises(HvbenchError, match="--allowance"):
        compare(a, b, allowance=0.02)


def test_comparison_as_json_lines(store):
    rng = np.random.default_rng(1)
    write(store, "before", rng.normal(100, 1, 6), rng.normal(50, 0.5, 6))
    write(store, "after", rng.normal(80, 1, 6), rng.normal(50, 0.5, 6))
    c = compare(analyse(store, "before"), analyse(store, "after"))
    lines = [json.loads(x) for x in render_comparison(c, "json").splitlines()]
    by_name = {x["metric"]: x for x in lines}
    meta = by_name["disk.write_mbps"]["metadata"]
    assert meta["verdict"] == "regression" and meta["gating"] and meta["family"] == "headline"
    assert by_name["disk.write_mbps"]["value"] == pytest.approx(-0.2, abs=0.02)
    assert meta["correction"] == "holm" and meta["family_size"] == 2
    assert meta["p_value"] <= meta["p_holm"] < 0.01
    assert meta["ci_low"] < -0.2 < meta["ci_high"] < 0 and meta["ci_bounded"]
    assert meta["allowance"] == 0.03 and meta["observations"] == "repetitions"
    assert meta["detectable"] > 0.05
    side = by_name["disk.cpu_pct"]["metadata"]
    assert side["family"] == "other" and not side["gating"] and side["family_size"] == 1


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


def test_runs_whose_calibration_chose_other_work_are_said_to_differ(store):
    """scale: auto sizes the cpu jobs on each run's host: runs of two hosts (or of one host on
    two days) may do different work, and compare says so beside the figures it compares."""
    rng = np.random.default_rng(3)
    for run_id, xz in (("monday", 3), ("tuesday", 4)):
        b = RunBuilder(store, run_id=run_id)
        settings = {"name": "cpu", "scale": "auto", "work": {"xz": xz, "zstd": 236}}
        cell = b.cell("kvm", "cpu apps", workload_settings=settings)
        for rep, v in enumerate(rng.normal(100, 1, 5)):
            b.sample(cell, rep, {"cpu.apps.xz.mib_per_s": [float(v)]})
    c = compare(analyse(store, "monday"), analyse(store, "tuesday"))
    assert c.work_apart == {"cpu apps": "work.xz 3 → 4"}
    text = render_comparison(c, "md")
    assert "- cpu apps: A and B did different work (work.xz 3 → 4)" in text
    lines = [json.loads(x) for x in render_comparison(c, "json").splitlines()]
    assert lines and all(line["metadata"]["same_work"] is False for line in lines)
    same = compare(analyse(store, "monday"), analyse(store, "monday"))
    assert same.work_apart == {}
