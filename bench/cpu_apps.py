"""The cpu apps suite's figures and their spread: each program's throughput, its CV over
repetitions and the wall time of one copy, natively and (``--tcg``) in a QEMU TCG guest.

Not a test: it prints figures. One instance, prepared once (the corpus is made once), then the
suite measured ``--repeat`` times in a row; the CV is hvbench's own (``analysis.stats``). The
target is CV <= 2 % natively on a quiet host; the load average is printed before and after, since
a shared host inflates it. Beside it, each program's CPU share (CPU seconds of its copies over
their wall seconds: below 100 % per copy, the copies waited for a CPU that others held) and the
CV of its work per CPU-second, which time spent waiting for a CPU does not inflate: on a shared
host, that CV says whether the program's work is steady, the wall-clock CV whether the host was.

    .venv/bin/python bench/cpu_apps.py [--repeat 5] [--scale 1] [--copies N]
    .venv/bin/python bench/cpu_apps.py --tcg --scale 0.02
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from hvbench.analysis.intervals import summarize
from hvbench.drivers.base import Driver, Instance, Needs
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.drivers.qemu import QemuDriver, QemuSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.workloads.base import Context
from hvbench.workloads.cpu_apps import PROGRAMS, CpuApps, CpuAppsSettings, parse_copies


@contextlib.contextmanager
def instance(tcg: bool, tools: list[str]) -> Iterator[tuple[Instance, RunNetwork]]:
    """One native instance, or one TCG guest with 1 vCPU and 1 GiB; all released after."""
    run_id = f"bench-cpuapps-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(run_id)
    ledger.claim()
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            network = RunNetwork(run_id, ledger)
            needs = Needs(tools=frozenset(tools))
            driver: Driver
            if tcg:
                settings = QemuSettings(driver="qemu", accel="tcg", memory="1G", nic="none")
                driver = QemuDriver("tcg", settings, needs, ledger, network, Path(tmp))
            else:
                settings = NativeSettings(driver="native")
                driver = NativeDriver("native", settings, needs, ledger, network, Path(tmp))
            [inst] = driver.start(1, time.monotonic() + 900).instances
            try:
                yield inst, network
            finally:
                driver.stop([inst])
    finally:
        ledger.release_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--copies", type=int, default=None, help="default: one per vCPU")
    ap.add_argument("--tcg", action="store_true", help="in a QEMU TCG guest, not natively")
    args = ap.parse_args()

    settings = CpuAppsSettings(name="cpu", scale=args.scale, copies=args.copies)
    workload = CpuApps(settings)
    rates: dict[str, list[float]] = defaultdict(list)
    per_cpu_s: dict[str, list[float]] = defaultdict(list)
    seconds: dict[str, list[float]] = defaultdict(list)
    shares: dict[str, list[float]] = defaultdict(list)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with instance(args.tcg, workload.tools()) as (inst, network):
        copies = args.copies or inst.vcpus
        ctx = Context(network=network, quick=False, instance_count=1)
        workload.prepare(inst, ctx)
        try:
            for rep in range(args.repeat):
                t0 = time.monotonic()
                outcome = workload.measure(inst, ctx)
                took, figures = time.monotonic() - t0, []
                for program, metric, raw in zip(
                    PROGRAMS, outcome.metrics, outcome.raw, strict=True
                ):
                    rates[program.key].append(metric.value or 0.0)
                    ran = parse_copies(raw.content, copies)
                    wall = sum(c.seconds for c in ran)
                    cpu = sum(c.cpu_seconds for c in ran)
                    seconds[program.key].append(wall / len(ran))
                    shares[program.key].append(cpu / wall)
                    per_cpu_s[program.key].append((metric.value or 0.0) * wall / max(cpu, 1e-9))
                    figures.append(f"{program.key} {metric.value:.5g}")
                print(f"repetition {rep + 1}: {took:.0f} s: {', '.join(figures)}", flush=True)
        finally:
            workload.cleanup(inst, ctx)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    where = "TCG guest, 1 vCPU" if args.tcg else f"native, {copies} copies"
    print(f"\n{where}, scale {args.scale:g}, {args.repeat} repetitions")
    print(
        f"{'program':<10} {'metric':<32} {'mean':>12} {'CV':>7} {'s/copy':>8} "
        f"{'CPU share':>9} {'CV per CPU-s':>12}"
    )
    for program in PROGRAMS:
        s, c = summarize(rates[program.key]), summarize(per_cpu_s[program.key])
        wall, share = statistics.mean(seconds[program.key]), statistics.mean(shares[program.key])
        print(
            f"{program.key:<10} {program.metric:<32} {s.mean:>12.5g} {s.cv:>7.2%} {wall:>8.1f} "
            f"{share:>9.0%} {c.cv:>12.2%}"
        )


if __name__ == "__main__":
    main()
