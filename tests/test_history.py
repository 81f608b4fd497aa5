"""hvbench history: change points proved against seeded noise, explained on hand-made runs, and
found for real in runs this host makes with one real change in the middle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from builders import RunBuilder
from typer.testing import CliRunner

from hvbench.analysis import cache, changes
from hvbench.analysis.series import FIGURES, ItemKind, ProvenanceItem, load, natural
from hvbench.cli import app
from hvbench.cli.run import parse_labels
from hvbench.errors import HvbenchError
from hvbench.session import FleetPart, NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study

RUNS = 30
STEP_AT = 20
"""A/A and step series: 30 runs, the step before run 21 (index 20), so that a detection has 10
runs after it to be found in."""
NEAR = 2
"""A change point found within this many runs of the true one is a detection."""


def _series(rng: np.random.Generator, cv: float, step: float, n: int = RUNS) -> np.ndarray:
    x = 100 * (1 + rng.normal(0, cv, n))
    x[STEP_AT:] *= 1 + step
    return x


def _found(x: np.ndarray) -> list[int]:
    """Indexes of the significant change points of one series judged alone."""
    return [s.index for s in changes.find([x])[0] if s.significant]


@pytest.mark.parametrize("cv", [0.02, 0.05])
def test_aa_series_rarely_get_a_false_change_point(cv):
    """False change points in A/A series of 30 runs: at most ``stats.ALPHA_ACROSS_RUNS`` of them
    have any (Binseg's candidates untested: about a fifth of them)."""
    rng = np.random.default_rng(301 + int(cv * 100))
    trials = 600
    false = sum(bool(_found(_series(rng, cv, 0.0))) for _ in range(trials))
    untested = sum(bool(changes.candidates(np.log(_series(rng, cv, 0.0)))) for _ in range(100))
    print(f"\nA/A, 30 runs, CV {cv:.0%}: {false / trials:.1%} of {trials} series with a false "
          f"change point (Binseg's untested candidates: {untested}% of 100)")  # fmt: skip
    # binomial: at a true rate of 1%, 600 series exceed 15 with probability < 0.1%
    assert false <= 15
    assert untested >= 10  # the test is what keeps noise out


@pytest.mark.parametrize(
    ("cv", "step", "rate", "delay"),
    [
        (0.02, -0.05, 0.85, 5),
        (0.02, -0.10, 0.97, 3.5),
        (0.05, -0.05, 0.05, 10),
        (0.05, -0.10, 0.7, 6),
    ],
)
def test_steps_are_found_at_their_run_soon_after(cv, step, rate, delay):
    """Detection rate (a change point within ``NEAR`` runs of the step, all 30 runs) and delay
    (runs after the step until the first detection, on the series as it grows night by
    night)."""
    rng = np.random.default_rng(401 + int(cv * 100) + int(-step * 1000))
    trials = 150
    found, delays, wrong_sign = 0, [], 0
    for _ in range(trials):
        x = _series(rng, cv, step)
        judged = [s for s in changes.find([x])[0] if s.significant]
        near = [s for s in judged if abs(s.index - STEP_AT) <= NEAR]
        found += bool(near)
        wrong_sign += any((s.ratio > 1) != (step > 0) for s in near)
        for n in range(STEP_AT + changes.MIN_SIDE, RUNS + 1):
            if any(abs(i - STEP_AT) <= NEAR for i in _found(x[:n])):
                delays.append(n - STEP_AT)
                break
    mean_delay = float(np.mean(delays)) if delays else float("nan")
    print(f"\nstep {step:+.0%} at CV {cv:.0%}: found in {found / trials:.0%} of {trials} series "
          f"of 30 runs; first found {mean_delay:.1f} runs after it on average "
          f"(found by run 30 in {len(delays) / trials:.0%})")  # fmt: skip
    assert found / trials >= rate
    assert wrong_sign == 0
    if delays:
        assert mean_delay <= delay


def test_a_found_change_carries_its_interval():
    rng = np.random.default_rng(7)
    x = _series(rng, 0.02, -0.10)
    (change,) = [s for s in changes.find([x])[0] if s.significant]
    assert change.index == STEP_AT
    assert change.low < change.ratio < change.high and change.high < 1
    assert change.low < 0.9 < change.high


def test_many_series_judged_together_keep_the_family_error():
    """40 A/A series judged as one family: a family with a false change point stays as rare as
    ``stats.ALPHA_ACROSS_RUNS`` (testing only what each series' search kept would make it a
    third)."""
    rng = np.random.default_rng(9)
    families = 60
    false = 0
    for _ in range(families):
        judged = changes.find([_series(rng, 0.03, 0.0) for _ in range(40)])
        false += any(s.significant for family in judged for s in family)
    assert false <= 3


def test_versions_sort_as_numbers():
    assert sorted(["10.0.2", "7.2.22", "8.0"], key=natural) == ["7.2.22", "8.0", "10.0.2"]
    assert sorted(["rc10", "rc9"], key=natural) == ["rc9", "rc10"]


def test_labels_parse_or_say_what_is_wrong():
    assert parse_labels(["qemu=10.0.2", "night=3"]) == {"qemu": "10.0.2", "night": "3"}
    with pytest.raises(HvbenchError, match="give KEY=VALUE"):
        parse_labels(["qemu"])
    with pytest.raises(HvbenchError, match="given twice"):
        parse_labels(["a=1", "a=2"])


# hand-made runs: the explanation and the gate ---------------------------------------------


def _night(store: Store, run_id: str, host: str, level: float, cache: str, seed: int) -> None:
    b = RunBuilder(store, run_id=run_id, inventory={"hostname": host, "kernel": "6.1"})
    cell = b.cell("kvm", "disk", platform_settings={"disk": {"cache": cache}})
    rng = np.random.default_rng(seed)
    for rep, v in enumerate(level * (1 + rng.normal(0, 0.01, 3))):
        b.sample(cell, rep, {"disk.write_mbps": [float(v)]}, headline={"disk.write_mbps"})


def _nights(store: Store, host: str, change_at: int, nights: int = 10) -> None:
    """A host's nightly runs: from night ``change_at`` on, 10% slower with cache writeback."""
    rng = np.random.default_rng(len(host))
    for i in range(nights):
        after = i >= change_at
        level = 500 * (1 + rng.normal(0, 0.01)) * (0.9 if after else 1.0)
        cache = "writeback" if after else "none"
        _night(store, f"{host}-{i}", host, level, cache, seed=100 * len(host) + i)


def _history(store: Store, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["history", *args, "--db", store.url])
    return res.exit_code, res.output


def _means(store: Store) -> list[float]:
    (s,) = load(store)
    return [p.mean for p in s.points]


def test_a_finished_runs_figures_are_kept_and_read_until_its_run_or_the_code_changes(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/h.db")
    _nights(store, "h1", change_at=6, nights=4)
    means = _means(store)
    kept = store.derived(FIGURES)
    records = {r.id: r for r in store.runs()}
    assert {k: key for k, (key, _) in kept.items()} == {
        k: cache.run_key(r) for k, r in records.items()
    }

    # what is kept is what is read: a kept figure altered under its key is what load gives
    key, content = kept["h1-2"]
    content["figures"][0]["mean"] = 1.0
    store.keep_derived("h1-2", FIGURES, key, content)
    assert _means(store)[2] == 1.0

    # the run ended anew (resumed): analysed again and kept under its new key
    store.set_run_status("h1-2", "finished", finished=True)
    assert _means(store) == means
    assert store.derived(FIGURES)["h1-2"][0] == cache.run_key(store.run("h1-2")) != key

    # kept by other code (an older hvbench's, each figure a list by field order): analysed
    # again, not read
    key, content = store.derived(FIGURES)["h1-1"]
    content["figures"] = [[*{**f, "mean": 1.0}.values()] for f in content["figures"]]
    store.keep_derived("h1-1", FIGURES, "other code" + key[16:], content)
    assert _means(store) == means
    assert isinstance(store.derived(FIGURES)["h1-1"][1]["figures"][0], dict)

    # a run not ended keeps nothing (its samples may still grow)
    store.set_run_status("h1-3", "running")
    assert cache.run_key(store.run("h1-3")) is None
    assert _means(store) == means


def test_the_code_digest_follows_the_analysis_source(tmp_path, monkeypatch):
    import hvbench

    root = tmp_path / "hvbench"
    for sub in cache.ANALYSIS:
        (root / sub).mkdir(parents=True)
        (root / sub / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(hvbench, "__file__", str(root / "__init__.py"))
    cache.code_digest.cache_clear()
    before = cache.code_digest(cache.ANALYSIS)
    (root / cache.ANALYSIS[0] / "a.py").write_text("x = 2\n")
    cache.code_digest.cache_clear()
    assert cache.code_digest(cache.ANALYSIS) != before
    cache.code_digest.cache_clear()


def test_history_finds_each_hosts_change_and_names_what_changed(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/h.db")
    _nights(store, "h1", change_at=6)
    _nights(store, "h22", change_at=4)
    code, out = _history(store, "hand-made", "--json")
    assert code == 0, out
    by_host = {s["host"]: s for s in json.loads(out)}
    assert set(by_host) == {"h1", "h22"}  # one series per host, never mixed
    for host, at in (("h1", 6), ("h22", 4)):
        s = by_host[host]
        assert [p["run"] for p in s["points"]] == [f"{host}-{i}" for i in range(10)]
        (c,) = s["changes"]
        assert (c["index"], c["before_run"], c["after_run"]) == (
            at,
            f"{host}-{at - 1}",
            f"{host}-{at}",
        )
        assert c["ci_low"] < c["ratio"] < c["ci_high"] < 1 and c["regression"]
        assert c["differences"] == [
            {"name": "platform disk.cache", "before": "none", "after": "writeback"}
        ]
    code, out = _history(store, "hand-made", "--host", "h1")
    assert "from run h1-6 (" in out and "on: −10." in out
    assert "changed: platform disk.cache none → writeback" in out
    # the gate: h1's change is 4 runs old, h22's 6
    code, out = _history(store, "--check")
    assert code == 0, out
    code, out = _history(store, "--check", "--window", "4")
    assert code == 1
    (line,) = out.strip().splitlines()
    assert line.startswith("regression: hand-made on h1: kvm / disk / 1 inst. / disk.write_mbps")


def test_a_change_nothing_recorded_explains_says_so(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/h.db")
    for i in range(8):
        _night(store, f"n{i}", "h1", 500 * (0.85 if i >= 4 else 1.0), "none", seed=i)
    (s,) = load(store, "hand-made")
    (c,) = s.changes
    assert c.index == 4 and not c.explained
    assert "explained by nothing recorded" in _history(store)[1]


def test_bad_input_is_one_line(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/h.db")
    with pytest.raises(HvbenchError, match="no runs in"):
        load(store)
    _nights(store, "h1", change_at=6, nights=3)
    for args, said in (
        (["nosuch"], "no runs of study 'nosuch'"),
        (
            ["--metric", "cpu.*"],
            "--metric 'cpu.*' is in none of the runs; they have disk.write_mbps",
        ),
        (["--host", "h9"], "--host 'h9': no runs on it; the runs' hosts: h1"),
        (["--by", "version"], "--by 'version': give one of time, qemu, kernel"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "hvbench", "history", *args, "--db", store.url],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and done.stdout == "", done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert said in line, line


# for real: runs this host makes, one real change in the middle -------------------------------

REAL = """\
name: history-real
baseline: native
platforms:
  native: {{driver: native}}
workloads:
  - {{name: disk, tool: dd, size: {size}, block: {block}}}
repetitions: 3
"""
NIGHTS = 8
CHANGE = {"alpha": 4, "beta": 5}
"""Per host, the night (0-based) from which dd writes and reads in blocks of BLOCK_AFTER."""
SIZE, BLOCK_BEFORE, BLOCK_AFTER = "8M", "1M", "4K"
"""Direct I/O in 4 KiB blocks moves 20 to 60 times less a second here than in 1 MiB blocks: a
step that stands out of a disk's run-to-run noise on a shared 2-core host (1 MiB runs of one
hour here differed fivefold), in 2.5 s a run at 1 MiB and 9 s at 4 KiB."""


def _real_night(tmp_path: Path, store: Store, night: int, host: str) -> None:
    """One real run of the study on ``host``, tagged as that host's part of the night's fleet
    run with a label, as ``hvbench run --fleet F --fleet-host H --label night=N`` does; the
    first through that command line, the others through the runner (a second a run less)."""
    block = BLOCK_AFTER if night >= CHANGE[host] else BLOCK_BEFORE
    text = REAL.format(size=SIZE, block=block)
    fleet, label = f"nightly-{night + 1}", f"{night + 1}"
    if night == 0:
        study = tmp_path / "history-real.yaml"
        study.write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "hvbench", "run", str(study), "--no-report", "--db", store.url,
             "--label", f"night={label}", "--fleet", fleet, "--fleet-host", host],
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return
    new = NewRun(parse_study(text, "history-real"), False, {"night": label}, FleetPart(fleet, host))
    session = RunSession.preflight(store, new)
    assert session.run().status == "finished"


def test_a_real_history_finds_its_change_at_the_right_run_on_each_host(tmp_path):
    """Eight nights of a small real study on two hosts of a fleet (this machine under two fleet
    names: the fleet fixture's Ansible hosts would cost minutes a run), dd's block size cut from
    1 MiB to 4 KiB from a different night on each: each host's write and read series have one
    change point, at that night's run, and name the block size as what changed."""
    store = Store(f"sqlite:///{tmp_path}/real.db")
    for night in range(NIGHTS):
        for host in CHANGE:
            _real_night(tmp_path, store, night, host)
    _check_real_history(store)


def _check_real_history(store: Store) -> None:
    listed = json.loads(CliRunner().invoke(app, ["runs", "--json", "--db", store.url]).output)
    assert [r["labels"] for r in listed[:3]] == [{"night": "1"}, {"night": "1"}, {"night": "2"}]
    for by in ("time", "label:night"):
        series = load(store, "history-real", by=by)
        assert {(s.host, s.metric) for s in series} == {
            (h, f"disk.dd.{m}_mbps") for h in CHANGE for m in ("write", "read")
        }
        for s in series:
            assert len(s.points) == NIGHTS
            assert [p.provenance[ProvenanceItem(ItemKind.LABEL, "night")] for p in s.points] == [
                str(i + 1) for i in range(NIGHTS)
            ]
            means = [round(p.mean) for p in s.points]
            at = CHANGE[s.host]
            # reads in 4 KiB blocks move 100 times less here, writes 5 to 20 times: the write's
            # step may stay within what a busy shared host's noise can do, the read's may not
            assert len(s.changes) == 1 or (s.metric == "disk.dd.write_mbps" and not s.changes), (
                s.host,
                s.metric,
                means,
            )
            for c in s.changes:  # never at another run
                assert c.index == at, (s.host, s.metric, means)
                assert c.before is s.points[at - 1] and c.after is s.points[at]
                assert c.regression and c.high < 1, (s.host, s.metric, means)
                named = {str(d.item): (d.before, d.after) for d in c.differences}
                assert named["workload block"] == (BLOCK_BEFORE, BLOCK_AFTER), named
    # the gate at its default window, 3 runs: beta's change is 3 runs old, alpha's 4
    code, out = _history(store, "history-real", "--check")
    lines = out.strip().splitlines()
    assert code == 1 and 1 <= len(lines) <= 2, out
    assert all(ln.startswith("regression: history-real on beta: native / disk") for ln in lines)
    assert any("disk.dd.read_mbps: from run " in ln for ln in lines)
    assert all(
        "changed: " in ln and f"workload block {BLOCK_BEFORE} → {BLOCK_AFTER}" in ln for ln in lines
    )
    code, out = _history(store, "history-real", "--check", "--window", "2")
    assert code == 0 and out.startswith("no regression at a change point in the newest 2 runs")
