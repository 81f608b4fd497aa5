"""cpu, suite ``micro``: four micro-kernels with a time bound, from tools in Debian main.

The default cpu suite is ``apps`` (cpu_apps.py): real programs doing fixed work, in HEP-SPEC06's
place. These micro-kernels stay in cache and miss most of what virtualization costs real
programs, but each has a time bound, so ``duration`` means what it says on every platform, TCG
included; the composite is made of four sub-workloads of different character:

=========  ==========================================  ============================================
part       tool                                        why
=========  ==========================================  ============================================
integer    ``stress-ng --zlib``: deflate + inflate      integer and compression code with
           of generated data                            data-dependent branches, like SPEC's bzip2
float      ``stress-ng --matrix --matrix-method prod``  dense double-precision arithmetic, like
                                                        the SPECfp kernels
memory     ``sysbench memory`` with a 64 MiB buffer     memory bandwidth: a buffer per thread well
           per thread                                   beyond the caches
branchy    ``sysbench cpu`` (primes by trial division)  short loops of divisions and compares, the
                                                        branchy integer code of interpreters
=========  ==========================================  ============================================

stress-ng and sysbench are both small, in Debian main, report per-second rates for a fixed
wall-clock time, and run N workers themselves.

Like HS06, one copy runs per vCPU (``copies`` overrides), so the whole instance is busy. Each
part stores its raw rate (the sum over copies); the composite score is the geometric mean of the
sub-scores normalised to the study's baseline, which the analysis step computes from
``SUB_SCORES``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt

from hvbench.units import Size
from hvbench.workloads.base import (
    Context,
    Metric,
    Outcome,
    ParseError,
    WorkloadSettings,
)
from hvbench.workloads.common import (
    SMALL_COMMAND_S,
    ScratchWorkload,
    combined,
    keep,
    number,
    run,
    search,
)

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

QUICK_SECONDS = 2.0
"""Duration of each part under --quick: long enough for a rate, short enough for TCG guests."""
START_OVERHEAD_S = 1.0
"""Tool start-up and teardown per part, for the estimate (more in a TCG guest, but bounded)."""


class CpuPart(BaseModel):
    """Settings of one sub-workload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration: PositiveFloat = 60.0
    """Seconds the tool runs (wall clock)."""


class CpuSettings(WorkloadSettings):
    name: Literal["cpu"]
    suite: Literal["micro"] = "micro"
    copies: PositiveInt | None = None
    """Workers per part; default: one per vCPU of the instance, as HS06 runs one copy per core."""
    integer: CpuPart = CpuPart()
    float: CpuPart = CpuPart()
    memory: CpuPart = CpuPart(duration=30.0)
    branchy: CpuPart = CpuPart()
    memory_block: Size = 64 << 20
    """Buffer per sysbench memory thread; must exceed the last-level cache."""

    def label(self) -> str:
        return "cpu" if self.copies is None else f"cpu copies={self.copies}"


@dataclass(frozen=True)
class Part(ABC):
    """One sub-workload: the tool line it runs and the one rate it reads back."""

    key: str
    metric: str
    unit: str
    tool: str

    @abstractmethod
    def argv(self, copies: int, seconds: float, settings: CpuSettings, out: str) -> list[str]:
        """The command line; ``out`` is a file path in a scratch directory of the instance."""

    @abstractmethod
    def collect(self, instance: Instance, out: str, printed: str) -> str:
        """The text to parse and keep: the tool's report file, or what it printed."""

    @abstractmethod
    def parse(self, text: str) -> float:
        """The rate, summed over copies."""


@dataclass(frozen=True)
class StressNgPart(Part):
    """A stress-ng stressor; the rate is ``bogo-ops-per-second-real-time`` from its YAML report
    (all workers together)."""

    options: tuple[str, ...] = ()

    def argv(self, copies: int, seconds: float, settings: CpuSettings, out: str) -> list[str]:
        stressor = self.options[0]
        return [
            "stress-ng",
            f"--{stressor}",
            str(copies),
            *self.options[1:],
            "--timeout",
            f"{max(1, round(seconds))}s",
            "--metrics",
            "--yaml",
            out,
        ]

    def collect(self, instance: Instance, out: str, printed: str) -> str:
        return run(instance, ["cat", out], timeout=SMALL_COMMAND_S).text()

    def parse(self, text: str) -> float:
        return parse_stress_ng(text, self.options[0])


