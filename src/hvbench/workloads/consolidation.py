"""consolidation: heterogeneous servers on one host, each doing a fixed, throttled amount of work.

The consolidation post (seed 003) ran sets of six guests — web, imap, app (J2EE), db, nfs and one
idle — whose clients sent requests at a throttled rate with a response-time requirement; since
every platform then does the same work, the figure of merit is the host CPU used for it, which the
analysis computes from every sample's host CPU. This workload gives instance i the role
``roles[i % len(roles)]``, where ``roles`` is ``mix`` expanded set by set in the fixed order of
``ROLES`` (see ``ConsolidationSettings.roles``), and runs that role's tool open-loop at
``rate`` events per second for ``seconds``.

Every active role is ``sysbench`` with ``--rate``: it queues events at that rate whatever the
server's speed (arrivals are random, Poisson-like, around that mean) and its latency includes the
time an event waited in the queue, so a platform that cannot keep up shows it as latency, as the
post's clients did. One worker thread per instance: one server process. The achieved rate is
sysbench's events (fileio counts each fsync as one) over its total time.

=====  ==================================================  =========================================
role   tool                                                why
=====  ==================================================  =========================================
web    ``sysbench cpu --cpu-max-prime=2000``               a short CPU burst per request (a page)
app    ``sysbench cpu --cpu-max-prime=20000``              about ten times the CPU per request (a
                                                           J2EE transaction)
db     ``sysbench fileio rndrw``, 16 KiB, direct I/O       random page reads and writes on the data
                                                           disk, fsync every 100 requests
imap   ``sysbench fileio rndwr``, 4 KiB, fsync each write  mail delivery: small writes made durable
nfs    ``sysbench fileio seqrd``, 64 KiB, direct I/O       a file server streaming the docroot
idle   ``sleep seconds``                                   stays up, costs what an idle guest costs
=====  ==================================================  =========================================

The post gives neither the rate nor the requirement. Defaults: 10 requests/s per instance, which
natively costs a web instance about 0.1 ms and an app instance about 0.6 ms of CPU per request
(a few % of a core), so 24 guests stay below saturation even with a large virtualization cost and
the host CPU figure compares like with like; and a 95th percentile within 100 ms, far above the
native service times, so "meets latency" turns 0 only when requests queue. ``seconds`` is 300 (a
rate needs minutes to settle: arrivals are random); ``--quick`` runs 3 s on a 16 MiB data set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from hvbench.units import Size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError, WorkloadSettings
from hvbench.workloads.common import combined, keep, number, run, search
from hvbench.workloads.disk import DiskWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

RoleName = Literal["web", "imap", "app", "db", "nfs", "idle"]
ROLES: tuple[str, ...] = ("web", "imap", "app", "db", "nfs", "idle")
"""The fixed order in which ``mix`` is expanded into instance roles."""
DEFAULT_MIX = {"web": 6, "imap": 4, "app": 4, "db": 4, "nfs": 2, "idle": 4}
"""The post's 24 guests: 4 sets, with nfs and db helpers."""
QUICK_SECONDS = 3.0
QUICK_FILES = 16 << 20
START_OVERHEAD_S = 2.0
"""sysbench start-up, file set-up and teardown, for the estimate."""


@dataclass(frozen=True)
class Role:
    """What one role runs: a sysbench test and its options, or nothing (idle)."""

    test: str | None
    options: tuple[str, ...] = ()

    @property
    def files(self) -> bool:
        return self.test == "fileio"


ROLE: dict[str, Role] = {
    "web": Role("cpu", ("--cpu-max-prime=2000",)),
    "app": Role("cpu", ("--cpu-max-prime=20000",)),
    "db": Role(
        "fileio",
        ("--file-num=4", "--file-test-mode=rndrw", "--file-block-size=16384",
         "--file-extra-flags=direct"),
    ),
    "imap": Role(
        "fileio",
        ("--file-num=1", "--file-test-mode=rndwr", "--file-block-size=4096",
         "--file-fsync-freq=1"),
    ),
    "nfs": Role(
        "fileio",
        ("--file-num=4", "--file-test-mode=seqrd", "--file-block-size=65536",
         "--file-extra-flags=direct"),
    ),
    "idle": Role(None),
}  # fmt: skip


