"""The run's artifact ``ascent``: per platform and workload, what each climb of an ascent
(consolidation's ``sets: auto``) held and why it stopped, with what the host and the clients
were doing at that step. The ascent writes it as the run goes (``hvbench.ascent``) and reads it
back on resume; the analysis reads it for the density (``analysis.cost.density``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hvbench.store import Store

ASCENT = "ascent"
"""The artifact's name."""


@dataclass
class AscentStop:
    """Where one climb stopped, and the host and the clients at that step."""

    count: int
    """Instances at the step."""
    by: str
    """slo (a role missed its SLO), harness (it did, because its client fell behind), failed
    (a sample failed) or memory (the host's memory cannot hold the step)."""
    why: str
    """The workload's line: which role missed which SLO; the error; the memory line."""
    host_busy: float | None = None
    """The host's busy share (0..1) during the step's window, the clients' left out."""
    clients: float | None = None
    """The clients' share of the host's CPU during the window."""
    memory_used: float | None = None
    """The host's memory in use (0..1, 1 − available / total) with the step's instances up."""
    clients_kept: str | None = None
    """Whether the clients kept their rate, in one line (``Workload.pace``); None: not known."""
    instances: float | None = None
    """The instances' own processes' share of the host's CPU (None where a platform's are not
    all known, as natively): the rest of ``host_busy`` is the host's other work."""

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class AscentRecord:
    """One platform's ascent of one workload, climbed once per repetition: climb k is the
    cells' repetition k."""

    platform: str
    workload: str
    """The cell's workload label."""
    workload_name: str
    unit: str
    """What a step is called ("sets")."""
    counts: list[int]
    """Instances at step 1, 2, ...; the last is the bound (stored as ``steps``)."""
    climb_count: int = 1
    """How many times it is climbed (``workloads.base.Ascent.climb_count``; stored as
    ``climbs``)."""
    held: dict[int, list[int]] = field(default_factory=dict)
    """Per climb, the instance counts whose step held."""
    stops: dict[int, AscentStop] = field(default_factory=dict)
    """Per climb that stopped below the bound, where and why."""

    def to_json(self) -> dict:
        return {
            "platform": self.platform,
            "workload": self.workload,
            "workload_name": self.workload_name,
            "unit": self.unit,
            "steps": self.counts,
            "climbs": self.climb_count,
            "held": {str(k): v for k, v in self.held.items()},
            "stops": {str(k): s.to_json() for k, s in self.stops.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> AscentRecord:
        """The stored object back. A run from before climbs were kept apart stored one entry
        for all its repetitions (``held``, ``stopped_at``, ``stopped_by``, ``why``): read as
        one climb."""
        common = {k: data[k] for k in ("platform", "workload", "workload_name", "unit")}
        common["counts"] = data["steps"]
        if "stops" not in data:
            stop = data.get("stopped_at")
            stops = {} if stop is None else {1: AscentStop(stop, data["stopped_by"], data["why"])}
            return cls(**common, held={1: list(data["held"])}, stops=stops)
        return cls(
            **common,
            climb_count=data["climbs"],
            held={int(k): list(v) for k, v in data["held"].items()},
            stops={int(k): AscentStop(**s) for k, s in data["stops"].items()},
        )


def read_ascents(store: Store, run_id: str) -> dict[str, AscentRecord]:
    """The run's ascents by "platform|workload" (none for a run without one)."""
    return ascents_of(store.artifacts(run_id))


def ascents_of(artifacts: dict[str, dict]) -> dict[str, AscentRecord]:
    """The ascents among a run's artifacts (``Store.artifacts``), as ``read_ascents``."""
    stored = artifacts.get(ASCENT) or {}
    return {key: AscentRecord.from_json(entry) for key, entry in stored.items()}


def write_ascents(store: Store, run_id: str, ascents: dict[str, AscentRecord]) -> None:
    """Keep the run's ascents as they are now, in place of the last account."""
    content = {key: record.to_json() for key, record in ascents.items()}
    store.add_artifact(run_id, ASCENT, content, replace=True)
