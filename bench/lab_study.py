"""Run a study in a nested lab (tests/lab.py): hvbench in Xen's dom0, or in an L1 with KVM
(nested SVM), booted under QEMU TCG.

For checking by hand what the suite leaves out on a host without Xen or with a KVM that runs no
stock guest: Xen's PVH and HVM modes (docs/guide/platforms.md), or a whole study of the KVM drivers
such as examples/microvm.yaml (QEMU microvm, Firecracker, Cloud Hypervisor: their binaries on
PATH or named by the study's binary:). At two levels of emulation the figures mean nothing. The
lab's output and its results database are left in OUT; `hvbench report RUN --db
sqlite:///OUT/results.db` reports on them.

    python bench/lab_study.py STUDY OUT [--lab xen|kvm] [--timeout SECONDS] [--quick]
        [--memory MIB] [--scratch GIB]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lab as nested  # the lab lives with the tests that use it

RUN = (
    nested.CONSOLIDATION_PEER
    + """\
{hvbench} run /lab/study.yaml {quick}--db sqlite:////var/tmp/hvbench/results.db
status=$?
cp /var/tmp/hvbench/results.db /lab/results.db
"""
)
LABS = {
    "xen": (
        nested.XEN,
        nested.LIBVIRTD_XEN
        + "xl info | grep -E '^(virt_caps|xen_version)'\n"
        + RUN
        + "xl dmesg | tail -20\nexit $status\n",
    ),
    "kvm": (nested.KVM, nested.LIBVIRTD_KVM + RUN + "exit $status\n"),
}
"""Per lab: what it boots, and the commands L1 runs (its toolstack or libvirtd, then the run)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--lab", choices=sorted(LABS), default="xen")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--quick", action="store_true", help="hvbench run --quick")
    parser.add_argument("--memory", type=int, help="L1's memory (MiB)")
    parser.add_argument(
        "--scratch", type=int, default=4, help="L1's disk for the runs (GiB, sparse here)"
    )
    parser.add_argument("--cpus", type=int, default=2, help="L1's vCPUs (alone here: two)")
    args = parser.parse_args()
    nested.build_images(args.study.read_text(), str(args.study))  # seconds here, hours in dom0
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.study, args.out / "study.yaml")
    hvbench = Path(sys.executable).parent / "hvbench"
    hypervisor, commands = LABS[args.lab]
    result = nested.run(
        nested.prepare(hypervisor),
        args.out.resolve(),
        commands.format(hvbench=hvbench, quick="--quick " if args.quick else ""),
        args.timeout,
        memory_mib=args.memory or (4096 if hypervisor is nested.KVM else 2560),
        scratch_size=args.scratch << 30,
        cpus=args.cpus,
    )
    print(result.output)
    print(f"lab: {result.seconds:.0f} s, L1's commands exited with {result.exit_code}")
    return 1 if result.exit_code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
