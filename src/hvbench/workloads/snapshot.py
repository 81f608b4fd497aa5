"""snapshot: save each running instance to a file and restore it from there, as a host does
to suspend a guest to disk or to clone a warm one.

The platform does the work (``Lifecycle.snapshot``; for QEMU a migration to a file, then a
fresh QEMU with ``-incoming``): the time to save, the size of the file, and the time from the
restore's start (its VMM started) until the guest's control channel answers again. The restored
instance is the one the run goes on with; the file is removed once it runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, Literal

from hvbench.drivers.base import Operation
from hvbench.workloads.base import Context, Outcome, Workload, WorkloadSettings
from hvbench.workloads.common import keep
from hvbench.workloads.migration import lifecycle_of, operation_metrics

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

METRICS: dict[str, tuple[str, bool, bool]] = {
    "save_s": ("s", False, True),
    "size_mib": ("MiB", False, False),
    "restore_s": ("s", False, True),
    "diff_save_s": ("s", False, False),
    "diff_size_mib": ("MiB", False, False),
}
"""Figures of the platform's report -> (unit, higher is better, headline)."""


class SnapshotSettings(WorkloadSettings):
    name: Literal["snapshot"]


class Snapshot(Workload[SnapshotSettings]):
    name: ClassVar[str] = "snapshot"
    settings_model = SnapshotSettings
    operation: ClassVar[Operation | None] = "snapshot"

    def tools(self) -> list[str]:
        return []

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        lifecycle = lifecycle_of(instance)
        ctx.barrier()
        report = lifecycle.snapshot(time.monotonic() + self.timeout(ctx.quick))
        return Outcome(
            operation_metrics("snapshot", report.figures, METRICS),
            [keep("snapshot", ["query-migrate"], report.raw)],
        )

    def estimate_seconds(self, quick: bool) -> float:
        return 10.0
