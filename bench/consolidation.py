"""Host CPU for the same work: sets of real servers at a fixed mix and rate, per platform.

Not a test: it prints figures. It runs the consolidation workload (web, imap, app, db and idle
per set, each server loaded from the peer at its default rate) on native and on QEMU with the
accelerator ``accel: auto`` picks (TCG on a host without /dev/kvm), through the runner, then
prints per platform the host CPU split with the clients' CPU apart, the consolidation post's
verdict ("the same work costs ... of the host, native ...: ... more"), and each role's achieved
rate, p95 and SLO verdict.

    .venv/bin/python bench/consolidation.py [--quick] [--sets 1] [--seconds 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from hvbench.analysis.cost import HOST_STATES, host_cpu_of, same_work
from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study

STUDY = """\
name: consolidation-bench
baseline: native
platforms:
  native: {{driver: native}}
  qemu: {{driver: qemu, accel: auto, memory: 512M, nic: virtio-net}}
workloads:
  - {{name: consolidation, sets: {sets}, seconds: {seconds}}}
repetitions: 1
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s at the quick rates")
    parser.add_argument("--sets", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        study = parse_study(STUDY.format(sets=args.sets, seconds=args.seconds), "bench")
        t0 = time.monotonic()
        runner = Runner.create(study, store, quick=args.quick)
        status = runner.run()
        print(f"run {runner.run_id}: {status} in {time.monotonic() - t0:.0f} s")
        cells = {c.id: c for c in store.cells(runner.run_id)}
        samples = store.samples(runner.run_id)
        rows = store.metric_rows(runner.run_id)
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
            print(f"{cell.platform}: host busy {100 * h.busy:.1f}% ({split}); "
                  f"clients {100 * (h.clients or 0):.2f}% left out")  # fmt: skip
            got = {(r.instance, r.name): r.value for r in rows if r.cell_id == s.cell_id}
            for (index, name), value in sorted(got.items()):
                if name.endswith((".achieved_per_s", ".latency_p95_ms", ".slo_met")):
                    print(f"  instance {index} {name} {value:.4g}")
        for name, h in cpu.items():
            if name != "native" and "native" in cpu:
                print(same_work(name, h.busy, "native", cpu["native"].busy))


if __name__ == "__main__":
    main()
