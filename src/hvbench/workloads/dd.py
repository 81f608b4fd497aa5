"""disk with dd: the virtio article's quick test, a sequential write then a sequential read of
one file in 1 MiB blocks with direct I/O (``oflag=direct conv=fsync``, ``iflag=direct``), so the
page cache hides neither.

GNU dd is used on every platform (guest images carry the host's /usr/bin/dd): busybox's dd
prints no transfer time. The rate is computed from the bytes and seconds dd reports, in MB/s
(10^6 bytes) as dd prints it; its resolution is one unit of the last digit dd prints of its
seconds. hvbench-clock runs each pass, so the raw output also keeps its monotonic start and
end, its CPU time and the clock's resolution.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from hvbench.units import Size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError
from hvbench.workloads.clock import clock
from hvbench.workloads.common import combined, keep, number, run, search
from hvbench.workloads.disk import DiskSettings, DiskWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

DD = "/usr/bin/dd"
DEFAULT_SIZE = 1 << 30
QUICK_SIZE = 64 << 20
_COPIED = r"^(\d+) bytes .*copied, ([0-9.e+-]+) s"


class DdSettings(DiskSettings):
    tool: Literal["dd"] = "dd"
    block: Size = 1 << 20
    """dd's bs: bytes per read and write call."""


def parse_dd(text: str, what: str) -> tuple[float, float]:
    """MB/s (10^6 bytes per second) from dd's summary line on stderr, and the smallest change
    of it that dd's printed seconds can show."""
    m = search(_COPIED, text, f"dd {what} summary ('N bytes ... copied, T s')", re.MULTILINE)
    size = number(m.group(1), f"dd {what} bytes")
    secs = number(m.group(2), f"dd {what} seconds")
    if size <= 0 or secs <= 0:
        raise ParseError(f"dd {what}: copied {size:.0f} bytes in {secs} s; nothing to rate")
    rate = size / secs / 1e6
    return rate, rate * _last_digit(m.group(2)) / secs


def _last_digit(text: str) -> float:
    """One unit of the last digit of a printed number: "1.00265" 1e-05, "9.8e-05" 1e-06."""
    mantissa, _, exponent = text.lower().partition("e")
    return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


class Dd(DiskWorkload[DdSettings]):
    tool: ClassVar[str] = "dd"
    settings_model = DdSettings

    def tools(self) -> list[str]:
        return ["dd", str(clock())]

    def _size(self, quick: bool) -> int:
        size = self.settings.size or DEFAULT_SIZE
        return min(size, QUICK_SIZE) if quick else size

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        self.check_space(instance, self._size(ctx.quick))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        target = f"{self.scratch(instance)}/dd.dat"
        block = self.settings.block
        count = max(1, self._size(ctx.quick) // block)
        passes = {
            "write": [DD, "if=/dev/zero", f"of={target}", f"bs={block}", f"count={count}",
                      "oflag=direct", "conv=fsync"],
            "read": [DD, f"if={target}", "of=/dev/null", f"bs={block}", "iflag=direct"],
        }  # fmt: skip
        outcome = Outcome()
        for what, argv in passes.items():
            ctx.barrier()
            timed = [str(clock()), "-", *argv]
            result = run(instance, timed, timeout=self.timeout(ctx.quick))
            text = result.stderr.decode("utf-8", errors="replace")
            outcome.raw.append(keep("dd", timed, combined(result)))
            rate, resolution = parse_dd(text, what)
            outcome.metrics.append(
                Metric(
                    f"disk.dd.{what}_mbps", rate, "MB/s", True, headline=True, resolution=resolution
                )
            )
        return outcome

    def estimate_seconds(self, quick: bool) -> float:
        # a GiB a second each way: the default study's 1 GiB took 1.9-2.5 s natively on the
        # 2-core development host, both passes
        return 1 + 2 * self._size(quick) / (1 << 30)
