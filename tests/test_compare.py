"""hvbench compare: verdicts on a planted regression, on pure noise, many metrics and whole runs
that differ, and its exit codes."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import numpy as np
import pytest
import typer
from builders import RunBuilder
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.compare import (
    ALARM,
    ALLOWANCE,
    FEWEST,
    THRESHOLD,
    Observed,
    compare,
    judge_family,
)
from hvbench.analysis.settling import repetitions_to_settle, run_to_run, runs_to_settle
from hvbench.analysis.stats import ALPHA_ACROSS_RUNS
from hvbench.cli.reporting import compare as compare_cmd
from hvbench.cli.reporting import compare_exit
from hvbench.errors import HvbenchError
from hvbench.report import render_comparison
from hvbench.store import Store, WhatRan


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
    assert compare_exit(c) == 1
    text = render_comparison(c, "md")
    assert "regression: kvm / disk / 1 inst. / disk.write_mbps: 10" in text
    assert "Holm's step-down over them" in text
    html = render_comparison(c, "html")  # each row styled by its verdict's kind
    assert html.count('<tr class="regression">') == html.count('<tr class="improvement">') == 1


@pytest.mark.parametrize("seed", range(5))
def test_pure_noise_in_a_store_is_not_called(store, seed):
    rng = np.random.default_rng(seed)
    write(store, "a", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    write(store, "b", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    a, b = analyse(store, "a"), analyse(store, "b")
    # one run a side, no earlier runs: the assumed 1% allowance lets 1% noise at 5
    # repetitions settle it
    c = compare(a, b)
    assert {ch.verdict for ch in c.changes} <= {"no significant change", "below threshold"}
    assert compare_exit(c) == 0 and c.allowance.source == "assumed"
    # a host whose runs differ by 3%: nothing called, the interval too wide to rule out 5%,
    # and it says so at once, with what would
    noisy = compare(a, b, allowance=0.03)
    assert {ch.verdict for ch in noisy.changes} <= {"inconclusive"}
    assert compare_exit(noisy) == 3 and len(noisy.cannot_gate) == 2
    lines = render_comparison(noisy, "md").splitlines()
    assert lines[4].startswith("- undecided: no regression shown")
    assert lines[5].startswith(
        "- one run a side cannot show a change under 5% for 2 of 2 headline metrics on this "
        "host (run-to-run allowance 3.0% given): 13 runs a side can"
    )


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


def observed(
    a: Iterable[np.ndarray],
    b: Iterable[np.ndarray],
    allowance: float = 0.0,
    allowance_df: float = math.inf,
    alarm: float | None = None,
) -> list[Observed]:
    """A family of metrics, higher better, from each side's observations of each, with the
    same allowance."""
    return [
        Observed(x, y, True, allowance, allowance_df, alarm=alarm)
        for x, y in zip(a, b, strict=True)
    ]


def aa_false_regressions(
    rng: np.random.Generator,
    trials: int,
    metrics: int,
    n: int,
    run_sd: float,
    allowance: float,
    threshold: float = THRESHOLD,
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
        judged = judge_family(observed(ta, tb, allowance), threshold)
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
                for j in judge_family(observed(ta, tb))
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
        judged = judge_family(observed(ta.T, tb.T))
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
        return judge_family(observed(a, b))

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
    assert res.exit_code == 0, res.output  # a run against itself: no run-to-run allowance
    assert "- pass: no regression" in res.output and "the same run on both sides" in res.output
    res = runner.invoke(app(), ["before", "before", "--db", store.url, "--allowance", "0.03"])
    assert res.exit_code == 3, res.output  # one run a side cannot rule out 5% at 3% allowance
    assert "undecided: no regression shown" in res.output and "inconclusive: kvm" in res.output
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
    assert compare_exit(c) == 3 and not c.regressions
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
    assert (ch.judged.ratio.n_a, ch.judged.ratio.n_b) == (3, 3) and ch.allowance == 0
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
    assert meta["allowance"] == 0.01 and meta["observations"] == "repetitions"
    assert meta["allowance_source"] == "assumed" and not meta["significant_before_correction"]
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
        ran = WhatRan(accel, ("kvm", "tcg"), "probe")
        cell = b.cell("qemu-virtio", "disk", platform_settings=settings, ran=ran)
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


@pytest.mark.parametrize("cv", [0.005, 0.01])
def test_identical_data_of_a_low_noise_metric_passes(cv):
    """The allowance may not by itself forbid a pass. Identical data at 5 repetitions, one run
    a side with no earlier runs to measure the host by: settled in 100% (CV 0.5%) and 98.8%
    (CV 1%) of 500 cells at the assumed 1%; in none at the former fixed 3%, whose interval is
    at least 2.576·√2·3% = ±10.9% wide whatever the data."""
    rng = np.random.default_rng(41)
    x = 100 * (1 + rng.normal(0, cv, (500, 5)))
    passed = [judge_family([Observed(r, r, True, ALLOWANCE)])[0].verdict for r in x]
    assert np.mean([v == "no significant change" for v in passed]) >= 0.97
    assert not any(judge_family([Observed(r, r, True, 0.03)])[0].settled for r in x[:50])


def _runs(
    rng, trials: int, k: int, metrics: int, run_sd: float, n: int = 5, shared: bool = False
) -> np.ndarray:
    """(trials × k runs × metrics × n repetitions): each run's mean off by ``run_sd`` (one
    offset for all its metrics where ``shared``: the host slower for the whole run), 1% noise
    within a run, metrics of scales 10 to 1000 (the same in every run)."""
    scale = np.random.default_rng(7).uniform(10, 1000, (1, 1, metrics, 1))
    offsets = rng.normal(0, run_sd, (trials, k, 1 if shared else metrics, 1))
    return scale * (1 + offsets) * (1 + rng.normal(0, 0.01, (trials, k, metrics, n)))


def _aa(rng, run_sd: float, history: int, trials: int = 200, metrics: int = 10, shared=False):
    """A/A comparisons of one run a side: (share calling a regression, share settling every
    metric), the allowance measured from ``history`` earlier runs where they are enough to
    (``FEWEST``), else assumed."""
    a, b = (_runs(rng, trials, 1, metrics, run_sd, shared=shared)[:, 0] for _ in range(2))
    earlier = _runs(rng, trials, history, metrics, run_sd, shared=shared)
    false = passed = 0
    for t in range(trials):
        if history < FEWEST:
            family = observed(a[t], b[t], ALLOWANCE, alarm=ALARM)
        else:
            sd, df = run_to_run(earlier[t].mean(-1), earlier[t].var(-1, ddof=1) / 5)
            family = observed(a[t], b[t], sd, df)
        judged = judge_family(family)
        false += any(j.verdict == "regression" for j in judged)
        passed += all(j.settled for j in judged)
    return false / trials, passed / trials


def test_an_allowance_measured_from_earlier_runs_holds_the_error_and_lets_a_quiet_host_pass():
    """A/A, 10 metrics, 5 repetitions at CV 1%, one run a side; the host's runs differ by
    0.5%, 3% or 5%, each metric by its own offset. The former fixed 3% called a false
    regression in 0.7%, 6.7% and 20.7% of comparisons at 3%, 4% and 5% (57% over 100 metrics
    at 5%), and passed none. Measured from 4 earlier runs (3 degrees of freedom in the
    interval): at most 1% at every spread (measured over 300 comparisons), and 42% of
    comparisons pass on the quiet host (all 10 metrics settled; 77% when its degrees of
    freedom were counted per metric, 30, which a shared offset does not give). With no earlier
    run, the assumed 1% for the interval and 3% for any regression: passes are possible, and
    false regressions are the fixed 3%'s."""
    rng = np.random.default_rng(42)
    for run_sd in (0.005, 0.03, 0.05):
        false, passed = _aa(rng, run_sd, history=4)
        assert false <= 0.03, (run_sd, false)
        if run_sd < 0.01:
            assert passed >= 0.3, passed
    false, passed = _aa(rng, 0.03, history=0)
    assert false <= 0.03 and passed == 0
    assert _aa(rng, 0.0, history=0)[1] >= 0.08  # 19% measured; none at the fixed 3%


