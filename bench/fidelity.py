"""Fidelity: does running a tool through hvbench's native platform change what it measures?

Runs fio and iperf3 with the same parameters bare (a plain subprocess, in the same network
namespace and on the same data disk) and through hvbench (the Fio / Iperf3 workloads on a
NativeInstance, i.e. Instance.exec with its bounded capture), interleaved ABBA over several
rounds so that drift of a shared host hits both alike; prints the medians and the ratio
hvbench / bare per metric. Target: within ±2 %.

    .venv/bin/python bench/fidelity.py [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path

from hvbench.drivers.base import Needs
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.workloads.base import Context, Workload
from hvbench.workloads.fio import Fio, FioSettings, parse_fio_json
from hvbench.workloads.iperf3 import Iperf3, Iperf3Settings, parse_iperf3_json

FIO_METRICS = ("disk.fio.seq_read_qd32_mibps", "disk.fio.rand_read_qd32_iops",
               "disk.fio.seq_write_qd32_mibps", "disk.fio.rand_write_qd32_iops")  # fmt: skip
IPERF3_METRICS = ("net.iperf3.outbound_gbps", "net.iperf3.inbound_gbps")


def bare(netns: str, argv: list[str]) -> str:
    """The tool as a user would run it by hand, in the instance's namespace."""
    cmd = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
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
    try:
        [inst] = driver.start(1, time.monotonic() + 120)
        netns = inst.netns  # type: ignore[attr-defined]
        workloads: list[Workload] = [fio, iperf3]
        for w in workloads:
            w.prepare(inst, ctx)
        try:
            for r in range(args.rounds):
                order = ("bare", "hvbench") if r % 2 == 0 else ("hvbench", "bare")
                for how in order:
                    if how == "hvbench":
                        for w in workloads:
                            for m in w.measure(inst, ctx).metrics:
                                results[m.name][how].append(m.value)
                        continue
                    target = f"{fio.scratch(inst)}/fio.dat"
                    for m in parse_fio_json(bare(netns, fio.argv(target, quick=False))):
                        results[m.name][how].append(m.value)
                    for d in iperf3.settings.directions:
                        argv = iperf3.client_argv(iperf3.port(inst), d, quick=False)
                        for m in parse_iperf3_json(bare(netns, argv), d):
                            results[m.name][how].append(m.value)
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            for w in workloads:
                w.cleanup(inst, ctx)
            driver.stop([inst])
    finally:
        ledger.release_all()

    print(f"\n{'metric':36} {'bare (median)':>14} {'hvbench':>14} {'ratio':>8}")
    worst = 0.0
    for name in (*FIO_METRICS, *IPERF3_METRICS):
        b, h = statistics.median(results[name]["bare"]), statistics.median(results[name]["hvbench"])
        ratio = h / b
        worst = max(worst, abs(ratio - 1))
        print(f"{name:36} {b:14.2f} {h:14.2f} {ratio:8.3f}")
    print(f"\nworst deviation {worst * 100:.1f} % (target: within 2 %) over {args.rounds} rounds")


if __name__ == "__main__":
    main()