@dataclass(frozen=True)
class SysbenchPart(Part):
    """A sysbench test; the rate is read from its summary."""

    test: str = ""
    pattern: str = ""

    def argv(self, copies: int, seconds: float, settings: CpuSettings, out: str) -> list[str]:
        extra = []
        if self.test == "memory":
            # time-bounded (the total is never reached), one buffer per thread
            extra = [
                f"--memory-block-size={settings.memory_block}",
                "--memory-total-size=1000000G",
                "--memory-scope=local",
            ]
        return [
            "sysbench",
            self.test,
            f"--threads={copies}",
            f"--time={max(1, round(seconds))}",
            *extra,
            "run",
        ]

    def collect(self, instance: Instance, out: str, printed: str) -> str:
        return printed

    def parse(self, text: str) -> float:
        return parse_sysbench(text, self.test, self.pattern)


PARTS: tuple[Part, ...] = (
    StressNgPart("integer", "cpu.integer.zlib_ops_per_s", "bogo-ops/s", "stress-ng", ("zlib",)),
    StressNgPart(
        "float",
        "cpu.float.matrix_ops_per_s",
        "bogo-ops/s",
        "stress-ng",
        ("matrix", "--matrix-method", "prod"),
    ),
    SysbenchPart(
        "memory",
        "cpu.memory.write_mib_per_s",
        "MiB/s",
        "sysbench",
        "memory",
        r"MiB transferred \(([0-9.]+) MiB/sec\)",
    ),
    SysbenchPart(
        "branchy",
        "cpu.branchy.primes_events_per_s",
        "events/s",
        "sysbench",
        "cpu",
        r"events per second:\s*([0-9.]+)",
    ),
)
SUB_SCORES: tuple[str, ...] = tuple(p.metric for p in PARTS)
"""The metrics whose normalised geometric mean is the composite cpu score."""


def parse_stress_ng(text: str, stressor: str) -> float:
    """Total bogo-ops per second of wall time for ``stressor`` from stress-ng's --yaml report."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ParseError(f"stress-ng YAML report is not valid YAML: {e}") from None
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, list):
        raise ParseError("stress-ng YAML report has no metrics (was stress-ng stopped early?)")
    for entry in metrics:
        if isinstance(entry, dict) and entry.get("stressor") == stressor:
            rate = entry.get("bogo-ops-per-second-real-time")
            value = number(rate, f"stress-ng {stressor} bogo-ops-per-second-real-time")
            if value <= 0:
                raise ParseError(f"stress-ng {stressor}: no bogo ops completed")
            return value
    raise ParseError(f"stress-ng YAML report has no metrics for the {stressor} stressor")


def parse_sysbench(text: str, test: str, pattern: str) -> float:
    """The rate of a sysbench run, checking the summary is complete."""
    search(r"^General statistics:", text, f"sysbench {test} summary")
    value = number(search(pattern, text, f"sysbench {test} rate").group(1), f"sysbench {test}")
    if value <= 0:
        raise ParseError(f"sysbench {test}: rate is {value}, no events completed")
    return value


class Cpu(ScratchWorkload[CpuSettings]):
    name: ClassVar[str] = "cpu"
    tool: ClassVar[str | None] = "micro"
    selector: ClassVar[str] = "suite"
    settings_model = CpuSettings

    def tools(self) -> list[str]:
        return sorted({p.tool for p in PARTS})

    def _seconds(self, part: Part, quick: bool) -> float:
        duration: float = getattr(self.settings, part.key).duration
        return min(duration, QUICK_SECONDS) if quick else duration

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        copies = self.settings.copies or instance.vcpus
        outcome = Outcome()
        for part in PARTS:
            seconds = self._seconds(part, ctx.quick)
            out = f"{self.scratch(instance)}/{part.key}.out"
            argv = part.argv(copies, seconds, self.settings, out)
            ctx.barrier()
            result = run(instance, argv, timeout=120 + 5 * seconds)
            text = part.collect(instance, out, combined(result))
            outcome.raw.append(keep(part.tool, argv, text))
            try:
                value = part.parse(text)
            except ParseError as e:
                raise ParseError(f"cpu {part.key}: {e}") from None
            outcome.metrics.append(Metric(part.metric, value, part.unit, True, composite=True))
        return outcome

    def estimate_seconds(self, quick: bool) -> float:
        return sum(self._seconds(p, quick) + START_OVERHEAD_S for p in PARTS)

    def fixed_time_seconds(self, quick: bool) -> float:
        return sum(self._seconds(p, quick) for p in PARTS)