@pytest.mark.parametrize(("history", "trials"), [(2, 300), (3, 600), (5, 300), (10, 300)])
def test_a_run_offset_shared_by_its_metrics_holds_false_regressions_at_1_percent(history, trials):
    """A/A, 10 metrics at CV 1%, 5 repetitions, one run a side; each run's offset (sd 3%) shared
    by all its metrics, as when the host was slower for the whole run. With the allowance's
    degrees of freedom counted per metric ((runs − 1) × 10) false regressions were 4.6%, 2.7%,
    1.7% and 0.5% of comparisons with 2, 3, 5 and 10 earlier runs (1000 each). Counted from runs,
    with 3 earlier runs needed to measure it (2 leave it assumed, its regressions held at 3%):
    0.2% ± 0.1% (3000), 0.7% ± 0.1%, 0.3% ± 0.1% and 0.2% ± 0.1% (5000 each; ± one standard
    error)."""
    false, _ = _aa(np.random.default_rng(60 + history), 0.03, history, trials, shared=True)
    assert false <= 0.01, false


def test_what_would_settle_a_metric_does():
    """The runs a side (or repetitions a run) compare advises settle an unchanged metric about
    80% of the time: 13 runs a side at 3% run-to-run (84% of 1000 A/A comparisons by run; 11
    runs: 66%), 17 repetitions a run at CV 3% and a 0.5% allowance (80%; 13: 67%)."""
    rng = np.random.default_rng(43)
    (k,) = runs_to_settle([0.03], THRESHOLD, 1 - ALPHA_ACROSS_RUNS)
    assert k == 13

    def by_run(k: int) -> float:
        x = 100 * (1 + rng.normal(0, 0.03, (400, 2, k)))
        return np.mean([judge_family([Observed(a, b, True)])[0].settled for a, b in x])

    assert 0.75 <= by_run(k) <= 0.92 and by_run(k - 2) < 0.75
    (n,) = repetitions_to_settle([0.03], [0.005], THRESHOLD, 1 - ALPHA_ACROSS_RUNS)
    assert n == 17

    def one_run(n: int) -> float:
        x = 100 * (1 + rng.normal(0, 0.005, (400, 2, 1))) * (1 + rng.normal(0, 0.03, (400, 2, n)))
        judged = [judge_family([Observed(a, b, True, 0.005)])[0] for a, b in x]
        return np.mean([j.settled for j in judged])

    assert 0.73 <= one_run(n) <= 0.9 and one_run(n - 4) < 0.73


