"""disk with dbench: N clients replaying a file-server load (dbench's client.txt) for a fixed
time, best of K runs, in MB/s, as the wiki did ("the best of 2 runs for dbench 10")."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import PositiveInt

from hvbench.errors import InstanceError
from hvbench.workloads.base import Context, Metric, Outcome, ParseError
from hvbench.workloads.common import SMALL_COMMAND_S, combined, keep, number, run, search
from hvbench.workloads.disk import DiskSettings, DiskWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

LOADFILE = "/usr/share/dbench/client.txt"
"""dbench's own load file, from the dbench package (guest images must carry it)."""
QUICK_SECONDS = 3
QUICK_RUNS = 1
_THROUGHPUT = r"^Throughput ([0-9.]+) MB/sec\s+(\d+) clients.*max_latency=([0-9.]+) ms"


class DbenchSettings(DiskSettings):
    tool: Literal["dbench"] = "dbench"
    clients: PositiveInt = 10
    runs: PositiveInt = 2
    """Runs per sample; the best is kept, as the wiki kept the best of 2."""
    seconds: PositiveInt = 60
    """dbench -t: seconds each run replays the load."""

    def label(self) -> str:
        return f"{super().label()} clients={self.clients}"


def parse_dbench(text: str, clients: int) -> tuple[float, float]:
    """(MB/s, max latency in ms) from dbench's final line."""
    m = search(_THROUGHPUT, text, "dbench 'Throughput ... MB/sec' line")
    if int(m.group(2)) != clients:
        raise ParseError(f"dbench ran {m.group(2)} clients, expected {clients}")
    return number(m.group(1), "dbench throughput"), number(m.group(3), "dbench max_latency")


class Dbench(DiskWorkload[DbenchSettings]):
    tool: ClassVar[str] = "dbench"
    settings_model = DbenchSettings

    def tools(self) -> list[str]:
        return ["dbench"]

    def _plan(self, quick: bool) -> tuple[int, int]:
        s = self.settings
        return (QUICK_SECONDS, QUICK_RUNS) if quick else (s.seconds, s.runs)

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        if not instance.exec(["test", "-f", LOADFILE], timeout=SMALL_COMMAND_S).ok:
            raise InstanceError(f"{instance.name}: dbench's load file {LOADFILE} is missing")

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        seconds, runs = self._plan(ctx.quick)
        clients = self.settings.clients
        argv = ["dbench", "-c", LOADFILE, "-t", str(seconds), "-D", self.scratch(instance),
                str(clients)]  # fmt: skip
        outcome = Outcome()
        got: list[tuple[float, float]] = []
        for _ in range(runs):
            ctx.barrier()
            result = run(instance, argv, timeout=self.timeout(ctx.quick))
            outcome.raw.append(keep("dbench", argv, combined(result)))
            got.append(parse_dbench(result.text(), clients))
        best = max(got, key=lambda throughput_latency: throughput_latency[0])  # the first best
        outcome.metrics += [
            Metric("disk.dbench.throughput_mbps", best[0], "MB/s", True, headline=True),
            Metric("disk.dbench.max_latency_ms", best[1], "ms", False),
        ]
        return outcome

    def estimate_seconds(self, quick: bool) -> float:
        seconds, runs = self._plan(quick)
        return runs * (seconds + 3)

    def fixed_time_seconds(self, quick: bool) -> float:
        seconds, runs = self._plan(quick)
        return runs * seconds
