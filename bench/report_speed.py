"""How long does a report take for 100,000 samples? Target: under 5 s per format.

Writes a synthetic run (8 platforms, 1–8 instances, cpu/disk/net/kernbench metrics, host CPU
readings) into a temporary SQLite store through the Store API, then times the analysis and
each format. Usage: ``python bench/report_speed.py [--samples 100000]``.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np

from hvbench.analysis import analyse
from hvbench.report import EXPORTERS, render
from hvbench.store import (
    CellRecord,
    HostCpuReading,
    MetricRecord,
    PlatformState,
    RunRecord,
    SampleRecord,
    Store,
    WhatRan,
)

T = TypeVar("T")
PLATFORMS = {f"p{i}": 1.0 - 0.08 * i for i in range(7)}
COUNTS = [1, 2, 4, 7, 8]
METRICS = {
    "cpu": [
        (f"cpu.{k}.ops_per_s", "ops/s", True) for k in ("integer", "float", "memory", "branchy")
    ],
    "disk": [
        (f"disk.bonnie.{k}_kbps", "KB/s", True)
        for k in ("chr_out", "block_out", "rewrite", "chr_in", "block_in")
    ]
    + [("disk.bonnie.seeks_per_s", "seeks/s", True)],
    "net": [
        ("net.iperf3.inbound_gbps", "Gbit/s", True),
        ("net.iperf3.outbound_gbps", "Gbit/s", True),
    ],
    "kernbench": [("kernbench.elapsed_s", "s", False)],
}


def cells() -> list[tuple[str, str, int]]:
    out = [("native", w, 1) for w in METRICS]
    out += [(p, w, n) for p in PLATFORMS for n in COUNTS for w in METRICS]
    return out


def write(store: Store, samples: int, rng: np.random.Generator) -> int:
    """A run whose metric rows number about ``samples``; returns the exact count."""
    per_rep = sum(n * len(METRICS[w]) for _, w, n in cells())
    reps = max(1, math.ceil(samples / per_rep))
    store.create_run(
        RunRecord(
            id="bench",
            study_name="bench",
            study_text="name: bench\nbaseline: native\n",
            study_source="bench.yaml",
            status="finished",
            created_at=datetime.now(UTC),
            finished_at=datetime.now(UTC),
            hvbench_version="bench",
            git_commit=None,
            options={},
            inventory={"cores_logical": 8, "hostname": "bench"},
        )
    )
    written = 0
    for platform, workload, n in cells():
        row = CellRecord(
            key=f"{platform}|{workload}|{n}",
            platform=platform,
            driver="native" if platform == "native" else "qemu",
            workload=workload,
            workload_name=workload,
            instances=n,
            platform_settings={"vcpus": 1},
            workload_settings={"name": workload},
            ran=WhatRan(bare=platform == "native"),
        )
        cell_id = store.cell_id("bench", row)
        factor = PLATFORMS.get(platform, 1.0)
        for rep in range(reps):
            metrics = [
                MetricRecord(
                    i,
                    name,
                    float(100 * (factor if hib else 1 / factor) * rng.lognormal(0, 0.03)),
                    unit,
                    hib,
                )
                for name, unit, hib in METRICS[workload]
                for i in range(n)
            ]
            written += len(metrics)
            busy = 10 * n / factor * rng.lognormal(0, 0.02)
            store.add_sample(
                cell_id,
                SampleRecord(
                    repetition=rep,
                    status="ok",
                    error=None,
                    started_at=datetime.now(UTC),
                    seconds=10.0,
                    platform_state=PlatformState(overcommit=n > 8),
                    host_cpu=HostCpuReading(
                        wall_s=10.0,
                        cores=8,
                        states_s={"user": busy * 0.3, "system": busy * 0.1, "guest": busy * 0.6},
                        busy_s=busy,
                        instances_s=[busy / n] * n,
                    ),
                    metrics=metrics,
                    raw=[],
                ),
            )
    return written


def _timed(fn: Callable[..., T], *args: object) -> tuple[T, float, float]:
    """fn(*args), its wall time and this process's CPU time (the latter is what a busy shared
    host does not inflate)."""
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, time.perf_counter() - w0, time.process_time() - c0


def _import_lazy_modules() -> None:
    """scipy.stats and matplotlib are imported on first use; time them apart from the work."""
    import hvbench.report.plots  # noqa: F401
    from hvbench.analysis.stats import scipy_stats

    scipy_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    args = parser.parse_args()
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        t0 = time.perf_counter()
        n = write(store, args.samples, np.random.default_rng(1))
        print(f"wrote {n} samples (metric values) in {time.perf_counter() - t0:.1f} s")
        print(f"host load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        _, wall, cpu = _timed(_import_lazy_modules)
        print(f"imports of scipy.stats and matplotlib (once per process): {wall:.2f} s wall")
        analysis, wall, cpu = _timed(analyse, store, "bench")
        print(f"analysis: {wall:.2f} s wall, {cpu:.2f} s CPU ({len(analysis.results)} results)")
        for fmt in EXPORTERS:
            text, fmt_wall, fmt_cpu = _timed(render, analysis, fmt)
            total_wall, total_cpu = wall + fmt_wall, cpu + fmt_cpu
            verdict = "ok" if total_wall < 5 else ("ok in CPU time" if total_cpu < 5 else "OVER")
            print(
                f"report --format {fmt:4}: render {fmt_wall:.2f} s; with the analysis "
                f"{total_wall:.2f} s wall, {total_cpu:.2f} s CPU; {len(text) / 1e6:.1f} MB "
                f"[target 5 s: {verdict}]"
            )


if __name__ == "__main__":
    main()