@pytest.mark.parametrize(("metrics", "share"), [(2, 0.148), (10, 0.448)])
def test_printed_intervals_agree_with_the_verdicts(metrics, share):
    """A true 10% regression among 2 or 10 metrics (CV 4%, 5 repetitions a side): its 99%
    interval lies wholly below 0 while Holm's step-down does not call it in 14.8% and 44.8% of
    1000 comparisons (63% among 100). Each such line is marked as significant only before
    correction, and the summary's first line says it: no line reads as a change its verdict
    denies."""
    rng = np.random.default_rng(44)
    contradicted = marked = 0
    for _ in range(400):
        a, b = rng.normal(100, 4, (2, metrics, 5))
        b[0] *= 0.9
        j = judge_family(observed(a, b))[0]
        excludes = j.ratio.high < 1 or j.ratio.low > 1
        called = j.verdict in ("regression", "improvement", "below threshold")
        contradicted += excludes and not called and not j.before_correction
        marked += j.before_correction
    assert contradicted == 0
    assert abs(marked / 400 - share) < 0.07


def test_a_line_significant_only_before_correction_says_so(store):
    """10 headline metrics, the first 10% lower: its interval excludes 0 (p = 0.0057) but Holm's
    step-down over 10 does not pass (0.057). The report says so on its line, in the table and
    in the first line, which does not read "no significant regression" above it."""
    rng = np.random.default_rng(4)  # a draw where the correction decides
    values = rng.normal(100, 4, (2, 10, 5))
    values[1, 0] *= 0.9
    for run_id, side in (("a", values[0]), ("b", values[1])):
        b = RunBuilder(store, run_id=run_id)
        cells = [b.cell("kvm", f"disk{i}") for i in range(10)]
        for rep in range(5):
            for cell, v in zip(cells, side[:, rep], strict=True):
                b.sample(cell, rep, {"disk.write_mbps": [float(v)]}, headline={"disk.write_mbps"})
    c = compare(analyse(store, "a"), analyse(store, "b"), allowance=0.0)
    ch = next(ch for ch in c.changes if ch.workload == "disk0")
    assert ch.judged.before_correction and ch.verdict == "inconclusive" and ch.ci_high < 0
    lines = render_comparison(c, "md").splitlines()
    assert lines[4].startswith(
        "- undecided: no regression shown, but of the 10 headline metrics 10 inconclusive (1 of "
        "them worse, but significant only before Holm's correction)"
    )
    assert any(
        line.startswith("- inconclusive: kvm / disk0 / 1 inst. / disk.write_mbps: between")
        and "worse, significant only before Holm's correction (p = 0.0057, Holm p = 0.057)" in line
        for line in lines
    )
    assert "| inconclusive (significant only before Holm's correction) |" in "\n".join(lines)
    meta = json.loads(render_comparison(c, "json").splitlines()[0])["metadata"]
    assert meta["significant_before_correction"] and meta["verdict"] == "inconclusive"