class ConsolidationSettings(WorkloadSettings):
    name: Literal["consolidation"]
    mix: dict[RoleName, NonNegativeInt] = DEFAULT_MIX
    """Instances per role; instance i takes the i-th role of the expansion, cyclically."""
    seconds: PositiveFloat = 300.0
    """Measured wall time of every role."""
    rate: PositiveInt = 10
    """Requests (sysbench events) per second per instance, whatever the platform's speed."""
    latency_ms: PositiveFloat = 100.0
    """The response-time requirement: the 95th percentile, queueing included."""
    files: Size = 128 << 20
    """Data set of each disk role (db, imap, nfs), made before the measurement."""

    @field_validator("mix")
    @classmethod
    def _some_role(cls, mix: dict[str, int]) -> dict[str, int]:
        if not any(mix.values()):
            raise ValueError("at least one role with a count above 0 (e.g. {web: 1})")
        return mix

    def roles(self) -> list[str]:
        """The mix expanded set by set, each in the order of ROLES: with the default mix the
        first six instances are one whole set of the post (web, imap, app, db, nfs, idle), so a
        smaller instance count still runs every role."""
        rounds = range(max(self.mix.values()))
        return [r for k in rounds for r in ROLES if self.mix.get(r, 0) > k]

    def label(self) -> str:
        mix = ",".join(f"{r}:{self.mix[r]}" for r in ROLES if self.mix.get(r))
        return f"consolidation {mix} rate={self.rate}/s p95<={self.latency_ms:g}ms"


def parse_sysbench_rate(text: str) -> tuple[float, float]:
    """Achieved events per second and the 95th percentile latency (ms) of a sysbench run."""
    search(r"^General statistics:", text, "sysbench summary")
    total = number(
        search(r"total time:\s*([0-9.]+)s", text, "sysbench total time").group(1), "total time"
    )
    events = number(
        search(r"total number of events:\s*([0-9]+)", text, "sysbench event count").group(1),
        "total number of events",
    )
    p95 = number(
        search(r"95th percentile:\s*([0-9.]+)", text, "sysbench 95th percentile").group(1),
        "95th percentile",
    )
    if events <= 0 or total <= 0:
        raise ParseError(f"sysbench: {events:.0f} events in {total} s, no request completed")
    return events / total, p95


def role_metrics(role: str, text: str, latency_ms: float) -> list[Metric]:
    """The three metrics of an active role from its sysbench output."""
    try:
        rate, p95 = parse_sysbench_rate(text)
    except ParseError as e:
        raise ParseError(f"consolidation {role}: {e}") from None
    return [
        Metric(f"consolidation.{role}.events_per_s", rate, "events/s", True, headline=True),
        Metric(f"consolidation.{role}.latency_p95_ms", p95, "ms", False),
        Metric(f"consolidation.{role}.meets_latency", float(p95 <= latency_ms), "0/1", True),
    ]


def in_dir(path: str, argv: list[str]) -> list[str]:
    """argv run from ``path``: sysbench fileio works in its current directory and has no option
    for another one (``sh`` is in every instance, busybox or not)."""
    return ["sh", "-c", 'cd "$0" && exec "$@"', path, *argv]


class Consolidation(DiskWorkload):
    """Its scratch directory is on the data disk (DiskWorkload's), where the disk roles work."""

    name: ClassVar[str] = "consolidation"
    settings_model = ConsolidationSettings
    settings: ConsolidationSettings  # type: ignore[assignment]

    def tools(self) -> list[str]:
        return ["sysbench", "sleep"]

    def role(self, instance: Instance) -> str:
        roles = self.settings.roles()
        return roles[instance.index % len(roles)]

    def _seconds(self, quick: bool) -> float:
        return min(self.settings.seconds, QUICK_SECONDS) if quick else self.settings.seconds

    def _files(self, quick: bool) -> int:
        return min(self.settings.files, QUICK_FILES) if quick else self.settings.files

    def _fileio(
        self, role: Role, quick: bool, action: str, extra: tuple[str, ...] = ()
    ) -> list[str]:
        return ["sysbench", "fileio", *role.options, f"--file-total-size={self._files(quick)}",
                *extra, action]  # fmt: skip

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        role = ROLE[self.role(instance)]
        if role.files:
            self.check_space(instance, self._files(ctx.quick))
            argv = self._fileio(role, ctx.quick, "prepare")
            run(instance, in_dir(self.scratch(instance), argv), timeout=self.timeout(ctx.quick))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        name = self.role(instance)
        role = ROLE[name]
        seconds = max(1, round(self._seconds(ctx.quick)))
        timeout = 120 + 5 * seconds
        if role.test is None:
            argv = ["sleep", str(seconds)]
            ctx.barrier()
            run(instance, argv, timeout=timeout)
            return Outcome(raw=[keep("sleep", argv, "")])
        load = ("--threads=1", f"--rate={self.settings.rate}", f"--time={seconds}",
                "--percentile=95")  # fmt: skip
        if role.files:
            argv = in_dir(self.scratch(instance), self._fileio(role, ctx.quick, "run", load))
        else:
            argv = ["sysbench", "cpu", *role.options, *load, "run"]
        ctx.barrier()
        result = run(instance, argv, timeout=timeout)
        text = combined(result)
        metrics = role_metrics(name, text, self.settings.latency_ms)
        return Outcome(metrics=metrics, raw=[keep("sysbench", argv, text)])

    def estimate_seconds(self, quick: bool) -> float:
        """The measured time, plus writing the largest data set at a modest 100 MiB/s."""
        return self._seconds(quick) + START_OVERHEAD_S + self._files(quick) / (100 << 20)
