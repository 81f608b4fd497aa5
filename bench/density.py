"""Boot storms and memory overhead: how fast N guests come up together, and what each instance
costs the host beyond its guest's own memory, per driver (issue 14's figures).

Not a test: it prints figures. One study through hvbench's own runner (a store of its own in a
temporary directory): the boot workload at 1, 4 and 8 instances started at once (each driver
boots a cell's instances in parallel; native runs once) and the memory workload on one instance,
on a QEMU TCG microvm of 128M, User-mode Linux of 128M, a runc container and gVisor of 128M
where this host has them, and native. Per cell the mean (min-max, n) over ``--repeat``
repetitions. Memory overhead is PSS of the instance's host processes minus the guest memory they
hold, plus the kernel memory charged to a container's or a sandbox's cgroup (docs/metrics.md);
native says it cannot be attributed.

    .venv/bin/python bench/density.py [--repeat 3] [--counts 1,4,8]
"""

from __future__ import annotations

import argparse

from study_figures import run_and_print

from hvbench.drivers import DRIVERS

PLATFORMS = {
    "tcg-microvm": ("qemu", "accel: tcg, machine: microvm, memory: 128M, nic: none"),
    "uml": ("uml", "memory: 128M, nic: none"),
    "container": ("container", "memory: 128M"),
    "gvisor": ("gvisor", "memory: 128M"),
    "native": ("native", "instances: [1]"),
}
"""Name: (driver, its settings); a driver this host lacks is left out."""
SHOWN = (
    "boot.ready_s",
    "boot.storm.all_ready_s",
    "boot.storm.ready_p50_s",
    "boot.storm.ready_p99_s",
    "boot.storm.failed",
    "memory.host_pss_mib",
    "memory.guest_ram_mib",
    "memory.kernel_mib",
    "memory.overhead_mib",
    "memory.density_instances",
)


def study(counts: str, repeat: int) -> str:
    platforms = "".join(
        f"  {name}: {{driver: {driver}, {settings}}}\n"
        for name, (driver, settings) in PLATFORMS.items()
        if DRIVERS[driver].check().ok
    )
    return (
        f"name: bench-density\nplatforms:\n{platforms}"
        f"workloads:\n  - {{name: boot, instances: [{counts}]}}\n"
        "  - {name: memory, instances: [1]}\n"
        f"repetitions: {repeat}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--counts", default="1,4,8")
    args = parser.parse_args()
    run_and_print(study(args.counts, args.repeat), "bench/density.py", SHOWN)


if __name__ == "__main__":
    main()
