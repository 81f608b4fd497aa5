"""net with iperf (version 2), the tool the paper used: bulk TCP throughput in each direction,
from iperf's CSV report (``-y C``); iperf 2 reports no CPU use or retransmits there."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from hvbench.host.network import PEER_ADDRESS
from hvbench.workloads.base import Context, Metric, Outcome, ParseError
from hvbench.workloads.common import combined, keep, number, run
from hvbench.workloads.net import DIRECTIONS, PeerWorkload, ThroughputSettings

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

_FIELDS = 9
"""timestamp, source, source port, destination, destination port, stream id, interval, bytes,
bits per second."""


class IperfSettings(ThroughputSettings):
    tool: Literal["iperf"] = "iperf"


def parse_iperf_csv(text: str, direction: str, streams: int) -> Metric:
    """Throughput of one ``iperf -y C`` client run: the sum line (stream id -1) when iperf
    prints one, else the sum over the streams' lines."""
    rows = [ln.split(",") for ln in text.splitlines() if ln.count(",") == _FIELDS - 1]
    if not rows:
        tail = " | ".join(text.strip().splitlines()[-2:])[:160]
        raise ParseError(f"iperf printed no CSV report; output ends with: {tail or '(nothing)'}")
    total = [r for r in rows if r[5] == "-1"]
    if total:
        bps = number(total[-1][8], "iperf sum bits_per_second")
    else:
        if len(rows) != streams:
            raise ParseError(f"iperf reported {len(rows)} streams, expected {streams}")
        bps = sum(number(r[8], "iperf bits_per_second") for r in rows)
    if bps <= 0:
        raise ParseError(f"iperf {DIRECTIONS[direction]}: no data transferred")
    way = DIRECTIONS[direction]
    return Metric(f"net.iperf.{way}_gbps", bps / 1e9, "Gbit/s", True, headline=True, direction=way)


class Iperf(PeerWorkload[IperfSettings]):
    tool: ClassVar[str] = "iperf"
    base_port: ClassVar[int] = 5001
    settings_model = IperfSettings

    def tools(self) -> list[str]:
        return ["iperf"]

    def server_argv(self, port: int) -> list[str]:
        return ["iperf", "--server", "--bind", PEER_ADDRESS, "--port", str(port)]

    def client_argv(self, port: int, direction: str, quick: bool) -> list[str]:
        s = self.settings
        argv = ["iperf", "--client", PEER_ADDRESS, "--port", str(port), "--reportstyle", "C",
                "--parallel", str(s.parallel), "--window", str(s.window),
                "--time", f"{self.seconds(quick):g}"]  # fmt: skip
        return [*argv, "--reverse"] if direction == "in" else argv

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        outcome = Outcome()
        for direction in self.settings.directions:
            argv = self.client_argv(self.port(instance), direction, ctx.quick)
            ctx.barrier()
            result = run(instance, argv, timeout=self.timeout(ctx.quick))
            outcome.raw.append(keep("iperf", argv, combined(result)))
            outcome.metrics.append(
                parse_iperf_csv(result.text(), direction, self.settings.parallel)
            )
        return outcome

    def estimate_seconds(self, quick: bool) -> float:
        return len(self.settings.directions) * (self.seconds(quick) + 1.5)

    def fixed_time_seconds(self, quick: bool) -> float:
        return len(self.settings.directions) * self.seconds(quick)
