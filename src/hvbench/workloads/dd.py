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
at tens of MB/s. Where even ``most`` passes faster than that (an NVMe disk writes it in well
under a second), the file is written and read ``loops`` times a sample, as pyperf loops a
benchmark too short for its clock: each pass timed on its own, the sample's rate the bytes of
all of them over their seconds, and what the data disks hold stays bounded by ``most``. The
bytes and loops chosen (``sized``, ``loops``) are stored with the run and its cells, as cpu
apps' work is: every platform, and the run when resumed, moves the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from hvbench.units import Size, format_size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError, RawOutput
from hvbench.workloads.clock import clock
from hvbench.workloads.common import combined, keep, number, run, search
from hvbench.workloads.disk import DiskSettings, DiskWorkload, free_bytes
from hvbench.workloads.sizing import AUTO_TARGET_S, loops_to_last, size_to_last

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
    loops: int = Field(default=1, ge=1)
    """Times each pass runs in a sample, its rate over all of them: ``size: auto`` sets it
    where ``most`` passes faster than ``target_seconds`` natively; a study may set it too."""
    block: Size = 1 << 20
    """dd's bs: bytes per read and write call."""

    def calibrates(self) -> bool:
        return self.size == "auto" and self.sized is None

    def label(self) -> str:
        if self.size != "auto":  # loops a study wrote make another job; calibration's do not
            return super().label() + (f" loops={self.loops}" if self.loops > 1 else "")
        if self.target_seconds == AUTO_TARGET_S:
            return super().label()
        return f"{super().label()} target={self.target_seconds:g}s"

    def sized_text(self) -> str | None:
        if self.sized is None:
            return None
        loops = f", {self.loops} loops a sample" if self.loops > 1 else ""
        return f"{format_size(self.sized)} a pass{loops}"


@dataclass(frozen=True)
class Copied:
    """What one dd pass says it moved: its bytes, its seconds, and one unit of the last digit
    of the seconds it printed (the finest change it can show)."""

    bytes: float
    seconds: float
    tick: float


def parse_dd(text: str, what: str) -> Copied:
    """dd's summary line on stderr ('N bytes ... copied, T s')."""
    m = search(_COPIED, text, f"dd {what} summary ('N bytes ... copied, T s')", re.MULTILINE)
    size = number(m.group(1), f"dd {what} bytes")
    secs = number(m.group(2), f"dd {what} seconds")
    if size <= 0 or secs <= 0:
        raise ParseError(f"dd {what}: copied {size:.0f} bytes in {secs} s; nothing to rate")
    return Copied(size, secs, _last_digit(m.group(2)))


def rate_of(passes: list[Copied]) -> tuple[float, float]:
    """MB/s (10^6 bytes per second) of passes together, their bytes over their seconds, and
    the smallest change of it their printed seconds can show."""
    size = sum(p.bytes for p in passes)
    secs = sum(p.seconds for p in passes)
    rate = size / secs / 1e6
    return rate, rate * sum(p.tick for p in passes) / secs


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

    def _loops(self, quick: bool) -> int:
        return 1 if quick else self.settings.loops

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        outcome = Outcome()
        size, loops = self._size(ctx.quick), self._loops(ctx.quick)
        for what, (raw, passes) in self._passes(instance, size, loops, ctx).items():
            outcome.raw += raw
            rate, resolution = rate_of(passes)
            outcome.metrics.append(
                Metric(
                    f"disk.dd.{what}_mbps", rate, "MB/s", True, headline=True, resolution=resolution
                )
            )
        return outcome

    def _passes(
        self, instance: Instance, size: int, loops: int, ctx: Context
    ) -> dict[str, tuple[list[RawOutput], list[Copied]]]:
        """The write pass then the read pass of ``size`` bytes, each ``loops`` times in a row:
        per direction, each pass's raw output and what it moved."""
        target = f"{self.scratch(instance)}/dd.dat"
        block = self.settings.block
        count = max(1, size // block)
        argvs = {
            "write": [DD, "if=/dev/zero", f"of={target}", f"bs={block}", f"count={count}",
                      "oflag=direct", "conv=fsync"],
            "read": [DD, f"if={target}", "of=/dev/null", f"bs={block}", "iflag=direct"],
        }  # fmt: skip
        done: dict[str, tuple[list[RawOutput], list[Copied]]] = {}
        for what, argv in argvs.items():
            ctx.barrier()
            raw, passes = done.setdefault(what, ([], []))
            timed = [str(clock()), "-", *argv]
            for _ in range(loops):
                result = run(instance, timed, timeout=self.timeout(ctx.quick))
                text = result.stderr.decode("utf-8", errors="replace")
                raw.append(keep("dd", timed, combined(result)))
                passes.append(parse_dd(text, what))
        return done

    def calibrate(self, instance: Instance, ctx: Context) -> DdSettings:
        """The bytes each pass moves, sized so that the faster pass lasts ``target_seconds``
        on ``instance`` (native), from QUICK_SIZE up, at most ``most`` and what the data disk
        holds; where that is still shorter, the passes a sample makes of it (``loops``)."""
        s = self.settings
        free = free_bytes(instance, self.scratch_parent(instance))
        most = min(s.most, (free - free // 10) // s.block * s.block)

        def faster_pass(size: int) -> float:
            passes = self._passes(instance, size, 1, ctx).values()
            return min(size / rate_of(copied)[0] / 1e6 for _, copied in passes)

        first = min(QUICK_SIZE, most)
        size, seconds = size_to_last(s.target_seconds, first, faster_pass, s.block, most)
        return s.model_copy(
            update={"sized": size, "loops": loops_to_last(s.target_seconds, seconds)}
        )

    def estimate_seconds(self, quick: bool) -> float:
        # a GiB a second each way: the default study's 1 GiB took 1.9-2.5 s natively on the
        # 2-core development host, both passes; size: auto's passes last about its target
        if self.settings.calibrates() and not quick:
            return 1 + 2 * self.settings.target_seconds
        return 1 + 2 * self._loops(quick) * self._size(quick) / (1 << 30)
