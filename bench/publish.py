"""How long does ``hvbench publish`` take for a real history? Target: 1000 runs of a 30-metric
study within a minute.

Writes a synthetic history (speed only: the figures are drawn, not measured) into a temporary
SQLite store through the Store API: ``--runs`` runs of one study on one host, native and kvm,
three workloads of ten headline metrics each, three repetitions, kvm's first disk figure 8%
lower from the run on a new kernel at 70% of the way on. Each run ends as ``hvbench run`` ends
one (untimed): analysed once, its HTML report written and its series figures kept. Then times
the history's series alone (``series.load``, which the site reads) and the publishing of the
site: first (the runs' own reports copied), again with nothing changed, and after one more run
(the nightly case).
Usage: ``python bench/publish.py [--runs 1000] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from hvbench.analysis import analyse, series
from hvbench.report import write_report
from hvbench.report.site import publish
from hvbench.store import (
    CellRecord,
    MetricRecord,
    PlatformState,
    RunRecord,
    SampleRecord,
    Store,
    WhatRan,
)

WORKLOADS = {w: [f"{w}.figure{k}" for k in range(10)] for w in ("cpu", "disk", "net")}
PLATFORMS = {"native": 1.0, "kvm": 0.9}
REPETITIONS = 3
STEP = 0.92
STEPPED = "disk.figure0"
TARGET_S = 60.0


def write_run(
    store: Store, night: int, step_at: int, rng: np.random.Generator, reports: Path
) -> str:
    """One night's run, ended as ``hvbench run`` ends one (``cli.run``): its analysis, its
    series figures kept, its HTML report in ``reports``. From ``step_at`` on, a new kernel and
    kvm's ``STEPPED`` lower."""
    run_id = f"night-{night:05d}"
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=night)
    store.create_run(
        RunRecord(
            id=run_id,
            study_name="nightly",
            study_text="name: nightly\nbaseline: native\nplatforms: {}\nworkloads: []\n",
            study_source="nightly.yaml",
            status="finished",
            created_at=start,
            finished_at=start + timedelta(hours=1),
            hvbench_version="bench",
            git_commit=None,
            options={},
            inventory={
                "hostname": "bench-host",
                "cores_logical": 8,
                "kernel": "6.12" if night >= step_at else "6.1",
            },
        )
    )
    for platform, factor in PLATFORMS.items():
        for workload, names in WORKLOADS.items():
            cell = store.cell_id(
                run_id,
                CellRecord(
                    key=f"{platform}|{workload}|1",
                    platform=platform,
                    driver="native" if platform == "native" else "qemu",
                    workload=workload,
                    workload_name=workload,
                    instances=1,
                    platform_settings={"vcpus": 1},
                    workload_settings={"name": workload},
                    ran=WhatRan(bare=platform == "native"),
                ),
            )
            for rep in range(REPETITIONS):
                values = 100 * factor * rng.lognormal(0, 0.02, len(names))
                metrics = [
                    MetricRecord(
                        0,
                        name,
                        float(v * (STEP if stepped else 1.0)),
                        "ops/s",
                        True,
                        headline=True,
                    )
                    for name, v in zip(names, values, strict=True)
                    for stepped in [platform == "kvm" and name == STEPPED and night >= step_at]
                ]
                store.add_sample(
                    cell,
                    SampleRecord(
                        repetition=rep,
                        status="ok",
                        error=None,
                        started_at=start,
                        seconds=10.0,
                        platform_state=PlatformState(),
                        host_cpu=None,
                        metrics=metrics,
                        raw=[],
                    ),
                )
    analysis = analyse(store, run_id)
    series.keep(store, analysis)
    write_report(store, run_id, reports / f"{run_id}.html", analysis=analysis)
    return run_id


def _cpu() -> float:
    """CPU seconds of this process and of its children ended so far (the report processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(label: str, fn, *args) -> tuple:
    """fn(*args), printed with its wall time and CPU time (what a host busy with other work
    does not inflate)."""
    w0, c0 = time.perf_counter(), _cpu()
    result = fn(*args)
    wall, cpu = time.perf_counter() - w0, _cpu() - c0
    print(f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU (all processes)")
    return result, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=None, help="report processes")
    args = parser.parse_args()
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        rng = np.random.default_rng(1)
        step_at = int(0.7 * args.runs)
        reports = Path(tmp) / "reports"
        t0 = time.perf_counter()
        for night in range(args.runs):
            write_run(store, night, step_at, rng, reports)
        metrics = sum(len(v) for v in WORKLOADS.values())
        print(
            f"wrote {args.runs} runs of a {metrics}-metric study ({len(PLATFORMS)} platforms, "
            f"{REPETITIONS} repetitions), each analysed and reported as it ended, in "
            f"{time.perf_counter() - t0:.0f} s (untimed: run time)"
        )
        print(f"host load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        found_series, _ = timed("series of the history (series.load)", series.load, store)
        found = sum(len(s.changes) for s in found_series)
        print(f"  {len(found_series)} series, {found} change point(s)")
        site = Path(tmp) / "site"
        done, cold = timed("publish, first", publish, store, site, args.jobs)
        print(f"  run reports: {done.reports_copied} copied, {done.reports_written} written")
        timed("publish again, nothing changed", publish, store, site, args.jobs)
        write_run(store, args.runs, step_at, rng, reports)
        done, nightly = timed("publish after one more run", publish, store, site, args.jobs)
        print(
            f"  run reports: {done.reports_copied} copied, {done.reports_written} written, "
            f"{done.reports_kept} kept"
        )
        size = sum(p.stat().st_size for p in site.glob("*.html")) / 1e6
        print(f"  pages other than run reports: {size:.1f} MB")
        for label, wall in (("first", cold), ("after one more run", nightly)):
            verdict = "ok" if wall <= TARGET_S else "OVER"
            print(f"[target {TARGET_S:.0f} s, {label}: {verdict}]")


if __name__ == "__main__":
    main()
