"""Live migration at two dirty rates and snapshot/restore of a QEMU guest under TCG.

Not a test: it prints figures. It runs a study through hvbench's own runner (a store of its own
in a temporary directory): one QEMU platform (``accel: tcg``, 512M) per ``--binary`` (default
the system's QEMU; several make one study whose repetitions interleave, the way to set two QEMU
versions side by side), named after its version (``tcg-10_0_2``), the migration workload at each
rate (pre-copy, a 64M buffer the guest dirties) and the snapshot workload, ``--repeat``
repetitions, each on freshly booted guests. Per cell: the mean (min-max) of each metric over the
repetitions that succeeded, and the failures with their error (a guest that crashed after the
move says so).

    .venv/bin/python bench/migration.py [--repeat 3] [--rates 4M,32M]
        [--binary qemu-system-x86_64 --binary qemu-system-x86_64-backports]
"""

from __future__ import annotations

import argparse
import re
import sys

from study_figures import run_and_print

from hvbench.drivers.qemu import QEMU, qemu_version
from hvbench.host.process import executable

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


def platform(binary: str) -> str:
    """The study's line for one QEMU, named after its version."""
    path = executable(binary)
    if path is None:
        sys.exit(f"bench/migration.py: --binary {binary}: not found")
    version = re.search(r"version (\S+)", qemu_version(path))
    name = f"tcg-{version[1].replace('.', '_') if version else 'qemu'}"  # names take no dots
    return f"  {name}: {{driver: qemu, accel: tcg, memory: 512M, binary: {path}}}\n"


def study(rates: list[str], repeat: int, binaries: list[str]) -> str:
    workloads = "".join(
        f"  - {{name: migration, dirty_rate: {r}, buffer: 64M, warmup: 2}}\n" for r in rates
    )
    return (
        "name: bench-migration\n"
        f"platforms:\n{''.join(platform(b) for b in binaries)}"
        f"workloads:\n{workloads}  - {{name: snapshot}}\n"
        f"repetitions: {repeat}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rates", default="4M,32M")
    parser.add_argument("--binary", action="append", help=f"a QEMU (default {QEMU}); repeatable")
    args = parser.parse_args()
    text = study(args.rates.split(","), args.repeat, args.binary or [QEMU])
    run_and_print(text, "bench/migration.py", SHOWN)


if __name__ == "__main__":
    main()
