"""net latency: TCP request/response round trips with sockperf (Debian main; netperf is not),
the client in the instance ping-ponging a server on the peer. sockperf's ping-pong reports
percentiles of the full round trip (``--full-rtt``) in microseconds after a warm-up."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import PositiveFloat

from hvbench.host.network import PEER_ADDRESS
from hvbench.workloads.base import Context, Metric, Outcome
from hvbench.workloads.common import combined, keep, number, run, search
from hvbench.workloads.net import NetSettings, PeerWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STATS = {
    "p50": r"percentile 50\.000 =\s*([0-9.]+)",
    "p99": r"percentile 99\.000 =\s*([0-9.]+)",
    "mean": r"avg-rtt=([0-9.]+)",
}


class LatencySettings(NetSettings):
    tool: Literal["latency"] = "latency"
    seconds: PositiveFloat = 60.0


def parse_sockperf(text: str) -> list[Metric]:
    """Round-trip median, p99 and mean in microseconds from ``sockperf ping-pong``."""
    text = _ANSI.sub("", text)
    search(r"Summary: Round trip is", text, "sockperf summary ('Round trip is ...')")
    return [
        Metric(
            f"net.latency.rtt_{stat}_us",
            number(search(pattern, text, f"sockperf {stat}").group(1), f"sockperf {stat}"),
            "us",
            False,
            headline=stat == "p50",
        )
        for stat, pattern in _STATS.items()
    ]


class Latency(PeerWorkload[LatencySettings]):
    tool: ClassVar[str] = "latency"
    base_port: ClassVar[int] = 11111
    settings_model = LatencySettings

    def tools(self) -> list[str]:
        return ["sockperf"]

    def server_argv(self, port: int) -> list[str]:
        return ["sockperf", "server", "--tcp", "-i", PEER_ADDRESS, "-p", str(port)]

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        argv = ["sockperf", "ping-pong", "--tcp", "-i", PEER_ADDRESS, "-p",
                str(self.port(instance)), "-t", f"{max(1, round(self.seconds(ctx.quick)))}",
                "--full-rtt"]  # fmt: skip
        ctx.barrier()
        result = run(instance, argv, timeout=self.timeout(ctx.quick))
        text = combined(result)
        return Outcome(parse_sockperf(text), [keep("sockperf", argv, text)])

    def estimate_seconds(self, quick: bool) -> float:
        return self.seconds(quick) + 3.0

    def fixed_time_seconds(self, quick: bool) -> float:
        return self.seconds(quick)
