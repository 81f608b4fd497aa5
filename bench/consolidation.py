"""Host CPU for the same work: sets of real servers at a fixed mix and rate, per platform.

Not a test: it prints figures. It runs the consolidation workload (web, imap, app, db and idle
per set, each server loaded from the peer at its default rate) on native and on every platform
with a network this host runs (QEMU with the accelerator ``accel: auto`` picks, TCG on a host
without /dev/kvm; libvirt where a libvirtd answers; User-mode Linux; runc; gVisor), through the
runner, then prints per platform the host CPU split with the clients' CPU apart, the
consolidation post's verdict ("the same work costs ... of the host, native ...: ... more"), and
each role's achieved rate, p95 and SLO verdict. ``--density N`` runs ``sets: auto`` up to N sets
instead, climbed ``--ascents`` times, and prints per platform the spread of the sets held at SLO,
the host CPU there and the cause of every stop. The host's CPU is read host-wide, as the post
did, so the bench first reads it for ``--background`` seconds with nothing of its own running
and prints that share: near 0 on a quiet host; on a shared one, what every figure below
includes; the load average is printed before and after.

    .venv/bin/python bench/consolidation.py [--quick] [--sets 1 | --density 8] [--seconds 60]
        [--platforms native,qemu,libvirt,uml,container,gvisor]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import psutil

from hvbench.analysis.cost import HOST_STATES, host_cpu_of, same_work, work_shortfall
from hvbench.analysis.run_analysis import analyse
from hvbench.analysis.verdict import ascent_lines
from hvbench.drivers import DRIVERS
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study

STUDY = """\
name: consolidation-bench
baseline: native
platforms:
{platforms}
workloads:
  - {{name: consolidation, {sets}, seconds: {seconds}}}
repetitions: 1
"""
PLATFORMS = {
    "native": "{driver: native}",
    "qemu": "{driver: qemu, accel: auto, memory: 512M, nic: virtio-net}",
    "libvirt": "{driver: libvirt, accel: auto, memory: 512M}",
    "uml": "{driver: uml, memory: 512M, nic: vector, gro: true}",
    "container": "{driver: container}",
    "gvisor": "{driver: gvisor}",
}
"""Name: its settings (the driver is the name); the servers need 512M in a guest."""


def background(seconds: float) -> float:
    """The host's busy share (0-1 of all cores) over ``seconds`` of this bench doing nothing."""
    before = psutil.cpu_times()
    time.sleep(seconds)
    after = psutil.cpu_times()
    spent = {f: getattr(after, f) - getattr(before, f) for f in after._fields}
    idle = spent["idle"] + spent.get("iowait", 0.0)
    return 1 - idle / sum(v for f, v in spent.items() if f not in ("guest", "guest_nice"))


def _load() -> str:
    """The host's load average over 1, 5 and 15 minutes, as uptime prints it."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s at the quick rates")
    parser.add_argument("--sets", type=int, default=1)
    parser.add_argument("--density", type=int, metavar="MAX_SETS", help="sets: auto up to this")
    parser.add_argument("--ascents", type=int, default=3, help="climbs of --density (3)")
    parser.add_argument("--db", help="a store to keep the run in (default: a temporary one)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--background", type=float, default=15, help="seconds of the idle read")
    parser.add_argument(
        "--platforms",
        default=",".join(p for p in PLATFORMS if DRIVERS[p].check().ok),
        help=f"of: {', '.join(PLATFORMS)} (default: those this host runs)",
    )
    args = parser.parse_args()
    sets = f"sets: {args.sets}"
    if args.density:
        sets = f"sets: auto, max_sets: {args.density}, ascents: {args.ascents}"
    platforms = "\n".join(f"  {p}: {PLATFORMS[p]}" for p in args.platforms.split(","))
    text = STUDY.format(platforms=platforms, sets=sets, seconds=args.seconds)
    idle_busy = background(args.background)
    print(f"host busy with nothing of this bench running: {100 * idle_busy:.1f}%", flush=True)
    print(f"load average before: {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(args.db or f"sqlite:///{tmp}/bench.db")
        study = parse_study(text, "bench")
        t0 = time.monotonic()
        session = RunSession.preflight(store, NewRun(study, quick=args.quick))
        status = session.run().status
        print(f"run {session.run_id}: {status} in {time.monotonic() - t0:.0f} s")
        print(f"load average after: {_load()}")
        cells = {c.id: c for c in store.cells(session.run_id)}
        samples = store.samples(session.run_id)
        rows = store.metric_rows(session.run_id)
        cpu = {}
        for s in samples:
            cell = cells[s.cell_id]
            if s.status != "ok":
                print(f"{cell.platform}: failed: {s.error}")
                continue
            h = host_cpu_of([(s.repetition, s.host_cpu)])
            assert h is not None
            cpu[cell.platform] = h
            split = " ".join(f"{st} {100 * h.states.get(st, 0):.1f}" for st in HOST_STATES)
            print(f"{cell.platform} ({cell.instances} inst., rep. {s.repetition}): host busy "
                  f"{100 * h.busy:.1f}% "
                  f"({split}); clients {100 * (h.clients or 0):.2f}% left out")  # fmt: skip
            got = {(r.instance, r.name): r.value for r in rows if r.cell_id == s.cell_id}
            for (index, name), value in sorted(got.items()):
                if name.endswith((".achieved_per_s", ".latency_p95_ms", ".slo_met", "_lag_p95_ms")):
                    print(f"  instance {index} {name} {value:.4g}")
        analysis = analyse(store, session.run_id)
        ids = {c.platform: c.id for c in cells.values()}
        for name, h in cpu.items():
            if name != "native" and "native" in cpu and not args.density:
                short = work_shortfall(analysis.results, ids[name], ids["native"])
                print(same_work(name, h.busy, "native", cpu["native"].busy, short))
        for line in ascent_lines(analysis):
            print(line)


if __name__ == "__main__":
    main()
