"""cpu, suite apps: parsers against real output of every program (two copies each, captured
natively at the --quick scale), the jobs' sizes, and a quick run on native."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path
from typing import get_args

import pytest
from workload_env import calibrate, corpus_digest, native_instances, run_workload

from hvbench.errors import InstanceError
from hvbench.workloads import workload_class, workload_of
from hvbench.workloads.base import ParseError
from hvbench.workloads.clock import parse_timing
from hvbench.workloads.cpu import Cpu, CpuSettings
from hvbench.workloads.cpu_apps import (
    AUTO_DATA_SCALE,
    CORPUS,
    MIB,
    PROGRAMS,
    QUICK_SCALE,
    SQLITE3,
    SUB_SCORES,
    CpuApps,
    CpuAppsSettings,
    Job,
    ProgramKey,
    corpus_maker,
    corpus_rows,
    make_corpus,
    orders_sql,
    parse_copies,
)

FIX = Path(__file__).parent / "fixtures" / "cpu-apps"
PROGRAM = {p.key: p for p in PROGRAMS}
CORPUS_BYTES = 242_000
"""Any corpus size: a compressor's work is its passes times the corpus, whatever it holds."""


def report(key: str) -> str:
    return (FIX / f"{key}.txt").read_text()


def quick_job(key: str, corpus_bytes: int = CORPUS_BYTES) -> Job:
    program = PROGRAM[key]
    return program.job(program.size_at(QUICK_SCALE), QUICK_SCALE, corpus_bytes)


def throughput(key: str) -> float:
    return PROGRAM[key].throughput(report(key), 2, quick_job(key))[0]


def copies_rate(key: str, units: float) -> float:
    """``units`` of work per copy over that copy's own wall time, summed over the two copies."""
    return sum(units / c.seconds for c in parse_copies(report(key), 2))


def test_every_program_reads_its_captured_output():
    got = {p.key: throughput(p.key) for p in PROGRAMS}
    # povray: 121 pixels (11 x 11) per copy; stockfish: the nodes it says it searched; sqlite:
    # the rows of its tally
    assert got["povray"] == pytest.approx(copies_rate("povray", 121))
    assert got["stockfish"] == pytest.approx(copies_rate("stockfish", 460379))
    assert got["sqlite"] == pytest.approx(copies_rate("sqlite", 72000))
    # openssl: its own count and clock (+R:count:algorithm:seconds), 16 KiB blocks in 1 s
    assert got["aes"] == (139336 + 137239) * 16 / 1024
    assert got["sha256"] == (79069 + 79364) * 16 / 1024


def test_compressors_count_passes_over_the_corpus():
    for key, passes in (("xz", 2), ("zstd", 500)):
        job = quick_job(key)
        assert job.command.count(CORPUS) == passes and job.units == passes * CORPUS_BYTES
        assert throughput(key) == pytest.approx(copies_rate(key, job.units / MIB))


def test_a_failed_copy_fails_the_program_with_its_words():
    job = quick_job("xz")
    with pytest.raises(ParseError, match=r"cpu apps xz: copy 0 exited with 1: .*No such file"):
        PROGRAM["xz"].throughput(report("xz-no-corpus"), 2, job)


@pytest.mark.parametrize(
    ("key", "cut", "complaint"),
    [
        ("povray", "POV-Ray finished", "end of render"),
        ("stockfish", "Nodes searched", "Nodes searched"),
        ("sqlite", "rounds|", "tally"),
        ("aes", "+R:", "result"),
    ],
)
def test_a_copy_killed_half_way_is_a_parse_error(key, cut, complaint):
    text = report(key)
    last = text.rindex(cut)
    with pytest.raises(ParseError, match=complaint):
        PROGRAM[key].throughput(text[:last], 2, quick_job(key))


def test_reports_of_too_few_copies_or_the_wrong_job_are_refused():
    job = quick_job("povray")
    with pytest.raises(ParseError, match="expected reports of 3 copies, found 2"):
        PROGRAM["povray"].throughput(report("povray"), 3, job)
    bigger = PROGRAM["povray"].job(20, QUICK_SCALE, CORPUS_BYTES)  # 20 x 20
    with pytest.raises(ParseError, match="rendered 121 of 121 pixels, expected 400"):
        PROGRAM["povray"].throughput(report("povray"), 2, bigger)
    with pytest.raises(ParseError, match="inserted 72000 rows in 18 rounds, not 144000"):
        PROGRAM["sqlite"].throughput(report("sqlite"), 2, PROGRAM["sqlite"].job(18, 0.04, 0))
    with pytest.raises(ParseError, match="measured sha256, not aes-256-gcm"):
        PROGRAM["aes"].throughput(report("sha256"), 2, job)


