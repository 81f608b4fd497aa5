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

from study_figures import run_and_print

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
    run_and_print(study(args.rates.split(","), args.repeat), "bench/migration.py", SHOWN)


if __name__ == "__main__":
    main()
