"""What one instance of each driver holds on the host, and what starting and stopping a group of
them takes: the figures behind each platform's ``footprint`` and ``pace``
(``hvbench.drivers.footprint``), which the capacity check (``plan.misfits_at``) and the duration
estimates (``hvbench study show``) use.

Not a test: it prints figures. Per driver, one group of 1 instance and one of ``--count``,
started through the driver with the default study's settings (1 vCPU, 1 GiB, a data disk of 1
GiB; QEMU as its qemu-virtio, under the accelerator ``auto`` picks) and what its workloads need.
Per instance, the slope between the two groups (what the run's network and the platform's
shared tree cost is in both):

- tasks: threads of the instances' host processes and of everything this script started, and
  this script's own (a console reader per guest, an agent's relay): each takes a pid and counts
  against kernel.threads-max and RLIMIT_NPROC;
- net and pid namespaces: those the instances' processes are in that this script is not, and
  the network namespaces ``ip netns`` holds for the run's instances;
- memory: PSS of the instance's host processes minus the mappings that hold its guest's memory,
  plus the kernel memory charged to its cgroup where it has one (as the memory workload reads
  them), mean over the larger group; plus its network namespace where it has one of its own
  (native, container, gvisor): ``--netns`` of them made through the run's network, the rise of
  the host's kernel memory (slab, per-CPU, stacks, page tables) each, the median of 3 rounds;
  other work on the host moves that figure, so run it on a quiet host;
- start: seconds from ``start`` to every instance ready, with the data disk formatted; stop:
  seconds of ``stop``, for the group of 1;
- slowdown: four jobs of fixed work (``JOBS``: sqlite3 making a table, xz and zstd compressing
  it, a stockfish search) timed from the host in the group of 1, the median of 3 each with the
  cost of an ``exec`` of ``true`` taken off, their sum over native's (native runs first).

    .venv/bin/python bench/footprint.py [--count 4] [--netns 64] [--drivers native,container]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Driver, Instance
from hvbench.host.memory import host_memory
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.runner import needs_of
from hvbench.study import parse_study
from hvbench.workloads.common import remove, scratch_dir

MIB = 1 << 20
ROWS = 600_000
TABLE = (
    f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT {ROWS}) "
    'SELECT x, x*7919 % 10007, printf("%08x-%d", x*2654435761 % 4294967291, x % 97), x % 13 '
    "FROM c;"
)
JOBS = {
    "sqlite": f"/usr/bin/sqlite3 :memory: '{TABLE}' > c.csv",
    "xz": "head -c 1500000 c.csv > x.csv; /usr/bin/xz -6 -c x.csv > /dev/null",
    "zstd": "for i in 1 2 3 4 5 6 7 8; do /usr/bin/zstd -q -3 -c c.csv > /dev/null; done",
    "stockfish": "/usr/games/stockfish bench 16 1 10 > /dev/null 2>&1",
}
"""Fixed work, about a second or two each natively, in a scratch directory of the instance's
/tmp, removed after them (native's /tmp is the host's); their programs are the cpu apps suite's,
so every image of the study has them."""


def own_processes(instances: list[Instance]) -> list[psutil.Process]:
    """The instances' host processes and everything this script started that still runs (a
    VMM, runc's detached init is in its container's cgroup, so among the first)."""
    pids = {pid for inst in instances for pid in inst.host_pids()}
    pids |= {p.pid for p in psutil.Process().children(recursive=True)}
    found = []
    for pid in sorted(pids):
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def tasks(instances: list[Instance]) -> int:
    """Host tasks (threads) the instances hold: their processes' and this script's own."""
    count = psutil.Process().num_threads()
    for proc in own_processes(instances):
        with contextlib.suppress(psutil.Error):
            count += proc.num_threads()
    return count


def namespaces(instances: list[Instance], kind: str, run_netns: str) -> int:
    """Namespaces of a kind (net, pid) the instances hold that this script is not in: their
    processes', and for net those ``ip netns`` holds for the run's instances."""
    host = os.readlink(f"/proc/self/ns/{kind}")
    found = set()
    for proc in own_processes(instances):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/{proc.pid}/ns/{kind}"))
    if kind == "net":  # the run's own is not an instance's
        held = [n for n in os.listdir("/run/netns") if n.startswith(f"{run_netns}-")]
        found |= {f"net:[{os.stat(f'/run/netns/{n}').st_ino}]" for n in held}
    return len(found - {host})


def kernel_kib() -> int:
    """Kernel memory the host holds now (slab, per-CPU, stacks, page tables), in KiB."""
    parts = ("Slab", "Percpu", "KernelStack", "PageTables")
    with open("/proc/meminfo") as meminfo:
        return sum(int(ln.split()[1]) for ln in meminfo if ln.split(":")[0] in parts)


@contextlib.contextmanager
def run_scope(bench: str = "footprint") -> Iterator[tuple[Ledger, RunNetwork, Path]]:
    """A run's ledger, network and work directory, as the runner makes them; all released at
    the end (a crash leaves ``hvbench cleanup`` the ledger)."""
    run_id = f"bench-{bench}-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(run_id)
    ledger.claim()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        try:
            yield ledger, RunNetwork(run_id, ledger), Path(tmp)
        finally:
            ledger.release_all()  # before the directory goes: runsc's mounts are in it


def netns_memory(count: int) -> float:
    """Bytes of kernel memory one instance's network namespace (a veth on the run's bridge)
    takes: the median over three rounds of ``count`` made through the run's network."""
    rounds = []
    for _ in range(3):
        with run_scope() as (_ledger, network, _workdir):
            network.up()
            before = kernel_kib()
            for index in range(count):
                network.add_host_netns(index)
            rounds.append((kernel_kib() - before) * 1024 / count)
    return statistics.median(rounds)


