"""disk with dd: the virtio article's quick test, a sequential write then a sequential read of
one file in 1 MiB blocks with direct I/O (``oflag=direct conv=fsync``, ``iflag=direct``), so the
page cache hides neither.

GNU dd is used on every platform (guest images carry the host's /usr/bin/dd): busybox's dd
prints no transfer time. The rate is computed from the bytes and seconds dd reports, in MB/s
(10^6 bytes) as dd prints it; its resolution is one unit of the last digit dd prints of its
seconds. hvbench-clock runs each pass, so the raw output also keeps its monotonic start and
end, its CPU time and the clock's resolution.

How much: 1 GiB each pass by default. ``size: auto`` sizes it at the start of a run, natively on
the host, so that the faster pass lasts ``target_seconds`` (1.5 s) there (``sizing``), at most
``most``: a fixed size is too short on a fast disk and a waste under emulation, where a pass runs
at tens of MB/s. The bytes chosen (``sized``) are stored with the run and its cells, as cpu apps'
work is: every platform, and the run when resumed, moves the same bytes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from hvbench.units import Size, format_size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError, RawOutput
from hvbench.workloads.clock import clock
from hvbench.workloads.common import combined, keep, number, run, search
from hvbench.workloads.disk import DiskSettings, DiskWorkload, free_bytes
from hvbench.workloads.sizing import AUTO_TARGET_S, MIN_JOB_S, size_to_last

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

DD = "/usr/bin/dd"
DEFAULT_SIZE = 1 << 30
QUICK_SIZE = 64 << 20
_COPIED = r"^(\d+) bytes .*copied, ([0-9.e+-]+) s"


class DdSettings(DiskSettings):
    tool: Literal["dd"] = "dd"
    size: Size | Literal["auto"] | None = None
    """Bytes each pass moves (default 1G); ``auto``: sized at the start of the run so that the
    faster pass lasts ``target_seconds`` natively on this host (``sized``)."""
    target_seconds: float = Field(default=AUTO_TARGET_S, ge=1.0)
    """With ``size: auto``: how long the faster pass lasts natively."""
    most: Size = 2 << 30
    """With ``size: auto``: the most it chooses. Every platform's data disk must hold it."""
    sized: Size | None = None
    """What ``size: auto`` chose for a run, stored with its cells."""
    block: Size = 1 << 20
    """dd's bs: bytes per read and write call."""

    def calibrates(self) -> bool:
        return self.size == "auto" and self.sized is None

    def label(self) -> str:
        if self.size != "auto" or self.target_seconds == AUTO_TARGET_S:
            return super().label()
        return f"{super().label()} target={self.target_seconds:g}s"


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
        s = self.settings
        if s.size == "auto":
            if quick:
                return QUICK_SIZE
            if s.sized is None:
                raise ValueError("disk dd: size: auto was not sized")
            return s.sized
        size = s.size or DEFAULT_SIZE
        return min(size, QUICK_SIZE) if quick else size

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        if not self.settings.calibrates():
            self.check_space(instance, self._size(ctx.quick))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        outcome = Outcome()
        for what, text, rate, resolution in self._passes(instance, self._size(ctx.quick), ctx):
            outcome.raw.append(text)
            outcome.metrics.append(
                Metric(
                    f"disk.dd.{what}_mbps", rate, "MB/s", True, headline=True, resolution=resolution
                )
            )
        return outcome

    def _passes(
        self, instance: Instance, size: int, ctx: Context
    ) -> list[tuple[str, RawOutput, float, float]]:
        """The write pass then the read pass of ``size`` bytes: each one's raw output, MB/s
        and its resolution."""
        target = f"{self.scratch(instance)}/dd.dat"
        block = self.settings.block
        count = max(1, size // block)
        passes = {
            "write": [DD, "if=/dev/zero", f"of={target}", f"bs={block}", f"count={count}",
                      "oflag=direct", "conv=fsync"],
            "read": [DD, f"if={target}", "of=/dev/null", f"bs={block}", "iflag=direct"],
        }  # fmt: skip
        done = []
        for what, argv in passes.items():
            ctx.barrier()
            timed = [str(clock()), "-", *argv]
            result = run(instance, timed, timeout=self.timeout(ctx.quick))
            text = result.stderr.decode("utf-8", errors="replace")
            done.append((what, keep("dd", timed, combined(result)), *parse_dd(text, what)))
        return done

    def calibrate(self, instance: Instance, ctx: Context) -> DdSettings:
        """The bytes each pass moves, sized so that the faster pass lasts ``target_seconds``
        on ``instance`` (native), from QUICK_SIZE up, at most ``most`` and what the data disk
        holds; refused where that lasts under a second."""
        s = self.settings
        free = free_bytes(instance, self.scratch_parent(instance))
        most = min(s.most, (free - free // 10) // s.block * s.block)

        def faster_pass(size: int) -> float:
            return min(size / rate / 1e6 for _, _, rate, _ in self._passes(instance, size, ctx))

        first = min(QUICK_SIZE, most)
        size, seconds = size_to_last(s.target_seconds, first, faster_pass, s.block, most)
        if seconds < MIN_JOB_S:
            raise ValueError(
                f"disk dd: {format_size(size)}, the most size: auto may move here, lasts "
                f"{seconds:.2f} s natively, under the {MIN_JOB_S:g} s a pass needs; raise most "
                "(every platform's data disk must hold it) or set size"
            )
        return s.model_copy(update={"sized": size})

    def estimate_seconds(self, quick: bool) -> float:
        # a GiB a second each way: the default study's 1 GiB took 1.9-2.5 s natively on the
        # 2-core development host, both passes; size: auto's passes last about its target
        if self.settings.calibrates() and not quick:
            return 1 + 2 * self.settings.target_seconds
        return 1 + 2 * self._size(quick) / (1 << 30)
