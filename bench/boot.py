"""Boot-to-agent-ready per machine type and kernel form, next to boot-to-init.

Not a test: it prints figures. For each (machine, kernel form) it boots a guest a few times under
the accelerator ``accel: auto`` picks, and reports, in seconds since the QEMU process started:
kernel (the kernel's clock started), k->init (the same plus the kernel's own time stamp of "Run
/init as init process"), init (the guest's init printed its first line) and ready (the agent
answered). The target is ready <= 1.1 x init. The ratio is taken per boot, then summarized:
its median, and its mean with that mean's 95% confidence interval (hvbench's own statistics), so
that a noisy host shows as a wide interval rather than as a figure just above or below 1.1.

The time from init to ready is split in two, medians of per-boot differences: +rc, the guest's
rc loading the agent port's drivers and finding the port (until its last line, "hvbench:
agent"), and +agent, from there until the agent's first answer (busybox init starting rc-late and
qemu-ga; qemu-ga loading its libraries, opening the port and answering). Under TCG with one vCPU
both are CPU work (the guest is idle for about 30 ms of its whole boot), much of it translating
code run for the first time: the module loader and module signature checks, the virtio drivers,
qemu-ga and its libraries (libnuma's constructor alone, about 15 ms). On microvm, QEMU's
virtio-mmio offers every queue 1024 entries deep (on PCI, the device's own 32 or 128), and
virtio_console fills its control and port receive queues with a page per entry: 2048 buffers,
8 MiB of the guest's memory, which makes its probe about 3x as long as on pc or q35.

Both sides of that ratio are read on the host's clock as the console lines arrive. k->init is
shown but not used: it adds the guest's clock to the host's, and under TCG the guest's clock
falls behind the host's while the kernel boots (microvm: by 0.5 s; the guest's /proc/uptime at
its init line is that much short of the host's time since the kernel started), which would
count kernel time as the agent's.

    .venv/bin/python bench/boot.py [--repeat 3] [--kernel amd64|cloud-amd64]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from hvbench.analysis.intervals import summarize
from hvbench.drivers.base import Needs
from hvbench.drivers.qemu import QemuDriver, QemuSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger

_RUN_INIT = re.compile(r"^\[\s*(\d+\.\d+)\] Run /init as init process", re.MULTILINE)


def boot_once(machine: str, form: str, kernel: str) -> dict[str, float]:
    run_id = f"bench-boot-{time.time_ns()}"
    ledger = Ledger(run_id)
    ledger.claim()
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            settings = QemuSettings(
                driver="qemu", machine=machine, kernel_form=form, kernel=kernel, nic="none",
                memory="256M",
            )  # fmt: skip
            net = RunNetwork(run_id, ledger)
            driver = QemuDriver("boot", settings, Needs(), ledger, net, Path(tmp))
            [inst] = driver.start(1, time.monotonic() + 300).instances
            dmesg = inst.exec(["dmesg"], 60).text()
            driver.stop([inst])
            phases = inst.boot.as_dict()
            # the end of rc, which boot_phases leaves out (only a step towards ready)
            phases["rc"] = inst.guest.console.phases["agent"]
            found = _RUN_INIT.search(dmesg)
            if found:
                phases["kernel_init"] = phases["kernel"] + float(found.group(1))
            phases["accel"] = driver.describe()["resolved"]["accel"]
            return phases
    finally:
        ledger.release_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kernel", default="amd64", choices=["amd64", "cloud-amd64"])
    parser.add_argument("--machines", default="pc,q35,microvm")
    parser.add_argument("--forms", default="vmlinux,bzimage")
    args = parser.parse_args()
    header = (
        f"{'machine':8} {'form':8} {'accel':5} {'kernel':>7} {'k->init':>8} {'init':>6} "
        f"{'+rc':>5} {'+agent':>6} {'ready':>6} {'ready/init':>11} {'mean [95% CI]':>20}"
    )
    print(f"kernel flavour {args.kernel}, median of {args.repeat} boots, seconds since QEMU start")
    print(header)
    for machine in args.machines.split(","):
        for form in args.forms.split(","):
            runs = [boot_once(machine, form, args.kernel) for _ in range(args.repeat)]

            def med(key: str, since: str | None = None, runs=runs) -> float:
                values = [r[key] - (r[since] if since else 0.0) for r in runs if key in r]
                return statistics.median(values) if values else float("nan")

            ratio = summarize([r["ready"] / r["init"] for r in runs])
            print(
                f"{machine:8} {form:8} {runs[0]['accel']:5} {med('kernel'):7.2f} "
                f"{med('kernel_init'):8.2f} {med('init'):6.2f} {med('rc', 'init'):5.2f} "
                f"{med('ready', 'rc'):6.2f} {med('ready'):6.2f} "
                f"{ratio.median:10.3f}x {ratio.mean:7.3f} "
                f"[{ratio.ci_low:.3f}, {ratio.ci_high:.3f}]",
                flush=True,
            )


if __name__ == "__main__":
    main()
