"""disk with bonnie++: the seeds' full table, read from bonnie++'s CSV line.

Sequential output (per-chr, block, rewrite), sequential input (per-chr, block), random seeks,
sequential and random create / read / delete, each with its %CPU and latency. bonnie++ prints
"+++++" (and "+++" for its %CPU) when a test ran too fast to measure; that is stored as text
with no value, never as a number.

The data set defaults to twice the instance's RAM, as bonnie++ requires and as the paper did
(4 GB with 2 GB RAM). ``-r`` is always half the data set, so that bonnie++ accepts a smaller
``size`` too (then the page cache is part of what is measured: the label shows the size).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import PositiveInt

from hvbench.units import Size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError
from hvbench.workloads.common import combined, keep, number, run
from hvbench.workloads.disk import DiskSettings, DiskWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

QUICK_SIZE = 64 << 20
QUICK_FILES = 1
CSV_FORMAT = "1.98"
"""bonnie++'s CSV format version (bonnie++ 1.98 and 2.0x); other layouts are refused."""
TOO_FAST = ("+++++", "+++")

# (column index in the CSV line, metric stem, unit of the rate); %CPU is the next column, and
# latencies follow in the same order from column 38 on.
_RATES: tuple[tuple[int, str, str], ...] = (
    (9, "seq_output_char", "kbps"),
    (11, "seq_output_block", "kbps"),
    (13, "seq_output_rewrite", "kbps"),
    (15, "seq_input_char", "kbps"),
    (17, "seq_input_block", "kbps"),
    (19, "random_seeks", "per_s"),
    (26, "seq_create", "per_s"),
    (28, "seq_read", "per_s"),
    (30, "seq_delete", "per_s"),
    (32, "random_create", "per_s"),
    (34, "random_read", "per_s"),
    (36, "random_delete", "per_s"),
)
_UNITS = {"kbps": "KiB/s", "per_s": "1/s"}
_LATENCY_BASE = 38
_FIELDS = _LATENCY_BASE + len(_RATES)
_LATENCY = re.compile(r"^([0-9.]+)(us|ms|s)$")
_LATENCY_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


class BonnieSettings(DiskSettings):
    tool: Literal["bonnie++"] = "bonnie++"
    size: Size | None = None
    """Bytes of the data set (bonnie++ -s); default: twice the instance's RAM, so that the page
    cache cannot hold it."""
    files: PositiveInt = 16
    """Files for the create tests, in multiples of 1024 (bonnie++ -n; the seeds used 16)."""


def _field(
    name: str, unit: str, text: str, higher_is_better: bool, headline: bool = False
) -> Metric:
    value = None if text in TOO_FAST else number(text, name)
    return Metric(
        name, value, unit, higher_is_better, text=text if value is None else None, headline=headline
    )


def parse_bonnie_csv(output: str) -> list[Metric]:
    """Metrics from the CSV line that ``bonnie++ -q`` prints on stdout."""
    lines = [ln for ln in output.splitlines() if ln.startswith(f"{CSV_FORMAT},")]
    if not lines:
        tail = " | ".join(output.strip().splitlines()[-2:])[:160]
        raise ParseError(
            f"bonnie++ printed no CSV result line (format {CSV_FORMAT}); "
            f"output ends with: {tail or '(nothing)'}"
        )
    fields = lines[-1].split(",")
    if len(fields) < _FIELDS:
        raise ParseError(f"bonnie++ CSV line has {len(fields)} fields, expected {_FIELDS}")
    metrics = []
    for i, (col, stem, kind) in enumerate(_RATES):
        rate, cpu, latency = fields[col], fields[col + 1], fields[_LATENCY_BASE + i]
        if not rate:
            continue  # a test bonnie++ was told to skip
        name = f"disk.bonnie.{stem}_{kind}"
        metrics.append(_field(name, _UNITS[kind], rate, True, headline=True))
        metrics.append(_field(f"disk.bonnie.{stem}_cpu_pct", "%", cpu, False))
        if latency:
            m = _LATENCY.match(latency)
            if not m:
                raise ParseError(f"bonnie++ {stem} latency: expected 123us/ms, found {latency!r}")
            us = float(m.group(1)) * _LATENCY_US[m.group(2)]
            metrics.append(Metric(f"disk.bonnie.{stem}_latency_us", us, "us", False))
    return metrics


class Bonnie(DiskWorkload[BonnieSettings]):
    tool: ClassVar[str] = "bonnie++"
    settings_model = BonnieSettings

    def tools(self) -> list[str]:
        return ["bonnie++"]

    def _size(self, instance: Instance | None, quick: bool) -> int:
        size = self.settings.size or (2 * instance.memory_mib << 20 if instance else 4 << 30)
        return min(size, QUICK_SIZE) if quick else size

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        self.check_space(instance, self._size(instance, ctx.quick))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        size_mib = max(2, self._size(instance, ctx.quick) >> 20)
        files = QUICK_FILES if ctx.quick else self.settings.files
        argv = [
            "bonnie++",
            "-q",  # the CSV line on stdout, the human table on stderr
            "-u",
            "0:0",  # numeric: a guest may have no /etc/passwd
            "-d",
            self.scratch(instance),
            "-s",
            str(size_mib),
            "-r",
            str(size_mib // 2),
            "-n",
            str(files),
            "-m",
            instance.name,
        ]
        ctx.barrier()
        result = run(instance, argv, timeout=self.timeout(ctx.quick, instance))
        text = combined(result)
        return Outcome(parse_bonnie_csv(result.text()), [keep("bonnie++", argv, text)])

    def estimate_seconds(self, quick: bool, instance: Instance | None = None) -> float:
        # five passes over the data set at ~100 MiB/s, plus the file tests
        size = self._size(instance, quick)
        files = QUICK_FILES if quick else self.settings.files
        return 5 + 5 * size / (100 << 20) + 2 * files

    def timeout(self, quick: bool, instance: Instance | None = None) -> float:
        return 300 + 20 * self.estimate_seconds(quick, instance)