def work_seconds(inst: Instance) -> float:
    """Seconds the instance takes over ``JOBS``, each the median of 3, exec's own cost off."""

    scratch = scratch_dir(inst)

    def timed(command: str) -> float:
        runs = []
        for _ in range(3):
            t0 = time.monotonic()
            result = inst.exec(["sh", "-c", f"cd {scratch} && {command}"], timeout=900)
            runs.append(time.monotonic() - t0)
            if not result.ok:
                raise SystemExit(f"{inst.name}: {command}: {result.describe_failure()}")
        return statistics.median(runs)

    try:
        exec_s = timed("true")
        return sum(timed(command) - exec_s for command in JOBS.values())
    finally:
        remove(inst, scratch)


def overhead(inst: Instance) -> int:
    """Host memory the instance holds beyond its guest's memory (the memory workload's
    reading)."""
    used = host_memory(inst.host_pids(), inst.guest_ram)
    return used.overhead + (inst.kernel_memory() or 0)


STUDY = """\
name: footprint
platforms:
  native: {driver: native}
  qemu-virtio:
    {driver: qemu, accel: auto, vcpus: 1, memory: 1G, nic: virtio-net,
     disk: {bus: virtio-blk, cache: none, size: 1G}}
  uml: {driver: uml, memory: 1G, disk: {size: 1G}}
  container: {driver: container, vcpus: 1, memory: 1G, disk: {size: 1G}}
  gvisor: {driver: gvisor, vcpus: 1, memory: 1G, disk: {size: 1G}}
workloads:
  - {name: cpu, suite: apps}
  - {name: disk, tool: dd}
  - {name: net, tool: iperf3}
"""
"""The default study's platforms, and workloads that need what its workloads need."""


def group(driver_name: str, count: int, work: bool = False) -> dict[str, float]:
    study = parse_study(STUDY, "footprint")
    platform, settings = next((n, s) for n, s in study.platforms.items() if s.driver == driver_name)
    with run_scope() as (ledger, network, workdir):
        network.up()
        cls = DRIVERS[driver_name]
        driver: Driver = cls(platform, settings, needs_of(study), ledger, network, workdir)
        t0 = time.monotonic()
        instances = driver.start(count, time.monotonic() + 900).instances
        figures = {"start": time.monotonic() - t0}
        try:
            time.sleep(3)  # let boots' page cache and the agents' first commands settle
            figures["tasks"] = tasks(instances)
            figures["netns"] = namespaces(instances, "net", network.netns)
            figures["pidns"] = namespaces(instances, "pid", network.netns)
            figures["memory"] = statistics.fmean(overhead(i) for i in instances)
            if work:
                figures["work"] = work_seconds(instances[0])
        finally:
            t0 = time.monotonic()
            driver.stop(instances)
            figures["stop"] = time.monotonic() - t0
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--netns", type=int, default=64)
    ap.add_argument("--drivers", default="native,container,gvisor,uml,qemu")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    per_netns = netns_memory(args.netns)
    print(f"network namespace with a veth on the run's bridge: {per_netns / 1024:.0f} KiB each")
    print(
        f"{'driver':10} {'tasks':>6} {'netns':>6} {'pidns':>6} {'MiB':>7} "
        f"{'start 1':>8} {'start N':>8} {'stop 1':>7} {'work':>6} {'slowdown':>8}"
    )
    native_work = None
    for name in args.drivers.split(","):
        if not DRIVERS[name].check().ok:
            print(f"{name:10} not on this host")
            continue
        one, many = group(name, 1, work=True), group(name, args.count)
        native_work = native_work or one["work"]  # the first driver's, native's by default
        slope = {k: (many[k] - one[k]) / (args.count - 1) for k in ("tasks", "netns", "pidns")}
        own_netns = slope["netns"] >= 0.5
        memory = many["memory"] + (per_netns if own_netns else 0)
        print(
            f"{name:10} {slope['tasks']:6.1f} {slope['netns']:6.1f} {slope['pidns']:6.1f} "
            f"{memory / MIB:7.1f} {one['start']:8.2f} {many['start']:8.2f} {one['stop']:7.2f} "
            f"{one['work']:6.2f} {one['work'] / native_work:7.2f}x",
            flush=True,
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
