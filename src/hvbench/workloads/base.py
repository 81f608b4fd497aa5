"""The contract of a workload: what to run inside an instance and how to read its output.

A workload never knows which platform it runs on: the same ``prepare`` and ``measure`` code runs
on ``native`` and inside every guest, through ``Instance.exec``. That is what makes
"% of native" compare like with like.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, PositiveInt

if TYPE_CHECKING:
    from hvbench.drivers.base import BootPhases, Instance, Kernel, MigrationPlan, Operation
    from hvbench.drivers.footprint import Pace
    from hvbench.host.network import RunNetwork


class WorkloadSettings(BaseModel):
    """Settings common to every workload; each workload extends this with its own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    instances: list[PositiveInt] | None = None
    """Instance counts for this workload (the paper ran bonnie++ with 1 and 8 guests but the CPU
    benchmark with 1 to 8); default: the platform's or the study's."""

    platforms: list[str] | None = None
    """The platforms this workload runs on (default: every platform of the study): the cpu
    programs depend on neither the NIC nor the disk model, so a study need not run them on two
    platforms that differ only in those. It must hold the baseline."""

    def runs_on(self, platform: str) -> bool:
        return self.platforms is None or platform in self.platforms

    def label(self) -> str:
        """Short, stable text that tells this workload's cells apart in tables."""
        return self.name

    def quick(self) -> WorkloadSettings:
        """The settings of a ``--quick`` run, where its shortening is more than shorter times
        (consolidation's one set); the workload's own ``quick`` flag does the rest."""
        return self

    def instance_count(self) -> int | None:
        """The instances every cell of this workload runs, where its own settings make it (a
        consolidation's sets of servers); None leaves the count to the platform and study."""
        return None

    def calibrates(self) -> bool:
        """Whether the work of its jobs is sized on this host at the start of a run
        (``Workload.calibrate``), rather than fixed by the settings."""
        return False

    def sized_text(self) -> str | None:
        """What calibration chose, in a few words for the run's messages (dd's bytes and
        loops); None where there is nothing to say."""
        return None

    def ascent(self) -> Ascent | None:
        """The instance counts this workload climbs one step at a time, where its settings ask
        for the largest count it holds (consolidation's ``sets: auto``); None: no ascent."""
        return None


@dataclass(frozen=True)
class Ascent:
    """Instance counts measured in order until one is not held: the runner stops a platform's
    ascent at the first step whose sample failed or missed (``Workload.missed``), or that the
    host's memory cannot hold (``plan.misfits_at``). The result is the last step held."""

    unit: str
    """What a step is called in the report ("sets")."""
    counts: list[int]
    """The instances at step 1, 2, ...; the last one is the ascent's upper bound."""
    climb_count: int = 1
    """How many times it is climbed, each climb one repetition of its cells: one climb, one
    15 s window a step, is one sample of a noisy quantity (``hvbench.ascent``)."""


@dataclass(frozen=True)
class ClientPace:
    """Whether a workload's clients kept their rate in a sample (``Workload.pace``): a miss
    whose client fell behind its own schedule is the harness's limit, not the platform's."""

    kept: bool
    line: str
    """In one line, with the figures ("clients on schedule: send lag p95 at most 2 ms")."""


@dataclass(frozen=True)
class TimedJob:
    """A job a workload times, with how long it lasts natively as far as its settings say
    before the run, and the resolution of the clock that times it: a run warns about a job too
    short for its clock or its start-up."""

    what: str
    native_seconds: float
    clock_s: float
    """The clock's resolution in seconds."""
    fix: str
    """What lengthens it, in the study's words."""


Direction = Literal["inbound", "outbound"]
"""Into the instance (its peer sends) or out of it."""


@dataclass(frozen=True)
class Metric:
    """One measured quantity. ``value`` is None when the tool printed no number (``text`` says
    what it printed instead, e.g. bonnie++'s "+++++" for "too fast to measure")."""

    name: str
    value: float | None
    unit: str
    higher_is_better: bool
    text: str | None = None
    headline: bool = False
    """The workload's answer (throughput of each direction, elapsed time, a boot's ready time):
    what verdicts, "% of native" tables and adaptive repetitions are judged on. Side figures
    (%CPU, retransmits, latencies beside a throughput) are kept, but only in detail tables."""
    composite: bool = False
    """A sub-score of its workload's composite score, which the analysis makes: the geometric
    mean of the sub-scores, each normalised to the baseline's (the cpu workloads')."""
    direction: Direction | None = None
    """Which way the traffic it measures flows, for the analysis to set a cell's inbound and
    outbound figures side by side (``Metric.name`` differs only in that word); None where it
    measures no traffic."""
    resolution: float | None = None
    """The smallest change of ``value`` the measurement can show, in the metric's unit (a rate's
    is rate × clock resolution / seconds; a count's, unit "count", is 1 unless said); None where
    the tool does not say. The analysis never reports an interval narrower than it."""

    def __post_init__(self) -> None:
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError(f"metric {self.name}: non-finite value {self.value}")
        if self.resolution is None and self.unit == "count":
            object.__setattr__(self, "resolution", 1.0)  # a count moves by whole units
        if self.resolution is not None and not (
            math.isfinite(self.resolution) and self.resolution > 0
        ):
            raise ValueError(f"metric {self.name}: resolution {self.resolution} is not > 0")


@dataclass
class RawOutput:
    """A tool's output as it printed it, kept for provenance (fio JSON, bonnie++ CSV, ...)."""

    tool: str
    command: list[str]
    content: str


