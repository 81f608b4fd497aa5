"""Warm-up and order effects (issue 27, item 5): is the first run of a job in a freshly started
instance slower than the runs after it, and is a cell's first repetition unlike its later ones?

Not a test: it measures and prints figures. Four commands:

``warmup``: the in-instance warm-up. The runner boots fresh instances for every repetition, so
every sample it takes is the first run of each program in its instance: under QEMU's TCG the
code is translated on first use, and page caches start cold. Here, in one fresh instance per
round (native, container, a QEMU TCG guest: the default study's settings for them, STUDY), a
workload is prepared as the runner prepares it, then measured ``--passes`` times back to back
(the cpu apps suite without POV-Ray at the work ``scale: auto`` chose natively at the start, as
a run does; dd 1 GiB). Pass 1 is what a run measures; passes 2 and 3 are warm. Per instance,
pass 1's figure over the mean of the later passes (a speed: below 1, pass 1 was slower;
lower-is-better metrics inverted); over the instances, the mean of those ratios with its 95%
interval (``summarize``: the passes share their instance, so the ratio is taken within it,
paired), the p-value of a ratio of 1 and Holm's over the measured figures, and Fieller's
interval of mean(pass 1)/mean(later) across instances (``ratio``, which takes the two as
independent: wider where instances differ more than passes do). In QEMU guests, also the blocks
TCG translated in each pass (``info jit``) and QEMU's CPU time. ``--guest-aslr-off`` turns
address space layout randomization off in the guests (never on the host).

``translation``: what translating one block costs QEMU's CPU (``measure_translation``).

``study`` prints STUDY (5 repetitions) for ``hvbench run``; ``order`` reads runs from a store:
per cell and metric, repetition 1 over the mean of the later ones (oriented as above), with the
two-sided p-value of repetition 1 against the later ones' t prediction interval; per run and
platform the mean ratio over its cells with its interval (the cells of a repetition share its
instance and its minutes of host load, so that interval is narrower than it should be).

    .venv/bin/python bench/warmup.py warmup --instances 8 --tcg-instances 5
    .venv/bin/python bench/warmup.py warmup --platforms qemu-tcg --instances 4 --out tcg.json
    .venv/bin/python bench/warmup.py warmup --platforms qemu-tcg --instances 2 --guest-aslr-off
    .venv/bin/python bench/warmup.py warmup --workloads disk --platforms native,container \
        --instances 20 --out dd.json
    .venv/bin/python bench/warmup.py warmup --load warmup.json tcg.json dd.json  # together
    .venv/bin/python bench/warmup.py translation --rounds 6
    .venv/bin/python bench/warmup.py study > /tmp/order.yaml
    .venv/bin/hvbench run /tmp/order.yaml --db sqlite:////tmp/order.db --no-report
    .venv/bin/python bench/warmup.py order --db sqlite:////tmp/order.db
    .venv/bin/python bench/warmup.py order RUN_ID  # a run in hvbench's own store

Figures, 2026-11-26, main at bd3a693 (QEMU 7.2 TCG, the system's), on the 2-core development
VM, never quiet: load average 0.7-6 while measuring, the host's two cores 100% busy in most
samples (/proc/stat). Beside these ran the session's default ``hvbench run`` (until 11:10),
other engineers' pytest runs (disk workloads with fio, the runner, ...) and simulation scripts,
and, overlapping, the commands above (the 4 TCG instances with the order study's second run and
the ASLR-off guests; ``translation`` and the dd rounds with none of them). The calibrated
stockfish job went from 8 247 to 28 383 nodes a position between starts an hour apart: the
host's load moved even the native baseline by 3x.

Pass 1 over passes 2-3 (speed), mean over instances [95% interval]; none of the 24 measured
figures differs after Holm's step-down but the container's dd write:

    platform   n    cpu composite (geometric mean)  dd write              dd read
    native     8    1.004 [0.913, 1.095]            1.096 [1.008, 1.247]  0.940 [0.836, 1.028]
    container  8    0.951 [0.872, 1.031]            0.851 [0.814, 0.886]  1.038 [0.968, 1.117]
    qemu-tcg   9    1.104 [0.957, 1.252]            0.899 [0.781, 1.017]  0.943 [0.807, 1.079]

(dd: 28 native and container instances, 20 of them dd alone.) Per program the intervals are
+-4-22% natively and in the container (container sha256 0.955 [0.915, 0.995], p 0.03, Holm 0.71),
+-10-43% under TCG: the host's load, not the passes, sets them (per CPU-second of the programs'
own CPU time, also printed, they are about as wide natively, and the same under TCG, whose guest
clock counts the waits). So the wall clock on this host cannot see a warm-up below ~10%; what
TCG's first pass costs is measured instead by what it does:

- Blocks TCG translated, per pass (4 instances, ASLR on as in runs): cpu suite prepare 11 038,
  pass 1 63 140, pass 2 58 695, pass 3 58 518; dd 2 112, 9 583, 8 196, 7 544. With ASLR off
  (2 instances): cpu pass 1 35 758, pass 2 253, pass 3 100. QEMU 7.2 finds a translation by
  its virtual address, and ASLR moves every process's code, so each process is translated anew:
  pass 1 translates only 4 500 blocks more than a warm pass (the guest kernel's paths).
- One block costs QEMU 9.3 us [6.9, 11.6] of CPU (``translation``: 200 starts of xz
  --version, 3 100 blocks each with ASLR, the first only without; 4 rounds, 2 left out where
  TCG flushed its 1 GiB of translations).
- So a warm-up pass would save pass 1 about 4 500 x 9.3 us = 0.04 s of 56 s of QEMU CPU
  (0.1%) in the cpu suite, 0.02 s of 5 s (0.3%) in dd. Every pass, warm or not, translates
  ~59 000 blocks (0.55 s, 1%): part of what TCG costs each new process, in every repetition
  alike. Natively and in the container, the programs and their libraries are in the host's page
  cache from the calibration on, and the corpus from prepare; a guest's initramfs is in RAM.

Decision: no untimed warm-up pass for the cpu programs; nothing changed in the workloads. The
one significant first-pass effect is dd's first 1 GiB write into a fresh container's disk,
15% slower than the next two (the ext4 on a sparse loop-backed file the driver makes per
instance; native's same kind of disk shows none), which a warm-up of the cpu programs would not
touch: whether dd should time a write to a fresh disk or a pre-written one is dd's to decide.

Repetition order (``order``), repetition 1 over the later ones, mean over a platform's cells
(cpu programs and dd; the default run's also boot and iperf3) [95% interval]:

    run                          native                container             qemu (TCG)
    order, 10:59 (5 reps)        0.567 [0.456, 0.679]  0.637 [0.543, 0.732]  0.739 [0.582, 0.896]
    order, 11:46 (5 reps)        0.996 [0.778, 1.213]  1.141 [0.882, 1.400]  1.005 [0.768, 1.241]
    default, 10:52 (3 reps)      1.690 [1.379, 2.160]  1.033 [0.793, 1.280]  qemu-virtio 1.290
                                                                             [1.004, 1.583]

The first repetition was 26-43% slower in one run, the same in the next, 69% faster natively in
the default run: it moves with the host's load at the time (the first order run's repetition 1
ran beside the default run and others' tests), in both directions, not with being first. No
systematic first-repetition effect; a drift within a run is what the analysis' trend flag is
for. (Both order runs used STUDY's settings, written by hand to /tmp before ``study`` existed.)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import psutil
import scipy.stats

from hvbench.analysis.holm import holm
from hvbench.analysis.intervals import summarize
from hvbench.analysis.ratios import Ratio, ratio
from hvbench.analysis.stats import geometric_mean
from hvbench.drivers import driver_class
from hvbench.drivers.base import Driver, Instance
from hvbench.drivers.qemu import QemuInstance
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.plan import START_TIMEOUT_S
from hvbench.runner import calibrate, needs_of
from hvbench.store import Store
from hvbench.study import Study, parse_study
from hvbench.workloads.base import Context, Metric, Outcome, Workload
from hvbench.workloads.common import run
from hvbench.workloads.cpu_apps import SUB_SCORES, CpuApps, parse_copies

STUDY = """\
name: order
description: A cell's first repetition against its later ones (bench/warmup.py)
baseline: native
platforms:
  native: {driver: native}
  container: {driver: container, vcpus: 1, memory: 1G, disk: {size: 2G}}
  qemu-tcg:
    {driver: qemu, accel: tcg, vcpus: 1, memory: 1G, nic: virtio-net,
     disk: {bus: virtio-blk, cache: none, size: 2G}}