def _host_runs(store: Store, ids: list[str], run_sd: float, seed: int, host: str = "h1") -> None:
    """Runs of one study on one host: a low-noise headline figure (CV 1.5%, 5 repetitions, an
    openssl-like cpu cell), each run's mean off by ``run_sd``."""
    rng = np.random.default_rng(seed)
    for run_id in ids:
        b = RunBuilder(store, run_id=run_id, inventory={"hostname": host, "cores_logical": 2})
        cell = b.cell("kvm", "cpu sha256")
        level = 500 * (1 + rng.normal(0, run_sd))
        for rep, v in enumerate(level * (1 + rng.normal(0, 0.015, 5))):
            b.sample(cell, rep, {"cpu.sha256_mbps": [float(v)]}, headline={"cpu.sha256_mbps"})


def test_compare_measures_the_host_from_earlier_runs_of_the_study(store):
    """The done-when of a low-noise cell with earlier runs in the store: a run against itself
    exits 0; an A/A pair exits 0, the allowance measured from the earlier runs and named; on a
    host whose runs differ by 4% it says at once that one run a side cannot gate, and how many
    runs a side can."""
    _host_runs(store, ["e1", "e2", "e3", "e4"], 0.003, seed=51)
    _host_runs(store, ["elsewhere"], 0.2, seed=52, host="h2")  # another host: not read
    _host_runs(store, ["a", "b"], 0.003, seed=53)
    runner = CliRunner()
    res = runner.invoke(app(), ["a", "a", "--db", store.url])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app(), ["a", "b", "--db", store.url, "-f", "json"])
    assert res.exit_code == 0, res.output
    meta = json.loads(res.output.splitlines()[0])["metadata"]
    assert meta["allowance_source"] == "measured"
    assert meta["allowance_runs"] == ["e1", "e2", "e3", "e4"] and 0 <= meta["allowance"] < 0.01
    res = runner.invoke(app(), ["a", "b", "--db", store.url])
    assert "- pass: no regression" in res.output
    assert (
        "measured from the spread of the run means of 4 earlier runs of study 'hand-made' on "
        "host 'h1': e1, e2, e3, e4" in res.output
    )
    # a noisy host: 4% between runs
    _host_runs(store, ["n1", "n2", "n3", "n4", "n5", "na", "nb"], 0.04, seed=54, host="h3")
    res = runner.invoke(app(), ["na", "nb", "--db", store.url])
    assert res.exit_code == 3, res.output
    said = res.output.split("\n- ")[2]
    assert said.startswith(
        "one run a side cannot show a change under 5% for 1 of 1 headline metric on this host "
        "(run-to-run allowance measured from 5 earlier runs): "
    ), said
    assert "runs a side can" in said


def test_without_earlier_runs_the_allowance_is_assumed_and_said_to_be(store):
    """Two runs and no earlier ones: the assumed 1% reads the interval and a pass, a regression
    must hold at 3% too; a large change is still called, a small one at the assumed allowance
    only is inconclusive and marked so."""
    _host_runs(store, ["a"], 0.0, seed=55)
    rng = np.random.default_rng(56)
    b = RunBuilder(store, run_id="b", inventory={"hostname": "h1"})
    cell = b.cell("kvm", "cpu sha256")
    for rep, v in enumerate(500 * 0.92 * (1 + rng.normal(0, 0.003, 5))):
        b.sample(cell, rep, {"cpu.sha256_mbps": [float(v)]}, headline={"cpu.sha256_mbps"})
    res = CliRunner().invoke(app(), ["a", "b", "--db", store.url])
    assert res.exit_code == 3, res.output
    assert (
        "1.0% a run, assumed, not measured (0 earlier runs of study 'hand-made' on host "
        "'h1' in the store; 3 or more would measure it" in res.output
    )
    assert "(significant only at the assumed allowance)" in res.output


