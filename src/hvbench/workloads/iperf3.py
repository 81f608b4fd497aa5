"""net with iperf3: bulk TCP throughput in each direction, from iperf3's JSON.

Per direction: the throughput the receiver counted, the sender's TCP retransmits, and the
sender's and receiver's CPU utilisation as iperf3 reports them (the instance's side and the
peer's side). iperf3 reports a failure (no server, refused, ...) as JSON with an ``error`` field
and may still exit 0: that field fails the cell.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import field_validator

from hvbench.host.network import PEER_ADDRESS
from hvbench.workloads.base import Context, Metric, Outcome, ParseError
from hvbench.workloads.common import combined, keep, number
from hvbench.workloads.net import DIRECTIONS, PeerWorkload, ThroughputSettings

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance


class Iperf3Settings(ThroughputSettings):
    tool: Literal["iperf3"] = "iperf3"

    @field_validator("seconds")
    @classmethod
    def _whole(cls, seconds: float) -> float:
        """iperf3 reads ``--time`` as a whole number: 1.5 would run 1 s, and 0.5 forever."""
        if seconds != int(seconds):
            raise ValueError("whole seconds, as iperf3 reads --time (1 or more)")
        return seconds


def parse_iperf3_json(text: str, direction: str) -> list[Metric]:
    """Metrics of one ``iperf3 -J`` client run; ``direction`` is "in" (run with -R) or "out"."""
    start = text.find("{")
    if start < 0:
        raise ParseError("iperf3 printed no JSON (was it stopped before the end?)")
    try:
        doc = json.loads(text[start:])
    except ValueError as e:
        raise ParseError(f"iperf3 JSON output is cut short or invalid: {e}") from None
    if not isinstance(doc, dict):
        raise ParseError("iperf3 JSON output is not an object")
    if doc.get("error"):
        raise ParseError(f"iperf3: {str(doc['error'])[:200]}")
    try:
        end = doc["end"]
        sent, received = end["sum_sent"], end["sum_received"]
        cpu = end["cpu_utilization_percent"]
    except (TypeError, KeyError):
        raise ParseError("iperf3 JSON has no end summary (sum_sent, sum_received, cpu)") from None
    # the client runs in the instance ("host" in iperf3's terms); with -R the peer sends
    sender, receiver = ("remote", "host") if direction == "in" else ("host", "remote")
    stem = f"net.iperf3.{DIRECTIONS[direction]}"
    bps = number(received.get("bits_per_second"), f"{stem} bits_per_second")
    if bps <= 0:
        raise ParseError(f"iperf3 {DIRECTIONS[direction]}: no data received")
    way = DIRECTIONS[direction]
    return [
        Metric(f"{stem}_gbps", bps / 1e9, "Gbit/s", True, headline=True, direction=way),
        Metric(
            f"{stem}_retransmits", number(sent.get("retransmits", 0), stem), "count", False,
            direction=way,
        ),
        Metric(
            f"{stem}_sender_cpu_pct", number(cpu.get(f"{sender}_total"), stem), "%", False,
            direction=way,
        ),
        Metric(
            f"{stem}_receiver_cpu_pct", number(cpu.get(f"{receiver}_total"), stem), "%", False,
            direction=way,
        ),
    ]  # fmt: skip


class Iperf3(PeerWorkload[Iperf3Settings]):
    tool: ClassVar[str] = "iperf3"
    base_port: ClassVar[int] = 5201
    settings_model = Iperf3Settings

    def tools(self) -> list[str]:
        return ["iperf3"]

    def server_argv(self, port: int) -> list[str]:
        # --forceflush: its log says at once when it listens for the next test
        return ["iperf3", "--server", "--bind", PEER_ADDRESS, "--port", str(port), "--forceflush"]

    def client_argv(self, port: int, direction: str, quick: bool) -> list[str]:
        s = self.settings
        argv = ["iperf3", "--client", PEER_ADDRESS, "--port", str(port), "--json",
                "--parallel", str(s.parallel), "--window", str(s.window),
                "--time", f"{self.seconds(quick):g}"]  # fmt: skip
        return [*argv, "--reverse"] if direction == "in" else argv

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        outcome = Outcome()
        for direction in self.settings.directions:
            argv = self.client_argv(self.port(instance), direction, ctx.quick)
            self._wait_for_next_test(instance)
            ctx.barrier()
            result = instance.exec(argv, timeout=self.timeout(ctx.quick))
            outcome.raw.append(keep("iperf3", argv, combined(result)))
            outcome.metrics += parse_iperf3_json(result.text(), direction)
            if not result.ok:
                raise ParseError(f"iperf3 {result.describe_failure()}")
        return outcome

    def _wait_for_next_test(self, instance: Instance) -> None:
        """Return once the server listens for a test it has not accepted yet. After each test
        iperf3's server closes its listener and opens another: a client that connects in
        between is refused (esnet/iperf pull request 2066), as the second direction of a 1 s
        native test was. The server logs one "Server listening" line per listener it opens
        (after opening it) and one "Accepted connection" line per test."""
        log = self.server_log(instance)

        def ready() -> bool:
            text = log.read_text(errors="replace")
            return text.count("Server listening on ") > text.count("Accepted connection from ")

        self.wait_for_server(instance, ready, "took no new test")

    def estimate_seconds(self, quick: bool) -> float:
        # the client's start and connection: 2 x 3 s took 6.0-6.2 s natively, 7.0-7.3 s in a
        # TCG guest (the default study on the 2-core development host)
        return len(self.settings.directions) * (self.seconds(quick) + 0.1)

    def fixed_time_seconds(self, quick: bool) -> float:
        return len(self.settings.directions) * self.seconds(quick)