workloads:
  - {name: cpu, suite: apps, copies: 1, skip: [povray]}
  - {name: disk, tool: dd, size: 1G}
instances: [1]
repetitions: 5
"""
"""The default study's settings for native, the container and a QEMU platform (accel: tcg
rather than auto, since the question is TCG's), and for its cpu (all programs but POV-Ray, as at
bd3a693) and dd workloads."""


@dataclass(frozen=True)
class Figure:
    """One metric of one pass in one instance."""

    platform: str
    instance: int
    workload: str
    passed: int
    metric: str
    value: float
    higher_is_better: bool


def speed(first: float, later: Iterable[float], higher_is_better: bool) -> float:
    """``first`` over the mean of ``later`` as a speed: below 1, ``first`` was slower."""
    mean = float(np.mean(list(later)))
    return first / mean if higher_is_better else mean / first


# in-instance warm-up -------------------------------------------------------------------------


@contextlib.contextmanager
def platforms(study: Study) -> Iterator[tuple[dict[str, Driver], RunNetwork]]:
    """A driver for each of the study's platforms, in a run network of their own; everything
    they made released after."""
    run_id = f"bench-warmup-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(run_id)
    ledger.claim()
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            network = RunNetwork(run_id, ledger)
            needs = needs_of(study)
            drivers: dict[str, Driver] = {}
            for platform, settings in study.platforms.items():
                (Path(tmp) / platform).mkdir()
                drivers[platform] = driver_class(settings)(
                    platform, settings, needs, ledger, network, Path(tmp) / platform
                )
            yield drivers, network
    finally:
        ledger.release_all()


def measure_warmup(
    study: Study, counts: dict[str, int], passes: int, out: Path, aslr: bool
) -> list[Figure]:
    """Round by round, a fresh instance of each platform, each workload prepared once and
    measured ``passes`` times in it; every figure saved to ``out`` as it comes."""
    figures: list[Figure] = []
    with platforms(study) as (drivers, network):
        study = calibrated(study, drivers[study.baseline or "native"], network)
        for k in range(max(counts.values())):
            for platform, driver in drivers.items():
                if k < counts[platform]:
                    figures += in_instance(study, driver, network, k, passes, aslr)
                    out.write_text(json.dumps([asdict(f) for f in figures], indent=1))
    return figures


def calibrated(study: Study, native: Driver, network: RunNetwork) -> Study:
    """The study with the work of the workloads that ask for it (the cpu programs' ``scale:
    auto``) sized on a native instance, as a run does."""
    todo = [i for i, w in enumerate(study.workloads) if w.calibrates()]
    if not todo:
        return study
    [inst] = native.start(1, time.monotonic() + START_TIMEOUT_S).instances
    try:
        chosen = {
            i: calibrate(study.workload(i), inst, network).model_dump(mode="json") for i in todo
        }
    finally:
        native.stop([inst])
    print(f"calibrated: {[c.get('work') for c in chosen.values()]}", flush=True)
    return study.calibrated(chosen)


def in_instance(
    study: Study, driver: Driver, network: RunNetwork, k: int, passes: int, aslr: bool
) -> list[Figure]:
    """A fresh instance: each workload prepared, measured ``passes`` times, cleaned up; in a
    QEMU guest also what each pass (prepare as pass 0) cost its QEMU (``Tcg``), with the
    guest's address space layout randomization on (as runs have it) or off."""
    figures: list[Figure] = []
    [inst] = driver.start(1, time.monotonic() + START_TIMEOUT_S).instances
    try:
        if not aslr and isinstance(inst, QemuInstance):
            guest_aslr(inst, on=False)
        for index in range(len(study.workloads)):
            workload = study.workload(index)
            figure = functools.partial(Figure, driver.platform, k, workload.settings.label())
            ctx = Context(network=network, quick=False, instance_count=1)
            before = Tcg.read(inst)
            workload.prepare(inst, ctx)
            try:
                for n in range(passes + 1):
                    if n > 0:
                        where = f"{driver.platform} #{k} {workload.settings.label()} pass {n}"
                        figures += measured(
                            workload, inst, ctx, functools.partial(figure, n), where
                        )
                    after = Tcg.read(inst)
                    if before is not None and after is not None:
                        figures += after.since(before, functools.partial(figure, n))
                    before = after
            finally:
                workload.cleanup(inst, ctx)
    finally:
        driver.stop([inst])
    return figures