def test_a_slower_host_cpu_is_a_regression_of_the_composites_sub_scores(store):
    """The cpu composite is normalised by its own run's baseline means, so native's reads 1 in
    every run: compare gates on the sub-scores, and a host 10% slower is a regression."""
    rng = np.random.default_rng(7)
    for run_id, speed in (("run-a", 1.0), ("run-b", 0.9)):
        b = RunBuilder(store, run_id=run_id)
        cell = b.cell("native", "cpu apps")
        for rep in range(5):
            rates = {
                name: [speed * base * (1 + 0.01 * rng.standard_normal())]
                for name, base in (("cpu.apps.xz.mib_per_s", 2.0), ("cpu.apps.aes.mib_per_s", 900))
            }
            b.sample(cell, rep, rates, "MiB/s")
    result = compare(analyse(store, "run-a"), analyse(store, "run-b"), allowance=0.01)
    got = {c.name: (c.headline, c.verdict) for c in result.changes}
    assert got == {
        "cpu.composite.score": (False, "no significant change"),
        "cpu.apps.xz.mib_per_s": (True, "regression"),
        "cpu.apps.aes.mib_per_s": (True, "regression"),
    }
    assert compare_exit(result) == 1


def test_runs_enough_for_an_unchanged_metric_say_the_change_itself_keeps_it_open(store):
    """4 runs a side of a quiet metric that moved by 4%: more runs would settle it were it
    unchanged, but these already would; its own change keeps a bound past the threshold."""
    from hvbench.report.comparison import to_settle

    rng = np.random.default_rng(11)
    for side, level in (("a", 100.0), ("b", 104.0)):
        for i in range(4):
            level_i = level * (1 + 0.005 * rng.standard_normal())
            write(store, f"{side}{i}", rng.normal(level_i, 0.2, 3), rng.normal(50, 0.5, 3))
    runs = {s: [analyse(store, f"{s}{i}") for i in range(4)] for s in "ab"}
    c = compare(runs["a"], runs["b"])
    ch = next(ch for ch in c.changes if ch.name == "disk.write_mbps")
    assert ch.verdict == "inconclusive" and ch.judged.runs is not None and ch.judged.runs <= 4
    said = to_settle(c, ch)
    assert said.startswith("more than 4 runs a side: with 4, its own change (+4."), said


def test_a_pass_at_the_assumed_allowance_is_not_called_settled_and_names_its_risk(store):
    """A build 7% slower on both headline metrics, one run a side, no earlier run: each run's
    offset (sd 3%) shared by its metrics, CV 1%, 5 repetitions. At the assumed 1% it passed
    in 2.6% ± 0.4% of 2000 comparisons, each said to be "settled", under a warning of false
    regressions (which are held at 3%). Passes stay possible, but none is called settled: the
    first line says the allowance was assumed and that a regression can pass unseen."""
    rng = np.random.default_rng(45)
    trials, turn = 400, np.array([[1], [-1]])  # a slower host: less throughput, more time

    def runs(speed: float) -> np.ndarray:
        host = (speed * (1 + rng.normal(0, 0.03, (trials, 1, 1)))) ** turn
        return np.array([[100.0], [50.0]]) * host * rng.normal(1, 0.01, (trials, 2, 5))

    a, b = runs(1.0), runs(0.93)
    passed = [
        t
        for t in range(trials)
        if all(
            j.settled and j.verdict != "regression"
            for j in judge_family(
                [
                    Observed(x, y, higher, ALLOWANCE, alarm=ALARM)
                    for x, y, higher in zip(a[t], b[t], (True, False), strict=True)
                ]
            )
        )
    ]
    assert 0.01 <= len(passed) / trials <= 0.08, len(passed)
    write(store, "a", *a[passed[0]])
    write(store, "b", *b[passed[0]])
    c = compare(analyse(store, "a"), analyse(store, "b"))
    assert compare_exit(c) == 0 and len(c.assumed) == 2
    first = render_comparison(c, "md").splitlines()[4]
    assert first.startswith("- pass: no regression") and "settled" in first
    assert "but not settled: all of them at the assumed run-to-run allowance of 1.0%" in first
    assert "a regression can pass unseen" in first and "false regressions" not in first


def test_an_inconclusive_line_significant_only_at_the_assumed_allowance_is_marked(store):
    """A metric 5% lower at CV 1%, one run a side, no earlier run: at the assumed 1% its
    interval lies below 0 (Holm p < 0.01), at 3% it does not; its change is not past the 5%
    threshold, so it was "inconclusive" with nothing said of that. It is marked now, as a
    regression held back by the larger allowance is."""
    rng = np.random.default_rng(46)
    write(store, "a", rng.normal(100, 1, 5), rng.normal(50, 0.5, 5))
    write(store, "b", rng.normal(95.2, 1, 5), rng.normal(50, 0.5, 5))
    res = CliRunner().invoke(app(), ["a", "b", "--db", store.url, "-f", "json"])
    assert res.exit_code == 3, res.output
    meta = {x["metric"]: x["metadata"] for x in map(json.loads, res.output.splitlines())}[
        "disk.write_mbps"
    ]
    assert meta["verdict"] == "inconclusive" and meta["p_holm"] < 0.01 and meta["ci_high"] < 0
    assert meta["significant_only_at_assumed_allowance"]
    text = render_comparison(compare(analyse(store, "a"), analyse(store, "b")), "md")
    assert "worse, significant only at the assumed allowance of 1.0% (Holm p = " in text


