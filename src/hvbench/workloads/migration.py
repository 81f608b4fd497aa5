"""migration: live-migrate each instance to a second VMM on this host while its guest dirties
memory at a set rate, and measure what the move costs.

Inside the guest, ``hvbench-dirty`` (dirty.c, compiled on the host into the image cache and
copied into guests like any tool) writes one byte to ``dirty_rate`` worth of 4 KiB pages a
second, cycling over a ``buffer`` it touched in full first, and a ticker thread in it keeps the
largest gap between two 1 ms ticks by the guest's own clock. The window it reports opens right
before the migration starts and closes once the instance answers at its destination: the pages
it dirtied there over the guest's seconds are the dirty rate the guest achieved while being
migrated (a guest slowed down by the copy falls short of the rate set).

From the VMM (QEMU's query-migrate): total time, downtime (the guest stopped for the last copy),
setup time, data sent, and the number of passes over guest memory. ``guest_pause_ms`` is the
ticker's largest gap: the pause as the guest's clock saw it. QEMU stops the guest's clocks with
its vCPUs, so it can be shorter than the downtime it reports.

``wrong_pages`` is the dirtier's check, at the destination, that every page of its buffer holds
what it wrote there last. Under TCG, Debian 12's QEMU 7.2 loses some writes the guest makes
during a migration: with the guest writing 32 MiB/s, 14 pages of guest RAM differed between the
paused source and the paused destination after a completed migration (none with the guest
idle), and the destination's kernel often crashed on resuming (bench/migration.py, 512M guest,
64M buffer: at 32 MiB/s in 5 of 6 samples, by a panic, a double fault, or an oops that left
the guest hung until the sample's timeout, before guests panicked on an oops; at 4 MiB/s 6 of 6
completed, 1 of 3 in an earlier run). Such a sample fails, with "after the migration" or the
destination's last console lines in its error. QEMU 10.0 (Debian 12's backports,
``binary: qemu-system-x86_64-backports``) loses none: 20 of 20 samples, 10 at 4 and 10 at
32 MiB/s, completed with every page intact, the guest writing at the full rate throughout.
KVM's dirty logging is another mechanism (not measured here).
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import NonNegativeFloat

from hvbench.drivers.base import MigrationPlan, Operation
from hvbench.errors import InstanceError
from hvbench.units import Size, format_size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError, Workload, WorkloadSettings
from hvbench.workloads.common import SMALL_COMMAND_S, keep
from hvbench.workloads.helpers import static_helper

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance, Lifecycle

MIB = 1 << 20
TICK_US = 1000
OUTPUT = "/tmp/hvbench-dirty.out"
QUICK_BUFFER, QUICK_WARMUP = 32 << 20, 1.0
"""The dirtier's buffer (bytes) and warm-up (s) in a ``--quick`` run."""
_RESULT = re.compile(
    r"pages=(\d+) seconds=([\d.]+) max_gap_us=(\d+) ticks=\d+ late_ticks=\d+ wrong_pages=(\d+)"
)
OPERATION_METRICS: dict[str, tuple[str, bool, bool]] = {
    "total_s": ("s", False, True),
    "downtime_ms": ("ms", False, True),
    "setup_ms": ("ms", False, False),
    "transferred_mib": ("MiB", False, False),
    "passes": ("count", False, False),
    "throttle_pct": ("%", False, False),
}
"""Figures of the VMM's report -> (unit, higher is better, headline)."""


class MigrationSettings(WorkloadSettings):
    name: Literal["migration"]
    dirty_rate: Size = 64 << 20
    """Bytes of guest memory dirtied per second during the migration (64M: 64 MiB/s)."""
    buffer: Size = 256 << 20
    """Guest memory the dirtier holds and cycles over (``--quick``: 32M)."""
    mode: Literal["precopy", "postcopy"] = "precopy"
    """postcopy: the destination runs the guest after the first pass and fetches the rest."""
    auto_converge: bool = False
    """Let the VMM throttle the guest's vCPUs when the copy does not converge."""
    warmup: NonNegativeFloat = 3.0
    """Seconds the dirtier runs before the migration starts (``--quick``: 1 s)."""

    def label(self) -> str:
        converge = "-autoconverge" if self.auto_converge else ""
        return f"migration-{self.mode}{converge}-{format_size(self.dirty_rate)}"