def measured(
    workload: Workload, inst: Instance, ctx: Context, figure: Callable[..., Figure], where: str
) -> list[Figure]:
    """One pass: the workload's metrics (and the cpu programs' per CPU-second), printed."""
    t0 = time.monotonic()
    outcome = workload.measure(inst, ctx)
    took = time.monotonic() - t0
    metrics = [m for m in outcome.metrics if m.value is not None]
    out = [figure(m.name, m.value, m.higher_is_better) for m in metrics]
    if isinstance(workload, CpuApps):
        copies = workload.settings.copies or inst.vcpus
        out += [figure(f"{m.name} per CPU-s", v, True) for m, v in per_cpu_second(outcome, copies)]
    shown = ", ".join(f"{short(m.name)} {m.value:.4g}" for m in metrics)
    print(f"{where} ({took:.0f} s): {shown}", flush=True)
    return out


def guest_aslr(inst: QemuInstance, on: bool) -> None:
    """Turn a guest's address space layout randomization on (2, Linux's default) or off: a
    guest's own setting, never the host's."""
    run(inst, ["sh", "-c", f"echo {2 if on else 0} > /proc/sys/kernel/randomize_va_space"], 60)


PROBE_EXECS = 200
PROBE = r"""i=0; while [ "$i" -lt "$1" ]; do /usr/bin/xz --version >/dev/null; i=$((i + 1)); done"""
"""A short program started many times: its run is mostly the dynamic loader and libc's start,
code TCG translates anew in each process while ASLR moves it, once when it does not."""


