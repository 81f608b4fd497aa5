"""Fidelity: does running a tool through hvbench's native platform change what it measures?

Not a test: it prints figures. Each round runs fio (sequential and random read and write at
queue depth 32) and iperf3 (inbound and outbound) three ways, with the same parameters, on the
same data disk and against the same peer server:

- bare-1 and bare-2: the tool as a user runs it by hand, its output captured by a plain
  ``subprocess.run``: fio as is, iperf3 in the native instance's network namespace through
  ``ip netns exec`` (the peer is only reachable from there);
- hvbench: the Fio and Iperf3 workloads on a NativeInstance, i.e. ``Instance.exec`` (nsenter, a
  session of its own, the bounded capture), as ``hvbench run`` measures native.

The three arms are interleaved tool by tool (fio's three runs back to back, then iperf3's), and
every 6 rounds use each of the 6 orders of the three once, so each arm runs first, second and
third, and after each other arm, equally often: drift of a shared host hits them alike (use a
multiple of 6 rounds).

How to read it. Per metric and round, two ratios:

- hvbench/bare = hvbench / the geometric mean of that round's two bare runs: the harness's effect;
- bare/bare = bare-2 / bare-1 (the A/A control): the same tool against itself, i.e. what this
  host's noise alone does to a ratio measured this way.

Each column prints the median of the per-round ratios and the 95% interval of their mean
(``hvbench.analysis.intervals.summarize``). The last column sets the hvbench/bare ratios against
the bare/bare ones (``ratios.ratio``: Fieller's interval and its test; the two are independent
by construction): how far the mean hvbench/bare ratio is from the mean A/A ratio, its interval,
and "OUTSIDE" when hvbench's effect lies outside what the A/A noise explains (the interval
excludes 0, p < 0.05), "within" otherwise. One
disturbed round moves a mean more than a median, so on a noisy host the medians and this
column can disagree; the intervals say how much either can be trusted. The target is an effect
within ±2 %; on a noisy host both intervals are wide and nothing below their width can be
concluded.

A last line gives the CPU the bench's own process spent per round in each arm (starting the
tools, capturing their output, waiting for them): an upper bound, independent of the host's
noise, on what the harness's exec path and capture take from the tools.

    .venv/bin/python bench/fidelity.py [--rounds 6] [--seconds 5]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hvbench.analysis.intervals import SampleSummary, summarize
from hvbench.analysis.ratios import Ratio, ratio
from hvbench.drivers.base import Needs
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.workloads.base import Context, Metric, Workload
from hvbench.workloads.fio import Fio, FioSettings, parse_fio_json
from hvbench.workloads.iperf3 import Iperf3, Iperf3Settings, parse_iperf3_json

METRICS = (
    "disk.fio.seq_read_qd32_mibps",
    "disk.fio.rand_read_qd32_iops",
    "disk.fio.seq_write_qd32_mibps",
    "disk.fio.rand_write_qd32_iops",
    "net.iperf3.outbound_gbps",
    "net.iperf3.inbound_gbps",
)
ARMS = ("bare-1", "hvbench", "bare-2")
ORDERS = ((0, 1, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0), (0, 2, 1), (1, 0, 2))
"""Six rounds' orders of the arms (a Williams design for three): every arm in every position
twice and after every other arm twice."""

Rounds = Mapping[str, Mapping[str, Sequence[float]]]
"""metric -> arm -> one value per round."""


def order(round_index: int) -> list[str]:
    """The arms in the order round ``round_index`` runs them."""
    return [ARMS[i] for i in ORDERS[round_index % len(ORDERS)]]


@dataclass(frozen=True)
class Fidelity:
    """One metric: hvbench's effect and the A/A control, from per-round ratios."""

    name: str
    bare: float
    """Median of the bare runs, for scale."""
    effect: SampleSummary
    """hvbench / geometric mean of the round's two bare runs."""
    control: SampleSummary
    """bare-2 / bare-1."""
    against_control: Ratio
    """Mean effect ratio over the mean A/A ratio, with Fieller's interval."""

    @property
    def outside(self) -> bool:
        return self.against_control.significant


def fidelity(name: str, by_arm: Mapping[str, Sequence[float]]) -> Fidelity:
    """The per-round ratios of one metric, summarized and tested against each other."""
    b1, h, b2 = (by_arm[arm] for arm in ARMS)
    effect = [x / math.sqrt(a * b) for a, x, b in zip(b1, h, b2, strict=True)]
    control = [b / a for a, b in zip(b1, b2, strict=True)]
    return Fidelity(
        name=name,
        bare=statistics.median([*b1, *b2]),
        effect=summarize(effect),
        control=summarize(control),
        against_control=ratio(control, effect),
    )