def test_scale_multiplies_every_job():
    small, full, double = (
        {p.key: p.job(p.size_at(s), min(1.0, s), CORPUS_BYTES) for p in PROGRAMS}
        for s in (0.25, 1.0, 2.0)
    )
    assert full["povray"].units == 80 * 80 and small["povray"].units == 40 * 40
    assert "500000" in full["stockfish"].command and "1000000" in double["stockfish"].command
    assert double["xz"].units == 2 * full["xz"].units
    assert double["sqlite"].units == 2 * full["sqlite"].units == 2 * 18 * 200_000
    assert small["sqlite"].units == full["sqlite"].units / 4
    assert full["aes"].command[full["aes"].command.index("-seconds") + 1] == "20"


def test_settings_label_estimate_and_suites():
    assert workload_class("cpu", None) is CpuApps and workload_class("cpu", "micro") is Cpu
    apps = workload_of(CpuAppsSettings(name="cpu"))
    assert isinstance(apps, CpuApps) and isinstance(workload_of(CpuSettings(name="cpu")), Cpu)
    assert apps.settings.label() == "cpu apps"
    assert CpuAppsSettings(name="cpu", scale=0.1, copies=1).label() == "cpu apps scale=0.1 copies=1"
    fixed = workload_of(CpuAppsSettings(name="cpu", scale=1))
    assert 150 <= fixed.estimate_seconds(quick=False) <= 200  # 14-35 s a program
    assert apps.estimate_seconds(quick=False) == len(PROGRAMS) * (1.5 + 1) - 1 + 2  # povray's 2 s
    assert apps.estimate_seconds(quick=True) < 15
    assert apps.timeout(quick=True) > 10 * apps.estimate_seconds(quick=True)
    assert "/usr/games/stockfish" in apps.tools() and "/usr/bin/xz" in apps.tools()
    with pytest.raises(ValueError):
        CpuAppsSettings(name="cpu", scale=0)


def test_skip_leaves_programs_out_with_their_tools_and_time():
    assert set(get_args(ProgramKey)) == {p.key for p in PROGRAMS}
    settings = CpuAppsSettings(name="cpu", scale=0.5, skip=["povray", "xz"])
    workload = CpuApps(settings)
    assert [p.key for p in workload.programs] == ["stockfish", "zstd", "sqlite", "aes", "sha256"]
    assert "/usr/bin/povray" not in workload.tools() and "/usr/bin/sqlite3" in workload.tools()
    full = CpuApps(CpuAppsSettings(name="cpu", scale=0.5)).estimate_seconds(quick=False)
    left_out = PROGRAM["povray"].estimate(0.5) + PROGRAM["xz"].estimate(0.5)
    assert workload.estimate_seconds(quick=False) == full - left_out
    assert settings.label() == "cpu apps scale=0.5 skip=povray,xz"
    with pytest.raises(ValueError, match="skip leaves no program"):
        CpuAppsSettings(name="cpu", skip=[p.key for p in PROGRAMS])
    with pytest.raises(ValueError):
        CpuAppsSettings(name="cpu", skip=["gcc"])


def test_quick_run_on_native():
    workload = CpuApps(CpuAppsSettings(name="cpu"))
    with native_instances(1) as (instances, network):
        (outcome,) = run_workload(workload, instances, network)
    assert [m.name for m in outcome.metrics] == list(SUB_SCORES)
    assert all(m.value and m.value > 0 and m.higher_is_better for m in outcome.metrics)
    assert [r.tool for r in outcome.raw][:2] == ["povray", "stockfish"]
    copies = instances[0].vcpus
    assert all(r.content.count("=== copy ") == copies for r in outcome.raw)
    # each copy timed by hvbench-clock: its monotonic start and end to the nanosecond, its
    # clock's resolution (a millisecond or better) and its CPU time
    for raw, metric in zip(outcome.raw, outcome.metrics, strict=True):
        for copy in parse_copies(raw.content, copies):
            assert copy.timing.resolution <= 0.001 and copy.timing.cpu_seconds > 0
            assert re.search(r"start=\d+\.\d{9} end=\d+\.\d{9}", raw.content)
        assert metric.resolution is not None and 0 < metric.resolution < metric.value * 1e-3