def test_a_platform_that_did_no_work_lost_100_percent(store):
    """Native [100, 101, 102] against a platform at [0, 0, 0]: a kept fraction of 0 was NaN,
    and identical zeros of unknown resolution "not tested", so the verdict read "kvm n/a%: not
    tested" ("keeps n/a% [0°–1%]" with a resolution of 1), and compare of B = [0]×5 against a
    working A "not tested", exit 3. A throughput of 0 is no work done, exactly: a loss of 100%,
    and in compare a regression."""
    from hvbench.analysis.verdict import verdicts

    for run_id, resolution in (("none", None), ("tick", 1.0)):
        b = RunBuilder(store, run_id=run_id)
        cells = {p: b.cell(p, "disk") for p in ("native", "kvm")}
        for rep, v in enumerate((100.0, 101.0, 102.0)):
            for p, value in (("native", v), ("kvm", 0.0)):
                steps = {"disk.write_mbps": [resolution]} if resolution else None
                b.sample(cells[p], rep, {"disk.write_mbps": [value]}, resolutions=steps)
        v = analyse(store, run_id).result("kvm", "disk", "disk.write_mbps", 1).vs_baseline
        assert v.pct_of_native == 0 and v.reading() == "loss" and v.tested
        line = next(x for x in verdicts(analyse(store, run_id)) if x.startswith("disk"))
        assert (
            "kvm keeps 0% of native" if resolution is None else "kvm keeps 0.00% [0°–0.57%]"
        ) in line
    write(store, "a", np.array([100.0, 101, 99, 100.5, 99.5]), np.full(5, 50.0) + np.arange(5))
    write(store, "b", np.zeros(5), np.full(5, 50.0) + np.arange(5))
    res = CliRunner().invoke(app(), ["a", "b", "--db", store.url, "-f", "json"])
    assert res.exit_code == 1, res.output
    meta = {x["metric"]: x for x in map(json.loads, res.output.splitlines())}["disk.write_mbps"]
    assert meta["value"] == -1 and meta["metadata"]["verdict"] == "regression"


def test_what_would_settle_it_never_asks_for_fewer_repetitions_than_ran(store):
    """A = [100, 101, 99, 100.5, 99.5], B = [95.5, 96.5, 94.5, 96, 95], --allowance 0.005:
    inconclusive, and it read "would settle it: 3 repetitions a run (one run a side), or 3 runs
    a side" after 5 (so on 99% of inconclusive lines at a true −4%), and later still opened
    with those 3. 3 would settle an unchanged metric; with 5, its own change keeps a bound past
    5%: the line says first that more than 5 would be needed, then why."""
    from hvbench.report.comparison import to_settle

    write(store, "a", np.array([100, 101, 99, 100.5, 99.5]), np.arange(50.0, 55.0))
    write(store, "b", np.array([95.5, 96.5, 94.5, 96, 95]), np.arange(50.0, 55.0))
    res = CliRunner().invoke(
        app(), ["a", "b", "--db", store.url, "-f", "json", "--allowance", "0.005"]
    )
    meta = {x["metric"]: x["metadata"] for x in map(json.loads, res.output.splitlines())}
    assert meta["disk.write_mbps"]["verdict"] == "inconclusive"
    assert meta["disk.write_mbps"]["repetitions_to_settle"] <= meta["disk.write_mbps"]["n_a"] == 5
    c = compare(analyse(store, "a"), analyse(store, "b"), allowance=0.005)
    ch = next(ch for ch in c.changes if ch.name == "disk.write_mbps")
    said = to_settle(c, ch)
    assert said.startswith(
        "more than 5 repetitions a run, or more runs a side: with 5, its own change (-4."
    ), said
    assert said.endswith("keeps a bound past ±5% (3 would do, were it unchanged)"), said
    assert f"would settle it: {said}" in render_comparison(c, "md")