def table(results: Rounds) -> str:
    """The figures, one line per metric."""

    def median(s: SampleSummary) -> str:
        return f"{s.median:5.3f} [{s.ci_low:5.3f}, {s.ci_high:5.3f}]"

    lines = [
        f"{'metric':30} {'bare median':>11}  {'hvbench/bare [95%]':22}  "
        f"{'bare/bare (A/A) [95%]':22}  mean hvbench/bare vs mean A/A [95%]",
    ]
    for name in METRICS:
        f = fidelity(name, results[name])
        d = f.against_control
        verdict = "OUTSIDE" if f.outside else "within"
        lines.append(
            f"{name.split('.', 1)[1]:30} {f.bare:11.2f}  {median(f.effect):22}  "
            f"{median(f.control):22}  {d.estimate - 1:+6.1%} [{(d.low - 1) * 100:+5.1f}, "
            f"{(d.high - 1) * 100:+5.1f}] p={d.p_value:.2f} {verdict}"
        )
    return "\n".join(lines)


def run_bare(argv: list[str]) -> str:
    """A tool as a user runs it by hand: a plain subprocess, its output captured."""
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def own_cpu_s() -> float:
    """CPU seconds of this process, every thread (capture, waiting), not its children."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="a multiple of 6 balances the order")
    ap.add_argument("--seconds", type=float, default=5.0, help="fio runtime / iperf3 -t")
    args = ap.parse_args()

    run_id = f"fidelity-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(run_id)
    ledger.claim()
    root = Path("/var/tmp") / f"hvbench-{run_id}"  # on disk, as the runner's work dirs
    ledger.add("path", str(root))
    root.mkdir()
    network = RunNetwork(run_id, ledger)
    driver = NativeDriver(
        "native", NativeSettings(driver="native", disk={"size": "2G"}),
        Needs(data_disk=True), ledger, network, root,
    )  # fmt: skip
    ctx = Context(network=network, quick=False, instance_count=1)
    fio = Fio(FioSettings(name="disk", tool="fio", size="512M", depths=[32],
                          runtime=args.seconds, ramp=1))  # fmt: skip
    iperf3 = Iperf3(Iperf3Settings(name="net", seconds=args.seconds))
    results: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    own_cpu: dict[str, float] = defaultdict(float)
    print(f"{os.cpu_count()} CPUs, {load()} at the start", flush=True)
    try:
        [inst] = driver.start(1, time.monotonic() + 120).instances
        netns = inst.netns  # type: ignore[attr-defined]

        def bare_fio() -> list[Metric]:
            return parse_fio_json(run_bare(fio.argv(f"{fio.scratch(inst)}/fio.dat", quick=False)))

        def bare_iperf3() -> list[Metric]:
            out = []
            for d in iperf3.settings.directions:
                argv = iperf3.client_argv(iperf3.port(inst), d, quick=False)
                out += parse_iperf3_json(run_bare(["ip", "netns", "exec", netns, *argv]), d)
            return out

        # each tool runs its three arms back to back: the runs compared are minutes apart
        tools: list[tuple[Workload, Callable[[], list[Metric]]]] = [
            (fio, bare_fio),
            (iperf3, bare_iperf3),
        ]
        for w, _ in tools:
            w.prepare(inst, ctx)
        try:
            bare_fio()  # unrecorded: lays fio's file out and warms the disk up
            for r in range(args.rounds):
                for w, bare in tools:
                    for arm in order(r):
                        cpu0 = own_cpu_s()
                        metrics = w.measure(inst, ctx).metrics if arm == "hvbench" else bare()
                        own_cpu[arm] += own_cpu_s() - cpu0
                        for m in metrics:
                            if m.name in METRICS and m.value is not None:
                                results[m.name][arm].append(m.value)
                print(f"round {r + 1}/{args.rounds} done ({', '.join(order(r))})", flush=True)
        finally:
            for w, _ in tools:
                w.cleanup(inst, ctx)
            driver.stop([inst])
    finally:
        ledger.release_all()
    print(f"{load()} at the end\n\n{table(results)}\n")
    spent = ", ".join(f"{arm} {own_cpu[arm] / args.rounds * 1e3:.0f} ms" for arm in ARMS)
    print(f"CPU of the bench process itself (starting, capturing, waiting) per round: {spent}")


if __name__ == "__main__":
    main()
