"""Run a study in the nested Xen lab: hvbench in a dom0 booted under QEMU TCG (tests/lab.py).

For checking the xen driver by hand on a host without Xen, e.g. the PVH and HVM modes the suite
leaves out (README, "Platforms"); at two levels of emulation the figures mean nothing. The lab's
output and its results database are left in OUT; `hvbench report RUN --db sqlite:///OUT/results.db`
reports on them.

    python bench/xen_lab.py STUDY OUT [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lab as nested  # the lab lives with the tests that use it

COMMANDS = (
    nested.LIBVIRTD_XEN
    + """\
xl info | grep -E '^(virt_caps|xen_version)'
# consolidation's clients: a cgroup v2 of the run's, vegeta from the virtualenv
mount -t cgroup2 cgroup2 /sys/fs/cgroup
export PATH="$(dirname {hvbench}):$PATH"
{hvbench} run /lab/study.yaml --db sqlite:////var/tmp/hvbench/results.db
status=$?
cp /var/tmp/hvbench/results.db /lab/results.db
xl dmesg | tail -20
exit $status
"""
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    nested.build_images(args.study.read_text(), str(args.study))  # seconds here, hours in dom0
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.study, args.out / "study.yaml")
    hvbench = Path(sys.executable).parent / "hvbench"
    result = nested.run(
        nested.prepare(nested.XEN),
        args.out.resolve(),
        COMMANDS.format(hvbench=hvbench),
        args.timeout,
    )
    print(result.output)
    print(f"lab: {result.seconds:.0f} s, dom0 commands exited with {result.exit_code}")
    return 1 if result.exit_code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
