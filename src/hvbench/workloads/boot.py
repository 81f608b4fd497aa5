"""boot: boot-to-ready of the instance the cell runs in, as the wiki's "guest boot time".

The driver timestamps the boot phases while it starts the instances (``Instance.boot``: seconds
since the VMM process started until the kernel's first message, init, and ready = the control
channel answers); this workload turns them into metrics, so a study lists boot time as a cell
like any other. An instance that was never booted (``native``, the host itself) has no phases:
each metric is then stored with no value and the text "no boot", and the cell succeeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from hvbench.workloads.base import Context, Metric, Outcome, ParseError, Workload, WorkloadSettings
from hvbench.workloads.common import keep

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

PHASES = ("kernel", "init", "ready")
NO_BOOT = "no boot"


class BootSettings(WorkloadSettings):
    name: Literal["boot"]


class Boot(Workload):
    name: ClassVar[str] = "boot"
    settings_model = BootSettings

    def tools(self) -> list[str]:
        return []

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        ctx.barrier()
        phases = dict(instance.boot)
        raw = keep("boot", [], f"{instance.name} boot phases (s): {phases or NO_BOOT}")
        if not phases:
            return Outcome(
                [
                    Metric(f"boot.{p}_s", None, "s", False, NO_BOOT, headline=p == "ready")
                    for p in PHASES
                ],
                [raw],
            )
        if "ready" not in phases:
            raise ParseError(f"{instance.name}: the driver recorded no ready time ({phases})")
        return Outcome(
            [
                Metric(f"boot.{p}_s", float(phases[p]), "s", False, headline=p == "ready")
                for p in PHASES
                if p in phases
            ],
            [raw],
        )

    def estimate_seconds(self, quick: bool) -> float:
        return 0.1