@dataclass
class Outcome:
    """What one instance measured in one sample."""

    metrics: list[Metric] = field(default_factory=list)
    raw: list[RawOutput] = field(default_factory=list)


@dataclass(frozen=True)
class GroupStart:
    """How the cell's instances were started: all at once, by one call of the driver (what a
    boot storm measures)."""

    seconds: float
    """From starting every instance at once until all were ready (``Started.seconds``:
    the driver's preparation before, such as finding the guest image, is not in it)."""
    boots: dict[str, BootPhases | None]
    """Each instance's boot (``Instance.boot``) by instance name, in instance order."""
    failed: int = 0
    """Instances that failed to start in an attempt given up before this one (the runner tries
    a failed start once more)."""


@dataclass
class Context:
    """What a workload may use besides its instance."""

    network: RunNetwork
    quick: bool
    instance_count: int
    barrier: Callable[[], object] = lambda: None
    """Call right before the measured part; returns when every instance of the cell is there."""
    start: GroupStart | None = None
    """How the instances the cell runs in were started (the runner always says)."""


class ParseError(ValueError):
    """A tool's output could not be read; fails the cell with this message."""


W = TypeVar("W", bound=WorkloadSettings)


class Workload(ABC, Generic[W]):
    """A benchmark with parameters, from its own settings (``W``)."""

    name: ClassVar[str]
    tool: ClassVar[str | None] = None
    """The value of the ``selector`` key that picks this class; None without a choice."""
    selector: ClassVar[str] = "tool"
    """The study key that picks one of a workload's classes: ``tool`` (disk, net) or ``suite``
    (cpu)."""
    settings_model: ClassVar[type[WorkloadSettings]]
    needs_data_disk: ClassVar[bool] = False
    """True if the instance must have a separate, formatted data disk (disk workloads)."""
    needs_userland: ClassVar[bool] = False
    """True if the instance needs a full root filesystem (a compiler, make), not an initramfs."""
    operation: ClassVar[Operation | None] = None
    """The platform operation this workload asks of the instance (``Instance.lifecycle``);
    a study pairing it with a platform whose driver refuses it is refused when loaded."""

    def __init__(self, settings: W) -> None:
        self.settings = settings

    def plan(self) -> MigrationPlan | None:
        """How this workload migrates (``operation`` migrate), for the platforms to refuse what
        they cannot do before the run (``PlatformSettings.refuses_plan``); None for other
        workloads."""
        return None

    @abstractmethod
    def tools(self) -> list[str]:
        """Programs this workload needs inside the instance (guest images include them)."""

    def misfits(
        self, count: int, instance_memory: int, host_memory: int, kernel: Kernel = "guest"
    ) -> list[str]:
        """What ``count`` instances of this workload need beyond the memory they have (each
        instance's, or 0 where they run on the host itself, which has ``host_memory``) and the
        kernel they run on (``Driver.kernel``), one line each with the fix; checked before a run
        starts anything."""
        return []

    def packages(self) -> list[str]:
        """Debian packages a full root filesystem must hold for this workload (``needs_userland``
        guests get them from debootstrap; native needs them installed on the host)."""
        return []

    def calibrate(self, instance: Instance, ctx: Context) -> W:
        """The settings with the work of each job sized on ``instance`` (native, after
        ``prepare``), for a run whose settings ``calibrates``: the run stores them, so that
        every platform, and a resumed run, does the same work."""
        return self.settings

    def missed(self, outcomes: list[Outcome]) -> str | None:
        """Why a sample that ran without error did not hold its load (a role's SLO missed),
        in one line; None if it did. Ends an ascent (``WorkloadSettings.ascent``)."""
        return None

    def pace(self, outcomes: list[Outcome]) -> ClientPace | None:
        """Whether the sample's clients kept their rate; None where it has no clients to
        judge. Read where an ascent stops, to tell a harness limit from the platform's."""
        return None

    def prepare(self, instance: Instance, ctx: Context) -> None:
        """Untimed set-up inside the instance (format a disk, start a peer server)."""

    @abstractmethod
    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        """The measured part; calls ``ctx.barrier()`` right before starting the tool."""

    def cleanup(self, instance: Instance, ctx: Context) -> None:
        """Undo ``prepare``; runs even when ``measure`` failed."""

    def timed_jobs(self, quick: bool) -> list[TimedJob]:
        """The jobs whose native length the settings fix before the run (a fixed time, or work
        of a known native length); none where it is the host's to say (a disk's speed)."""
        return []

    @abstractmethod
    def estimate_seconds(self, quick: bool) -> float:
        """Expected wall time of one sample natively, for ETAs and for the command timeout."""

    def fixed_time_seconds(self, quick: bool) -> float:
        """The part of ``estimate_seconds`` that lasts as long on every platform (a tool's own
        duration: iperf3's seconds, fio's runtime, openssl speed's, a settling pause); the rest
        is fixed work, which a slower platform takes longer over (``seconds_at``). By default
        none."""
        return 0.0

    def seconds_at(self, quick: bool, pace: Pace) -> float:
        """Expected wall time of one sample on a platform going at ``pace``: the fixed time as
        natively, the fixed work slowed by the platform (a disk workload's, done on the data
        disk, by its I/O slowdown)."""
        fixed = self.fixed_time_seconds(quick)
        slowdown = pace.io_slowdown if self.needs_data_disk else pace.slowdown
        return fixed + (self.estimate_seconds(quick) - fixed) * slowdown

    def timeout(self, quick: bool) -> float:
        """Past this a sample is a hang: generous, since guests under TCG are slow."""
        return 120 + 10 * self.estimate_seconds(quick)
