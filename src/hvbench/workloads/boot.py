"""boot: boot-to-ready of the instance the cell runs in, as the wiki's "guest boot time", and
the boot storm of the cell's instances started together.

The driver timestamps the boot phases while it starts the instances (``Instance.boot``: seconds
since the VMM process started until the kernel's first message, init, and ready = the control
channel answers); this workload turns them into metrics, so a study lists boot time as a cell
like any other. An instance that was never booted (``native``, the host itself) has no phases:
each metric is then stored with no value and the text "no boot", and the cell succeeds.

The **storm** figures describe the cell's N instances, which the runner starts at once (the
driver boots them in parallel): the wall time until all are ready, the median and 99th
percentile of the individual ready times (interpolated: with few instances p99 lies between the
two slowest, so the analysis leaves out a percentile that too few instances stand behind:
``analysis.aggregate.percentile_shortfall``), and how many instances failed. They are per
cell, so only the cell's first instance stores them. A start in which any instance fails is
stopped and tried once more: the failures of that attempt are ``boot.storm.failed`` of the
measured one; if the second attempt fails too, the sample fails with an error saying how many
of the N failed (never a silent gap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from hvbench.workloads.base import Context, Metric, Outcome, Workload, WorkloadSettings
from hvbench.workloads.common import keep

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

PHASES = ("kernel", "init", "ready")
VMM_PHASES = ("api", "start_to_init")
"""Phases of the microVM VMMs' own, where the driver records them: the VMM's API answering, and
from the API call that starts the guest to the guest's init (Firecracker's boot time)."""
MS = 0.001
"""Every boot figure is rounded to the millisecond (``BootPhases``): its resolution, so that
identical repetitions read as within a millisecond, not as of unknown resolution."""
STORM = ("all_ready_s", "ready_p50_s", "ready_p99_s", "failed")
NO_BOOT = "no boot"


class BootSettings(WorkloadSettings):
    name: Literal["boot"]


class Boot(Workload[BootSettings]):
    name: ClassVar[str] = "boot"
    settings_model = BootSettings

    def tools(self) -> list[str]:
        return []

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        ctx.barrier()
        phases = instance.boot.as_dict() if instance.boot else {}
        raw = keep("boot", [], f"{instance.name} boot phases (s): {phases or NO_BOOT}")
        storm = self._storm(instance, ctx)
        if not phases:
            return Outcome(
                [
                    Metric(f"boot.{p}_s", None, "s", False, NO_BOOT, headline=p == "ready")
                    for p in PHASES
                ]
                + storm,
                [raw],
            )
        return Outcome(
            [
                Metric(
                    f"boot.{p}_s",
                    float(phases[p]),
                    "s",
                    False,
                    headline=p == "ready",
                    resolution=MS,
                )
                for p in (*PHASES, *VMM_PHASES)
                if p in phases
            ]
            + storm,
            [raw],
        )

    @staticmethod
    def _storm(instance: Instance, ctx: Context) -> list[Metric]:
        """The cell's storm figures, on its first instance only (none for the others)."""
        start = ctx.start
        if start is None or next(iter(start.boots), None) != instance.name:
            return []
        ready = [b.ready for b in start.boots.values() if b is not None]
        if not ready:
            return [
                Metric(f"boot.storm.{n}", None, "count" if n == "failed" else "s", False, NO_BOOT)
                for n in STORM
            ]
        seconds = {
            "all_ready_s": start.seconds,
            "ready_p50_s": float(np.percentile(ready, 50)),
            "ready_p99_s": float(np.percentile(ready, 99)),
        }
        return [
            *(
                Metric(f"boot.storm.{n}", round(v, 3), "s", False, resolution=MS)
                for n, v in seconds.items()
            ),
            Metric("boot.storm.failed", float(start.failed), "count", False),
        ]

    def estimate_seconds(self, quick: bool) -> float:
        return 0.1