def test_a_coarse_clock_or_a_job_within_its_resolution_is_refused():
    line = "status=0 start=10.000000000 end={end} resolution={res} user=0.5 system=0.1 "
    line += "voluntary=3 involuntary=4"
    timing = parse_timing(line.format(end="11.250000000", res="0.000000040"), "job")
    assert timing.seconds == pytest.approx(1.25) and timing.cpu_seconds == pytest.approx(0.6)
    assert timing.rate_resolution(100.0) == pytest.approx(100 * 4e-8 / 1.25)
    with pytest.raises(ParseError, match=r"steps by 4\.0 ms, coarser than 1 ms"):
        parse_timing(line.format(end="11.250000000", res="0.004000000"), "job")
    with pytest.raises(ParseError, match="within its clock's resolution; raise its work"):
        parse_timing(line.format(end="10.000000000", res="0.000000040"), "job")


def test_auto_scale_sizes_each_job_to_its_target_natively():
    """Calibration grows each job until it lasts 90% of the target natively; the settings it
    returns pin that work (the label, a cell's key, stays); openssl's is its seconds."""
    settings = CpuAppsSettings(
        name="cpu", target_seconds=1.0, skip=["povray", "stockfish", "sqlite", "sha256"]
    )
    workload = CpuApps(settings)
    assert settings.calibrates()
    with native_instances(1) as (instances, network):
        chosen = calibrate(workload, instances[0], network)
        (outcome,) = run_workload(CpuApps(chosen), instances, network, quick=False)
    assert set(chosen.work) == {"xz", "zstd", "aes"} and chosen.work["aes"] == 1
    assert chosen.work["zstd"] > PROGRAM["zstd"].first_size() == 1  # one pass: milliseconds
    assert chosen.label() == settings.label() and not chosen.calibrates()
    assert outcome.raw[0].command.count(CORPUS) == chosen.work["xz"]
    with pytest.raises(ValueError, match="xz's work was not calibrated"):
        CpuApps(settings).size(PROGRAM["xz"], quick=False)


def corpus_sql(rows: int) -> str:
    """The compressors' corpus as sqlite3 made it in each instance before hvbench-corpus."""
    return (
        "SELECT printf('%d,%s,%s,%s,%s,%d,%d.%02d,%s', id, day, customer, city, product, qty, "
        f"cents / 100, cents % 100, status) FROM ({orders_sql(rows)});"
    )


@pytest.mark.parametrize("scale", [QUICK_SCALE, AUTO_DATA_SCALE, 1.0])
def test_the_corpus_is_what_sqlite3_printed_for_the_sqlite_jobs_table(scale, tmp_path):
    """hvbench-corpus writes, byte for byte, the rows of orders_sql as sqlite3 prints them
    (what the instances made with sqlite3 before: the xz figures of earlier runs hold)."""
    rows = corpus_rows(scale)
    printed = subprocess.run(
        [SQLITE3, ":memory:", corpus_sql(rows)], capture_output=True, check=True
    ).stdout
    made = subprocess.run(
        [corpus_maker(), str(rows), tmp_path / CORPUS], capture_output=True, text=True, check=True
    )
    assert (tmp_path / CORPUS).read_bytes() == printed
    assert made.stdout == f"bytes={len(printed)}\n"


def test_the_corpus_is_the_same_file_on_native():
    with native_instances(1) as (instances, _network):
        first, second = corpus_digest(instances[0]), corpus_digest(instances[0])
    assert first == second and len(first) == 64
    assert first != hashlib.sha256(b"").hexdigest()  # not an empty file


def test_a_corpus_that_cannot_be_written_fails_its_sample_in_one_line(tmp_path):
    with native_instances(1) as (instances, _network), pytest.raises(InstanceError) as failed:
        make_corpus(instances[0], str(tmp_path / "gone"), QUICK_SCALE)
    assert "hvbench-corpus" in str(failed.value) and "No such file" in str(failed.value)
    assert "\n" not in str(failed.value)


def test_a_helper_cache_that_instances_would_hide_is_refused(monkeypatch):
    """Instances mount /tmp afresh, so a helper copied there into an image is not found (a run
    with HOME under /tmp failed every guest's sample so); refused before anything is made."""
    from hvbench.errors import HvbenchError
    from hvbench.workloads.helpers import static_helper

    monkeypatch.setenv("HVBENCH_IMAGE_CACHE", "/tmp/hvbench-hidden-cache")
    with pytest.raises(HvbenchError, match=r"lies under /tmp, which every instance mounts"):
        static_helper.__wrapped__("hvbench-clock", "clock.c")  # past the per-process cache
    assert not Path("/tmp/hvbench-hidden-cache").exists()