class Migration(Workload[MigrationSettings]):
    name: ClassVar[str] = "migration"
    settings_model = MigrationSettings
    operation: ClassVar[Operation | None] = "migrate"

    def tools(self) -> list[str]:
        return [str(dirtier())]

    def plan(self) -> MigrationPlan:
        s = self.settings
        return MigrationPlan(postcopy=s.mode == "postcopy", auto_converge=s.auto_converge)

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        s = self.settings
        lifecycle = lifecycle_of(instance)
        buffer = QUICK_BUFFER if ctx.quick else s.buffer
        argv = [str(dirtier()), f"{s.dirty_rate / MIB:g}", str(buffer >> 20), str(TICK_US)]
        ctx.barrier()
        pid = _start(instance, argv)
        try:
            time.sleep(QUICK_WARMUP if ctx.quick else s.warmup)
            _signal(instance, "USR1", pid)
            report = lifecycle.migrate(self.plan(), time.monotonic() + self.timeout(ctx.quick))
        except BaseException:
            if instance.alive():  # the dirtier must not go on into the next cell
                with contextlib.suppress(InstanceError):
                    instance.exec(["kill", "-KILL", pid], timeout=30)
            raise
        try:  # USR2 ends the dirtier
            _signal(instance, "USR2", pid)
            line = _result(instance)
        except InstanceError as e:  # a guest the VMM broke in the move (see the docstring)
            raise InstanceError(f"{instance.name}: after the migration: {e}") from e
        return Outcome(
            operation_metrics("migration", report.figures, OPERATION_METRICS)
            + parse_dirty(line, instance.name),
            [keep("migrate", ["query-migrate"], report.raw), keep("hvbench-dirty", argv, line)],
        )

    def estimate_seconds(self, quick: bool) -> float:
        return self.fixed_time_seconds(quick) + (15 if quick else 60)

    def fixed_time_seconds(self, quick: bool) -> float:
        return QUICK_WARMUP if quick else self.settings.warmup


def lifecycle_of(instance: Instance) -> Lifecycle:
    """The instance's operations; the study refused platforms without them before the run."""
    lifecycle = instance.lifecycle()
    if lifecycle is None:
        raise InstanceError(f"{instance.name}: its platform cannot migrate or snapshot it")
    return lifecycle


def _start(instance: Instance, argv: list[str]) -> str:
    """Start the dirtier in the background (its output in a file, so no pipe holds the agent's
    command) and wait until it touched its buffer; its pid."""
    line = " ".join(argv)
    result = instance.spawn(f"{line} > {OUTPUT} 2>&1 & echo $!", timeout=SMALL_COMMAND_S)
    pid = result.text().strip()
    if not result.ok or not pid.isdigit():
        raise InstanceError(f"{instance.name}: hvbench-dirty: {result.describe_failure()}")
    deadline = time.monotonic() + 120
    while "ready" not in instance.exec(["cat", OUTPUT], timeout=30).text():
        if time.monotonic() > deadline:
            raise InstanceError(f"{instance.name}: hvbench-dirty did not start in 120 s")
        time.sleep(0.2)
    return pid


def _signal(instance: Instance, name: str, pid: str) -> None:
    result = instance.exec(["kill", f"-{name}", pid], timeout=30)
    if not result.ok:
        raise InstanceError(f"{instance.name}: hvbench-dirty is gone ({result.describe_failure()})")


def _result(instance: Instance) -> str:
    """The dirtier's line about the window, once it printed it."""
    deadline = time.monotonic() + 30
    while True:
        text = instance.exec(["cat", OUTPUT], timeout=30).text()
        if "pages=" in text or time.monotonic() > deadline:
            return text.strip().splitlines()[-1] if text.strip() else ""
        time.sleep(0.2)


def parse_dirty(line: str, who: str) -> list[Metric]:
    """The guest's side of the migration from hvbench-dirty's line about its window."""
    m = _RESULT.search(line)
    if not m or float(m[2]) <= 0:
        raise ParseError(f"{who}: hvbench-dirty printed {line[-200:]!r}")
    pages, seconds, gap_us, wrong = int(m[1]), float(m[2]), int(m[3]), int(m[4])
    return [
        Metric("migration.dirty_rate_mib_s", round(pages * 4096 / MIB / seconds, 1), "MiB/s", True),
        Metric("migration.guest_pause_ms", round(gap_us / 1000, 1), "ms", False),
        Metric("migration.wrong_pages", float(wrong), "count", False),
    ]


def operation_metrics(
    prefix: str, figures: dict[str, float], kinds: dict[str, tuple[str, bool, bool]]
) -> list[Metric]:
    """The platform's figures as metrics (rounded; its raw record keeps them exact)."""
    out = []
    for name, value in figures.items():
        unit, higher, headline = kinds[name]
        out.append(Metric(f"{prefix}.{name}", round(value, 3), unit, higher, headline=headline))
    return out


def dirtier() -> Path:
    """hvbench-dirty (dirty.c), built once into the image cache."""
    return static_helper("hvbench-dirty", "dirty.c", "-pthread")