def measure_translation(study: Study, rounds: int) -> None:
    """What one translated block costs QEMU's CPU: PROBE with ASLR on, then off (the order
    alternating from round to round), in one TCG guest; the same execution either way, so the
    difference of QEMU's CPU time over the difference of blocks translated is translation's."""
    costs = []
    with platforms(study) as (drivers, _):
        driver = drivers["qemu-tcg"]
        [inst] = driver.start(1, time.monotonic() + START_TIMEOUT_S).instances
        try:
            assert isinstance(inst, QemuInstance)
            for r in range(rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                spent = {on: _probe(inst, on) for on in order}
                on, off = spent[True], spent[False]
                if on is None or off is None:
                    print(f"round {r + 1}: TCG flushed its translations; left out", flush=True)
                    continue
                costs.append((on[1] - off[1]) / (on[0] - off[0]) * 1e6)
                print(
                    f"round {r + 1}: ASLR on {on[0]:,} blocks {on[1]:.2f} s, off {off[0]:,} "
                    f"blocks {off[1]:.2f} s: {costs[-1]:.1f} us a block",
                    flush=True,
                )
        finally:
            driver.stop([inst])
    c = summarize(costs)
    print(f"QEMU CPU per translated block: {c.mean:.1f} us {_interval(c.ci_low, c.ci_high)}")


def _probe(inst: QemuInstance, aslr: bool) -> tuple[int, float] | None:
    """PROBE_EXECS starts of PROBE: the blocks TCG translated and QEMU's CPU seconds; None
    where TCG threw its translations away in between (its count starts again)."""
    guest_aslr(inst, aslr)
    before = Tcg.read(inst)
    run(inst, ["sh", "-c", PROBE, "sh", str(PROBE_EXECS)], timeout=900)
    after = Tcg.read(inst)
    assert before is not None and after is not None
    if after.flushes != before.flushes:
        return None
    return after.blocks - before.blocks, after.cpu_seconds - before.cpu_seconds


TCG_BLOCKS = "qemu.tcg_blocks_translated"
QEMU_CPU = "qemu.host_cpu_s"
"""QEMU's CPU time on the host in a pass: unlike the guest's clock, it does not count the time
the guest waited for a host CPU that others held."""


@dataclass(frozen=True)
class Tcg:
    """A QEMU guest's translations so far (``info jit``) and its process's host CPU time."""

    blocks: int
    flushes: int
    cpu_seconds: float

    @classmethod
    def read(cls, inst: Instance) -> Tcg | None:
        """None for an instance that is not a QEMU guest."""
        if not isinstance(inst, QemuInstance) or inst.guest is None:
            return None
        with inst.guest.monitor(time.monotonic() + 60) as qmp:
            jit = qmp.cmd("human-monitor-command", **{"command-line": "info jit"})
        blocks = re.search(r"^TB count\s+(\d+)", jit, re.MULTILINE)
        flushes = re.search(r"^TB flush count\s+(\d+)", jit, re.MULTILINE)
        if blocks is None or flushes is None:
            raise ValueError(f"info jit said no TB count: {jit[:200]!r}")
        cpu = psutil.Process(inst.host_pids()[0]).cpu_times()
        return cls(int(blocks.group(1)), int(flushes.group(1)), cpu.user + cpu.system)

    def since(self, before: Tcg, figure: Callable[..., Figure]) -> list[Figure]:
        """What the pass between ``before`` and this reading cost."""
        if self.flushes != before.flushes:
            print("TCG flushed its translations: blocks translated after it are not counted")
        return [
            figure(TCG_BLOCKS, self.blocks - before.blocks, False),
            figure(QEMU_CPU, self.cpu_seconds - before.cpu_seconds, False),
        ]


def per_cpu_second(outcome: Outcome, copies: int) -> list[tuple[Metric, float]]:
    """Each cpu program's throughput per CPU-second of its copies (hvbench-clock's rusage):
    what time spent waiting for a CPU others hold does not dilute, so that on a shared host it
    tells a program's own warm-up (TCG translating, page faults) from the host's load."""
    out = []
    for m, raw in zip(outcome.metrics, outcome.raw, strict=True):
        ran = parse_copies(raw.content, copies)
        wall, cpu = sum(c.seconds for c in ran), sum(c.cpu_seconds for c in ran)
        out.append((m, (m.value or 0.0) * wall / cpu))
    return out


@dataclass(frozen=True)
class Row:
    """Pass 1 over the later passes of one metric on one platform, one ratio per instance."""

    platform: str
    name: str
    speeds: list[float]
    fieller: Ratio | None
    measured: bool
    """A figure the workload reports (in the family Holm's step-down is taken over), not one
    derived from them (per CPU-second, the composite, QEMU's CPU time)."""


def print_warmup(figures: list[Figure]) -> None:
    """Per platform and metric: pass 1 over the later passes, within each instance, with the
    p-value of a ratio of 1 (Student's t over the instances) and Holm's over the measured
    figures; per platform, the cpu programs' composite (the geometric mean of their ratios, per
    instance); in QEMU guests, the blocks TCG translated in each pass."""
    series: dict[tuple[str, str, str], dict[int, dict[int, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    better: dict[str, bool] = {}
    for f in figures:
        series[(f.platform, f.workload, f.metric)][f.instance][f.passed] = f.value
        better[f.metric] = f.higher_is_better
    rows = []
    composite: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (platform, workload, metric), by_instance in series.items():
        if metric == TCG_BLOCKS:
            continue
        firsts, laters, speeds = [], [], []
        for k, passes in by_instance.items():
            later = [v for n, v in passes.items() if n > 1]
            if 1 not in passes or not later:
                continue
            firsts.append(passes[1])
            laters.append(float(np.mean(later)))
            speeds.append(speed(passes[1], later, better[metric]))
            if metric in SUB_SCORES:
                composite[platform][k].append(speeds[-1])
        a, b = (laters, firsts) if better[metric] else (firsts, laters)
        measured = not metric.endswith(" per CPU-s") and not metric.startswith("qemu.")
        rows.append(Row(platform, _name(workload, metric), speeds, ratio(a, b), measured))
    for platform, by_instance in composite.items():
        programs = max(len(v) for v in by_instance.values())
        whole = [float(geometric_mean(v)) for v in by_instance.values() if len(v) == programs]
        rows.append(Row(platform, "cpu composite (geometric mean)", whole, None, False))
    _print_rows([r for r in rows if len(r.speeds) >= 2])
    _print_blocks(series)


def _print_rows(rows: list[Row]) -> None:
    p = [float(scipy.stats.ttest_1samp(r.speeds, 1.0).pvalue) for r in rows]
    adjusted = holm([pi if r.measured else math.nan for pi, r in zip(p, rows, strict=True)])
    print(
        f"\n{'platform':<10} {'metric':<32} {'n':>2} {'pass 1 / later':>14} {'95% interval':>16} "
        f"{'p':>6} {'Holm':>6} {'Fieller':>16}"
    )
    for r, pi, ph in zip(rows, p, adjusted, strict=True):
        s = summarize(r.speeds)
        other = "-" if r.fieller is None else _interval(r.fieller.low, r.fieller.high)
        holm_p = "-" if math.isnan(ph) else f"{ph:.3f}"
        print(
            f"{r.platform:<10} {r.name:<32} {s.n:>2} {s.mean:>14.3f} "
            f"{_interval(s.ci_low, s.ci_high):>16} {pi:>6.3f} {holm_p:>6} {other:>16}"
        )


def _print_blocks(series: dict[tuple[str, str, str], dict[int, dict[int, float]]]) -> None:
    """The blocks TCG translated per pass, and QEMU's CPU time in pass 1: what translating
    the blocks pass 1 translates beyond the later ones costs (``translation``) is a share of
    it."""
    print(
        f"\n{'platform':<10} {'TCG blocks translated in':<24} {'n':>2}  mean per pass (0: prepare)"
    )
    for (platform, workload, metric), by_instance in series.items():
        if metric != TCG_BLOCKS:
            continue
        per_pass = defaultdict(list)
        for blocks in by_instance.values():
            for n, v in blocks.items():
                per_pass[n].append(v)
        shown = "  ".join(f"{n}: {np.mean(v):,.0f}" for n, v in sorted(per_pass.items()))
        cpu = np.mean([c[1] for c in series[(platform, workload, QEMU_CPU)].values()])
        print(
            f"{platform:<10} {workload.split()[0]:<24} {len(by_instance):>2}  {shown}; "
            f"QEMU CPU in pass 1: {cpu:.1f} s"
        )


def _name(workload: str, metric: str) -> str:
    """A row's name: the metric without its workload's prefix; QEMU's per-pass figures with
    the workload they were taken in."""
    if metric.startswith("qemu."):
        return f"{workload.split()[0]}: QEMU's {short(metric)}"
    return short(metric)


def short(metric: str) -> str:
    """A metric's name without its workload's prefix: ``xz.mib_per_s``, ``write_mbps``."""
    return metric.split(".", 2)[-1]


def _interval(low: float, high: float) -> str:
    return "-" if math.isnan(low) else f"[{low:.3f}, {high:.3f}]"


# repetition order ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstRepetition:
    """A cell's metric: repetition 1 against the later repetitions of the same instance."""

    run_id: str
    platform: str
    metric: str
    n: int
    speed: float
    """Repetition 1 over the mean of the later ones, as a speed (``speed``)."""
    p_value: float
    """Two-sided, of repetition 1 coming from the later ones' distribution (t prediction)."""


def first_repetitions(store: Store, run_id: str) -> list[FirstRepetition]:
    cells = {c.id: c for c in store.cells(run_id)}
    series: dict[tuple[int, str, int], dict[int, float]] = defaultdict(dict)
    better: dict[str, bool] = {}
    for row in store.metric_rows(run_id):
        if row.value is not None and (row.headline or row.composite):
            series[(row.cell_id, row.name, row.instance)][row.repetition] = row.value
            better[row.name] = row.higher_is_better
    found = []
    for (cell_id, metric, _), reps in series.items():
        later = np.array([v for r, v in sorted(reps.items()) if r > 1])
        if 1 not in reps or len(later) < 2 or min(reps.values()) <= 0:
            continue  # no later repetitions to compare with, or no ratio of a zero
        sd = float(np.std(later, ddof=1))
        t = (reps[1] - later.mean()) / (sd * math.sqrt(1 + 1 / len(later))) if sd else math.inf
        p = float(2 * scipy.stats.t.sf(abs(t), len(later) - 1)) if sd else math.nan
        s = speed(reps[1], later, better[metric])
        found.append(FirstRepetition(run_id, cells[cell_id].platform, metric, len(reps), s, p))
    return found


def print_order(store: Store, run_ids: list[str]) -> None:
    found = [f for run_id in run_ids for f in first_repetitions(store, run_id)]
    print(f"{'run':<22} {'platform':<13} {'metric':<34} {'n':>2} {'rep 1 / later':>13} {'p':>6}")
    for f in sorted(found, key=lambda f: (f.run_id, f.platform, f.metric)):
        print(
            f"{f.run_id:<22} {f.platform:<13} {f.metric:<34} {f.n:>2} {f.speed:>13.3f} "
            f"{f.p_value:>6.3f}"
        )
    by_platform: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in found:
        by_platform[(f.run_id, f.platform)].append(f.speed)
    print(f"\n{'run':<22} {'platform':<13} {'cells':>5} {'rep 1 / later':>13} {'95% interval':>17}")
    for (run_id, platform), speeds in sorted(by_platform.items()):
        s = summarize(speeds)
        print(
            f"{run_id:<22} {platform:<13} {s.n:>5} {s.mean:>13.3f} "
            f"{_interval(s.ci_low, s.ci_high):>17}"
        )


# command line --------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description="Warm-up and order effects (see the docstring).")
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warmup", help="pass 1 against passes 2.. in fresh instances")
    w.add_argument("--instances", type=int, default=4, help="fresh instances per platform")
    w.add_argument("--tcg-instances", type=int, default=None, help="default: --instances")
    w.add_argument("--passes", type=int, default=3)
    w.add_argument("--platforms", default="native,container,qemu-tcg", help="of STUDY's")
    w.add_argument("--workloads", default="cpu,disk", help="of STUDY's, by name")
    w.add_argument("--out", type=Path, default=Path("/tmp/hvbench-warmup/warmup.json"))
    w.add_argument(
        "--guest-aslr-off",
        action="store_true",
        help="QEMU guests without ASLR (TCG's translations are per virtual address)",
    )
    w.add_argument(
        "--load", type=Path, nargs="+", help="analyse the figures earlier warmups saved, together"
    )
    t = sub.add_parser("translation", help="QEMU CPU time per block TCG translates")
    t.add_argument("--rounds", type=int, default=5)
    sub.add_parser("study", help="print the study of the order effect")
    o = sub.add_parser("order", help="repetition 1 against the later ones, from a store")
    o.add_argument("--db", default=None, help="the store (default: hvbench's)")
    o.add_argument("runs", nargs="*", help="run ids (default: every run in the store)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # release the ledger

    if args.command == "translation":
        measure_translation(parse_study(STUDY, "bench/warmup.py"), args.rounds)
    elif args.command == "study":
        sys.stdout.write(STUDY)
    elif args.command == "order":
        store = Store(args.db)
        print_order(store, args.runs or [r.id for r in store.runs()])
    elif args.load:
        print_warmup(
            [
                Figure(**{**f, "instance": i * 1000 + f["instance"]})  # each file's apart
                for i, path in enumerate(args.load)
                for f in json.loads(path.read_text())
            ]
        )
    else:
        study = parse_study(STUDY, "bench/warmup.py")
        names = args.workloads.split(",")
        study = replace(study, workloads=[w for w in study.workloads if w.name in names])
        wanted = args.platforms.split(",")
        counts = {p: args.instances if p in wanted else 0 for p in study.platforms}
        if "qemu-tcg" in wanted:
            counts["qemu-tcg"] = args.tcg_instances or args.instances
        args.out.parent.mkdir(parents=True, exist_ok=True)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        figures = measure_warmup(study, counts, args.passes, args.out, not args.guest_aslr_off)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print_warmup(figures)


if __name__ == "__main__":
    main()
