"""What every net workload shares: the peer's server and the ``{name: net}`` settings.

The peer sits in the run's network namespace at PEER_ADDRESS, behind the same bridge on every
platform. Each instance gets a server of its own on the peer (port = the tool's base port + the
instance's index), started in ``prepare`` and stopped in ``cleanup``; the client always runs
inside the instance. "outbound" is instance -> peer, "inbound" is peer -> instance: for inbound
the client asks the peer to send (``-R``), so no server ever runs inside an instance (a guest's
control channel runs commands to completion, it does not keep daemons) and both directions
cross the same NIC, with the same TCP connection set-up, on every platform.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from pydantic import Field, PositiveFloat, PositiveInt

from hvbench.errors import InstanceError
from hvbench.units import Size, format_size
from hvbench.workloads.base import Context, Direction, TimedJob, Workload, WorkloadSettings

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance
    from hvbench.host.resources import Resource

TOOLS = ("iperf3", "iperf", "latency")
"""The ``tool:`` choices of ``{name: net}``; iperf3 is the default."""
DIRECTIONS: dict[str, Direction] = {"out": "outbound", "in": "inbound"}
QUICK_SECONDS = 3.0
SERVER_READY_S = 15.0


class NetSettings(WorkloadSettings):
    name: Literal["net"]
    seconds: PositiveFloat = 900.0
    """Seconds each measurement runs (the paper: 900)."""

    def label(self) -> str:
        return f"net {getattr(self, 'tool', '')}"


class ThroughputSettings(NetSettings):
    """Bulk TCP throughput, as the paper ran iperf: ``-w256k -P 5 -t 900``, in and out."""

    directions: list[Literal["in", "out"]] = Field(default=["in", "out"], min_length=1)
    parallel: PositiveInt = 5
    """Parallel TCP streams (-P)."""
    window: Size = 256 << 10
    """Socket buffer / TCP window (-w)."""

    def label(self) -> str:
        return f"{super().label()} -P{self.parallel} -w{format_size(self.window)}"


N = TypeVar("N", bound=NetSettings)


class PeerWorkload(Workload[N]):
    """A client inside the instance against a server of its own on the peer."""

    name: ClassVar[str] = "net"
    base_port: ClassVar[int]

    def __init__(self, settings: N) -> None:
        super().__init__(settings)
        self._servers: dict[str, tuple[subprocess.Popen, Resource]] = {}
        """Per instance name: the peer server and its log directory."""

    @abstractmethod
    def server_argv(self, port: int) -> list[str]:
        """The server command on the peer, listening on PEER_ADDRESS:port."""

    def port(self, instance: Instance) -> int:
        return self.base_port + instance.index

    def seconds(self, quick: bool) -> float:
        return min(self.settings.seconds, QUICK_SECONDS) if quick else self.settings.seconds

    def timed_jobs(self, quick: bool) -> list[TimedJob]:
        """Fixed time, timed by the tool's own clock (microseconds)."""
        return [TimedJob(f"{self.tool} run", self.seconds(quick), 1e-6, "raise seconds")]

    def prepare(self, instance: Instance, ctx: Context) -> None:
        network = ctx.network
        port = self.port(instance)
        logdir = Path(tempfile.gettempdir()) / f"hvbench-peer-{network.run_id}-{self.tool}-{port}"
        res = network.ledger.add("path", str(logdir))
        logdir.mkdir(exist_ok=True)
        log = logdir / "server.log"
        proc = network.peer_start(self.server_argv(port), log)
        self._servers[instance.name] = (proc, res)

        def listening() -> bool:
            ss = network.peer_run(["ss", "-Htln", f"sport = :{port}"], timeout=10)
            return bool(ss.stdout.strip())

        self.wait_for_server(instance, listening, "not listening")

    def server_log(self, instance: Instance) -> Path:
        """Where the instance's peer server writes (``prepare`` started it)."""
        return Path(self._servers[instance.name][1].name) / "server.log"

    def wait_for_server(self, instance: Instance, ready: Callable[[], bool], never: str) -> None:
        """Return once ``ready()``, asked every 0.1 s; an InstanceError with the server's last
        logged line as soon as the server has exited, or saying ``never`` after
        SERVER_READY_S."""
        proc, log = self._servers[instance.name][0], self.server_log(instance)
        server = f"{instance.name}: peer server on port {self.port(instance)}"

        def last_line() -> str:
            said = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            return said[0] if said else "(no output)"

        deadline = time.monotonic() + SERVER_READY_S
        while not ready():
            if proc.poll() is not None:
                raise InstanceError(f"{server} exited with {proc.returncode}: {last_line()}")
            if time.monotonic() > deadline:
                raise InstanceError(f"{server} {never} within {SERVER_READY_S:g} s: {last_line()}")
            time.sleep(0.1)

    def cleanup(self, instance: Instance, ctx: Context) -> None:
        entry = self._servers.pop(instance.name, None)
        if entry is None:
            return
        proc, logdir = entry
        ledger = ctx.network.ledger
        for res in ledger.live:
            if res.kind == "process" and res.name == str(proc.pid):
                ledger.release(res)  # terminates, waits, kills if need be
        proc.poll()
        ledger.release(logdir)
