"""Live migration at two dirty rates and snapshot/restore of a QEMU guest under TCG.

Not a test: it prints figures. It runs a study through hvbench's own runner (a store of its own
in a temporary directory): one QEMU platform (``accel: tcg``, 512M), the migration workload at
each rate (pre-copy, a 64M buffer the guest dirties) and the snapshot workload, ``--repeat``
repetitions, each on freshly booted guests. Per cell: the mean (min-max) of each metric over the
repetitions that succeeded, and the failures with their error (a guest that crashed after the
move says so).

    .venv/bin/python bench/migration.py [--repeat 3] [--rates 4M,32M]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study

SHOWN = (
    "migration.total_s",
    "migration.downtime_ms",
    "migration.guest_pause_ms",
    "migration.transferred_mib",
    "migration.passes",
    "migration.dirty_rate_mib_s",
    "migration.wrong_pages",
    "snapshot.save_s",
    "snapshot.size_mib",
    "snapshot.restore_s",
)


def study(rates: list[str], repeat: int) -> str:
    workloads = "".join(
        f"  - {{name: migration, dirty_rate: {r}, buffer: 64M, warmup: 2}}\n" for r in rates
    )
    return (
        "name: bench-migration\n"
        "platforms:\n  tcg: {driver: qemu, accel: tcg, memory: 512M}\n"
        f"workloads:\n{workloads}  - {{name: snapshot}}\n"
        f"repetitions: {repeat}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rates", default="4M,32M")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'results.db'}")
        runner = Runner.create(
            parse_study(study(args.rates.split(","), args.repeat), "bench/migration.py"),
            store,
            quick=False,
            on_progress=lambda p: print(f"rep {p.repetition} {p.cell.workload}: {p.status}"
                                        + (f" ({p.error})" if p.error else ""), flush=True),
        )  # fmt: skip
        runner.run()
        cells = {c.id: c.workload for c in store.cells(runner.run_id)}
        values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in store.metric_rows(runner.run_id):
            if row.value is not None and row.name in SHOWN:
                values[cells[row.cell_id]][row.name].append(row.value)
        for cell, metrics in values.items():
            print(f"\n{cell}")
            for name in SHOWN:
                got = metrics.get(name)
                if got:
                    mean = statistics.fmean(got)
                    print(
                        f"  {name:28} {mean:10.2f}  ({min(got):.2f}-{max(got):.2f}, n={len(got)})"
                    )


if __name__ == "__main__":
    main()
