"""What does profiling the host (study ``profile: true``) cost what it profiles?

A fixed amount of work (``sysbench cpu``, one thread, a fixed number of events) is timed by the
CPU seconds it takes, not by its wall time: on a host shared with other load the wall time
swings by tens of % while the CPU time of fixed work does not, and the sampling interrupts
perf adds are charged to the task they interrupt. Each round runs the work without a profile
and inside hvbench's own profile window (``HostProfiler``) at each frequency, the order rotated
every round; printed: the mean CPU seconds, the change against no profile, and that change per
perf sample taken on the work's CPU.

Usage: ``python bench/profile_overhead.py [--rounds 5] [--events 4000] [--freq 99 --freq 999
--freq 9999]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

from hvbench.host import profile
from hvbench.host.resources import Ledger


def cpu_seconds(events: int) -> float:
    """User + system seconds of one fixed run of ``sysbench cpu`` (children's rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = ["sysbench", "cpu", "--threads=1", f"--events={events}", "--time=0", "run"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def profiled(freq: int, events: int, tmp: Path) -> float:
    """The work's CPU seconds inside a profile window at ``freq`` Hz (the events on)."""
    profile.FREQUENCY_HZ = freq
    ledger = Ledger(f"bench-{freq}", root=tmp)
    profiler = profile.HostProfiler(ledger, tmp, print)
    try:
        with profiler.window() as window:
            window.start()
            used = cpu_seconds(events)
            assert window.stop() is not None, "perf took no profile"
    finally:
        ledger.release_all()
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--freq", type=int, action="append")
    args = parser.parse_args()
    configs: list[int] = [0, *(args.freq or [profile.FREQUENCY_HZ, 999, 9999])]
    seconds: dict[int, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for freq in configs[r % len(configs) :] + configs[: r % len(configs)]:
                used = profiled(freq, args.events, Path(tmp)) if freq else cpu_seconds(args.events)
                seconds[freq].append(used)
                print(f"round {r + 1}: {freq or 'no profile'} Hz: {used:.3f} CPU s", flush=True)
    base = statistics.mean(seconds[0])
    print(f"\nsysbench cpu, {args.events} events, CPU seconds over {args.rounds} rounds:")
    print(f"  no profile: {base:.3f} (sd {statistics.stdev(seconds[0]):.3f})")
    for freq in configs[1:]:
        mean = statistics.mean(seconds[freq])
        per_sample = (mean - base) / (mean * freq)
        print(
            f"  {freq:>5} Hz: {mean:.3f} (sd {statistics.stdev(seconds[freq]):.3f}), "
            f"{100 * (mean / base - 1):+.2f}%, {1e6 * per_sample:+.1f} µs per sample"
        )


if __name__ == "__main__":
    main()
