"""The analysed run as the report sees it: cells, their metrics with every derived figure,
and the run around them. Built by ``analysis.run_analysis.analyse`` from the store; read by the
verdicts, comparisons and every exporter (it knows nothing of how it was built)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import NamedTuple

import numpy as np

from hvbench.analysis.intervals import SampleSummary, median_interval
from hvbench.analysis.normalize import FigureText, Normalized, rounded
from hvbench.analysis.ratios import Ratio
from hvbench.analysis.settling import MAX_REPETITIONS
from hvbench.analysis.stats import ALPHA
from hvbench.analysis.trends import Trend
from hvbench.claim_schema import Claim
from hvbench.metrics import COMPOSITE_SCORE
from hvbench.store import CellView, Inventory, MetricView
from hvbench.store.ascent import AscentStop

COMPOSITE = COMPOSITE_SCORE.name
ASYMMETRY = 0.15
"""Directions whose means differ by more than this (relative to the larger) are asymmetric."""


NOISY_STEAL = 0.05
"""Steal time above this share of the host's CPU, in any repetition, makes a cell's host
noisy (one repetition in five with 20% steal averages to 4%: the average would hide it)."""


class Rotation(NamedTuple):
    """Repetitions with an instance behind the others, of those compared."""

    behind: int
    of: int


@dataclass
class HostCpu:
    """Host CPU during a cell's samples, as shares of the host's capacity (0..1), averaged."""

    n: int
    busy: float
    states: dict[str, float]
    busy_cores: dict[int, float]
    """Per repetition, host cores kept busy (busy seconds / wall seconds)."""
    steal: dict[int, float]
    """Per repetition, steal time as a share of the host's CPU."""
    instance_cores: float | None
    """Cores used by the instances' own processes (psutil), mean over samples."""
    clients: float | None = None
    """The run's load generators' CPU (their cgroup) as a share of the host's, mean over
    samples; already left out of ``busy`` and ``states``. None where no client ran."""

    @property
    def noisy_steal(self) -> dict[int, float]:
        """Repetitions during which steal time took more than NOISY_STEAL of the host's CPU,
        with that share."""
        return {r: x for r, x in self.steal.items() if x > NOISY_STEAL}

    @property
    def virtualization_overhead(self) -> float | None:
        """Busy time besides guest time, relative to guest time (the consolidation post's 55%)."""
        guest = self.states.get("guest", 0.0)
        return (self.busy - guest) / guest if guest > 0 else None


COUNTED = ("slo", "memory", "bound")
"""How an ascent ends when it measured the platform: an SLO missed with the clients on time,
the host's memory, or every step held. A failure, the harness (its clients fell behind) and an
interrupted run say nothing of the platform's density."""


@dataclass(frozen=True)
class Climb:
    """One ascent of a platform: the steps it held one after the other from the first."""

    number: int
    units_held: int
    """Steps held, one ``Density.unit`` each (sets), 0 where not even the first was."""
    stopped_by: str
    """slo, harness, failed, memory, bound (every step held) or unfinished."""
    stop: AscentStop | None
    """Where and why it stopped, with the host and the clients there (None: bound or
    unfinished)."""
    units_at_stop: int | None
    """The step it stopped at, in ``Density.unit`` (None: bound or unfinished)."""

    @property
    def counted(self) -> bool:
        """Whether it measured the platform's density (``COUNTED``)."""
        return self.stopped_by in COUNTED


@dataclass(frozen=True)
class Density:
    """How far an ascent (consolidation's ``sets: auto``) climbed on one platform, over its
    climbs: the steps each held, their spread, and the host CPU where they held."""

    platform: str
    workload: str
    workload_name: str
    unit: str
    """What a step is ("sets")."""
    climbs: list[Climb]
    counts: list[int]
    """Instances at step 1, 2, ..."""
    host_cpu: dict[int, HostCpu | None]
    """The host CPU of the ascent's cells by instance count (the clients' left out)."""

    @property
    def counted(self) -> list[Climb]:
        return [c for c in self.climbs if c.counted]

    @property
    def units_held(self) -> int | None:
        """The median of the counted climbs' ``units_held`` (the lower one of two); None: none
        counted."""
        held = sorted(c.units_held for c in self.counted)
        return held[(len(held) - 1) // 2] if held else None

    @property
    def spread(self) -> tuple[int, int] | None:
        """The fewest and the most steps a counted climb held."""
        held = [c.units_held for c in self.counted]
        return (min(held), max(held)) if held else None

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of the median of the steps a counted climb holds, between two
        order statistics (``intervals.median_interval``): a climb's steps are a count with
        ties, not a normal figure. NaN below ``intervals.MEDIAN_MIN_N`` counted climbs."""
        return median_interval([c.units_held for c in self.counted])

    def instances(self, units: int | None) -> int:
        return self.counts[units - 1] if units else 0

    def cpu_at(self, units: int | None) -> HostCpu | None:
        return self.host_cpu.get(self.counts[units - 1]) if units else None


@dataclass(frozen=True)
class TopFunction:
    """One line of a platform's profile."""

    samples: int
    percent: float
    """Share of all the samples of the platform's profiles, in %: of the host's CPU time."""
    symbol: str
    dso: str
    """The executable, library or ``[kernel.kallsyms]`` the function is in."""


@dataclass(frozen=True)
class PlatformProfile:
    """A platform's top functions while it ran one workload, over all its profiled samples."""

    platform: str
    workload: str
    samples: int
    """perf's samples in all, over every CPU and profiled sample."""
    profiles: int
    """Samples of the run (repetitions, instance counts) the profile sums."""
    functions: list[TopFunction]


class MetricKey(NamedTuple):
    """Where a metric's figures are in a run: its cell (platform, workload, instance count) and
    its name. Results of two runs with the same key are the same figure, as ``compare`` pairs
    them."""

    platform: str
    workload: str
    instances: int
    metric: str


@dataclass(frozen=True, eq=False)
class MetricResult:
    """One metric of one cell, with every derived figure (built once, with all of them, by
    ``analysis.run_analysis``; equal only to itself, as its arrays cannot be compared)."""

    cell: CellView
    name: str
    unit: str
    higher_is_better: bool
    throughput: bool
    headline: bool
    """What the workload's verdict is judged on (see ``run._headline_names``)."""
    composite: bool
    """A sub-score of its cell's composite (``Metric.composite``)."""
    direction: str | None
    """Of the traffic it measures, as its workload declared (``Metric.direction``)."""
    repetitions: np.ndarray
    single_values: np.ndarray
    aggregate_values: np.ndarray | None
    per_instance: np.ndarray
    """Mean over repetitions of each instance's value (the spread across instances)."""
    instance_cv: float
    """Mean over repetitions of the CV across the instances of each (NaN with one instance)."""
    starved: dict[int, Starved]
    """Instances far behind the others of the cell (``CellValues.starved``)."""
    single: SampleSummary
    aggregate: SampleSummary | None
    vs_baseline: Normalized | None = None
    aggregate_vs_baseline: Normalized | None = None
    efficiency: float | None = None
    overcommit: bool | None = None
    per_core_values: np.ndarray | None = None
    per_core: SampleSummary | None = None
    cost_vs_baseline: Ratio | None = None
    """Host CPU this platform spends for one unit of the work, relative to the baseline (the
    baseline's work per busy core over this platform's), with its interval; None for the
    baseline itself."""
    suspect: str | None = None
    """Why a figure above the baseline's is not a win (``platforms.above_baseline``)."""
    trend: Trend | None = None
    """Its repetitions against the order they ran in, for headline figures from
    ``trends.TREND_MIN_N`` repetitions (Holm over the run's); None where not tested."""
    rotating: Rotation | None = None
    """(repetitions, of) in which some instance, a different one, was far behind the others
    (``CellValues.rotating``); None where that is not most of them, or one instance is starved."""
    every: np.ndarray | None = None
    """Every instance's value in every repetition: what a percentile over the cell's instances
    is read from, pooled (every boot of every storm, ``claims``)."""

    @property
    def key(self) -> MetricKey:
        return MetricKey(self.cell.platform, self.cell.workload, self.cell.instances, self.name)


@dataclass
class Symmetry:
    """Inbound and outbound of one cell side by side."""

    cell: CellView
    inbound: MetricResult
    outbound: MetricResult
    ratio: float
    """outbound / inbound (means of the single figures)."""
    gap: float
    """1 − smaller/larger: how much the weaker direction loses."""
    p_value: float

    @property
    def tested(self) -> bool:
        """Both directions have 2 repetitions or more."""
        return math.isfinite(self.p_value)

    @property
    def asymmetric(self) -> bool:
        tested_equal = self.tested and self.p_value >= ALPHA
        return self.gap > ASYMMETRY and not tested_equal

    @property
    def weaker(self) -> str:
        return "outbound" if self.ratio < 1 else "inbound"


@dataclass(frozen=True)
class HostCondition:
    """A condition of the host recorded with the run (``host.conditions``, in its inventory) as
    the report reads it: a value of None was not exposed, a ``benchmark_grade`` of None is for
    the record only."""

    name: str
    value: str | None
    benchmark_grade: bool | None
    effect: str
    fix: str

    @staticmethod
    def of(inventory: Inventory) -> list[HostCondition]:
        """The conditions an inventory holds; none for a run recorded before they were."""
        return [
            HostCondition(
                str(c["name"]),
                None if c.get("value") is None else str(c["value"]),
                c.get("benchmark_grade"),
                str(c.get("effect", "")),
                str(c.get("fix", "")),
            )
            for c in inventory.conditions
        ]


@dataclass
class Noise:
    """A headline figure less certain than its interval says: why, and what would help."""

    result: MetricResult
    reasons: list[str]
    advice: str


# a claim judged (``claims.judged``): its outcome, and why an inconclusive one is
HELD = "held"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (REFUTED, INCONCLUSIVE, HELD)
"""Every outcome, the most pressing first."""
STRADDLES = "the interval straddles its bound"
NOT_MEASURED = "not measured"
BEFORE_HOLM = "{outcome} only before Holm's correction"
"""Why a claim whose interval is inside (held) or outside (refuted) its bound is inconclusive:
its test does not pass Holm's step-down over the run's claims."""
UNRESOLVED = (
    "no count of repetitions would: the interval is as narrow as the measurement's resolution "
    "allows; a finer clock or a longer job would"
)
"""What settles a claim whose distance from its bound is within half the resolution of its
mean: more repetitions of readings on the same clock give the same interval."""


@dataclass(frozen=True)
class JudgedClaim:
    """One claim on one platform, judged within the run's family."""

    claim: Claim
    platform: str
    label: str
    """The platform as reports name it (``RunAnalysis.label``)."""
    workload: str
    """The cells' workload label."""
    instances: int | None
    estimate: float
    low: float
    high: float
    """The mean (or % of native) and its 95% interval, in ``unit``; NaN where not measured or
    not tested."""
    unit: str
    """What they are in: the bound's unit, else the metric's; % for a % of native."""
    n: int
    """Repetitions of the platform (the smaller side's for a % of native)."""
    p_value: float
    p_holm: float
    """The test of the mean being exactly at the bound, raw and by Holm's step-down over the
    run's claims (NaN where not tested)."""
    outcome: str
    why: str = ""
    """Why an inconclusive claim is: straddles its bound, 1 repetition, not measured, ..."""
    before_correction: bool = False
    """Its interval is inside or beyond the bound, but Holm's step-down over the family does
    not pass."""
    repetitions: int | None = None
    """Repetitions that would settle an inconclusive claim 80% of the time, were its mean where
    it is; None where none up to ``settling.MAX_REPETITIONS`` would or nothing says."""
    unresolved: bool = False
    """Within half its resolution of its bound: no count of repetitions would settle it."""
    title: str = ""
    """The workload's name for people (``RunAnalysis.title``); its line says it."""
    lower: str = ""
    """For a % of native on a lower-is-better metric, what that metric is ("time", else
    "figure"): the line gives it as a multiple of native's too, for "50% of native" of an
    elapsed time reads as half the time."""
    floored: bool = False
    """The interval of a mean that cannot be below 0 (a time, a rate, a size) reached below 0:
    its lower bound is 0, and its line says so."""
    judged: bool = True
    """False where its bound cannot be read on its figure (``why``): its line gives the figure
    and says "not judged", not an outcome."""
    pooled: str = ""
    """Where the figure is a percentile of every instance of every repetition, what it is of
    ("p99 of the 500 boot.ready_s of every instance in every repetition"): its line says it."""

    def to_json(self) -> dict:
        """By field name, NaN as null: what a history keeps of it (``series.RunFigures``)."""
        return {k: json_number(v) for k, v in vars(self).items()} | {"claim": asdict(self.claim)}

    @classmethod
    def from_json(cls, data: dict) -> JudgedClaim:
        numbers = {k: number_of(data[k]) for k in _NUMBERS}
        return cls(**{**data, **numbers, "claim": Claim(**data["claim"])})

    def figure(self) -> FigureText:
        """ "52.3 s", "[49.1–55.5 s]"; "9.81%", "[9.52–10.1%]" (of native): rounded outward,
        with the digits to show on which side of the bound each end lies; no interval ("")
        where none was computed."""
        if math.isnan(self.estimate):
            return FigureText(NOT_MEASURED, "")
        unit = "%" if self.claim.of_native else (f" {self.unit}" if self.unit else "")
        est, low, high = rounded(self.estimate, self.low, self.high, self.claim.bound)
        if math.isnan(self.low):
            return FigureText(f"{est}{unit}", "")
        return FigureText(f"{est}{unit}", f"[{low}–{high}{unit}]")

    def measured(self) -> str:
        """ "52.3 s [49.1–55.5 s]", "9.81% [9.52–10.1%] of native"; "50% [48–52%] of native
        (2.0× [1.9–2.1×] native's time)" on a lower-is-better metric."""
        text = " ".join(x for x in self.figure() if x)
        if self.pooled:
            text = f"{text} ({self.pooled})"
        if self.floored:
            return f"{text} (floored at 0)"
        if not (self.claim.of_native and self.figure().interval):
            return text
        if not self.lower:
            return f"{text} of native"
        low = 100 / self.high if self.high > 0 else math.nan
        high = 100 / self.low if self.low > 0 else math.inf
        est, lo, hi = rounded(100 / self.estimate, low, high, 1.0)
        return f"{text} of native ({est}× [{lo}–{hi}×] native's {self.lower})"

    def settle(self) -> str:
        """What an inconclusive claim needs, in words; "" for a settled one."""
        if self.outcome != INCONCLUSIVE:
            return ""
        what = self.why
        if self.unresolved:
            what += f"; {UNRESOLVED}"
        elif self.repetitions is not None:
            what += f"; about {self.repetitions} repetitions would settle it"
        elif self.why == STRADDLES:
            what += (
                f"; no count up to {MAX_REPETITIONS} repetitions would, were its mean where it is"
            )
        return what

    def line(self) -> str:
        """The claim's line: "claim: tcg / cpu / 1 inst.: cpu.composite.score at least 95% of
        native: 9.81% [9.52–10.1%] of native: refuted (source)"."""
        where = f"{self.label} / {self.title or self.workload}" + (
            f" / {self.instances} inst." if self.instances else ""
        )
        source = f" (source: {self.claim.source})" if self.claim.source else ""
        tail = f" ({s})" if (s := self.settle()) else ""
        said = f"{self.outcome}{tail}" if self.judged else f"not judged ({self.why})"
        return f"claim: {where}: {self.claim.text}: {self.measured()}: {said}{source}"


_NUMBERS = ("estimate", "low", "high", "p_value", "p_holm")
"""A judged claim's figures: NaN where not measured or not tested, an interval's end
unbounded."""


def json_number(v: object) -> object:
    """A value as JSON (PostgreSQL's included) holds it: NaN as null, an unbounded end of an
    interval as "inf" or "-inf" (``number_of`` reads them back)."""
    if not isinstance(v, float) or math.isfinite(v):
        return v
    return None if math.isnan(v) else str(v)


def number_of(v: float | str | None) -> float:
    """A number ``json_number`` wrote."""
    return math.nan if v is None else float(v)


@dataclass
class RunAnalysis:
    """Everything exporters show, for one run."""

    run_id: str
    study_name: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    hvbench_version: str
    git_commit: str | None
    options: dict
    inventory: Inventory
    artifacts: dict
    study_text: str
    baseline: str | None
    cells: list[CellView]
    platforms: list[str]
    results: list[MetricResult]
    host_cpu: dict[int, HostCpu]
    symmetry: list[Symmetry]
    failed: list[tuple[CellView, int, str]]
    """(cell, repetition, error) of failed samples."""
    commands: list[tuple[str, list[str]]] = field(default_factory=list)
    """(tool, argv) of each distinct command the run used."""
    text_only: dict[MetricKey, str] = field(default_factory=dict)
    """What the tool printed instead of a number, for metrics that never had one in their cell
    (bonnie++'s "+++++": too fast to measure)."""
    rows: list[MetricView] = field(default_factory=list)
    """The store's metric rows of the ok samples (``Store.metric_rows``), for sample exports."""
    started: dict[tuple[int, int], datetime] = field(default_factory=dict)
    """When each (cell id, repetition) started."""
    warnings: list[str] = field(default_factory=list)
    """What else a reader must know, one line each (failed samples, starved instances,
    repetitions left out of a composite)."""
    noise: list[Noise] = field(default_factory=list)
    """Noisy headline figures, worst (highest CV) first."""
    noisy_side: int = 0
    """Side metrics (not headline) that are noisy as well: counted, shown in the statistics."""
    labels: dict[str, str] = field(default_factory=dict)
    """Platform -> the name reports give it, with what ran (``platforms.label``)."""
    ran: dict[str, str | None] = field(default_factory=dict)
    """Platform -> the accelerator or mode its guests ran under, None if nothing to choose."""
    profiles: list[PlatformProfile] = field(default_factory=list)
    """Each platform's top functions per workload, where the study profiled the host."""
    densities: list[Density] = field(default_factory=list)
    """Each ascent's result per platform (consolidation's ``sets: auto``)."""
    conditions: list[HostCondition] = field(default_factory=list)
    """The host's conditions before the run (``HostCondition.of`` its inventory)."""
    missing: dict[tuple[str, str, int], str] = field(default_factory=dict)
    """(platform, workload, count) -> why the cell has no headline figure at all (a composite
    with a sub-score of 0 in every repetition), for its verdict line to say."""
    claims: list[JudgedClaim] = field(default_factory=list)
    """What the study expects and the consolidation's SLOs, judged as one family
    (``claims.judged``)."""

    titles: dict[str, str] = field(default_factory=dict)
    """Workload label -> its name in sentences and tables (``workload_titles``)."""

    def label(self, platform: str) -> str:
        return self.labels.get(platform, platform)

    def title(self, workload: str) -> str:
        """A workload's name for people ("cpu (xz, aes)"); the label stays in the provenance."""
        return self.titles.get(workload, workload)

    def steal_reps(self, cell_id: int) -> dict[int, float]:
        """Repetitions of a cell during which steal time took more than NOISY_STEAL of the
        host's CPU, with that share."""
        return steal_reps(self.host_cpu, cell_id)

    def skewed(self, r: MetricResult) -> bool:
        """Whether some repetitions of this figure stand apart from the others (bimodal,
        outliers, steal time): its median says more than its mean."""
        return skewed(r, self.host_cpu)

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(c.workload for c in self.cells))

    def counts(self, workload: str) -> list[int]:
        return sorted({c.instances for c in self.cells if c.workload == workload})

    def metric_names(self, workload: str) -> list[str]:
        numeric = [r.name for r in self.results if r.cell.workload == workload]
        texts = [k.metric for k in self.text_only if k.workload == workload]
        return list(dict.fromkeys(numeric + texts))

    def result(self, platform: str, workload: str, name: str, count: int) -> MetricResult | None:
        return self._index.get(MetricKey(platform, workload, count, name))

    def __post_init__(self) -> None:
        self._index = {r.key: r for r in self.results}


def steal_reps(host_cpu: dict[int, HostCpu], cell_id: int) -> dict[int, float]:
    """``HostCpu.noisy_steal`` of a cell; none where its host CPU was not read."""
    h = host_cpu.get(cell_id)
    return {} if h is None else h.noisy_steal


def skewed(r: MetricResult, host_cpu: dict[int, HostCpu]) -> bool:
    """Whether some repetitions of a figure stand apart from the others (bimodal, outliers,
    steal time): its median says more than its mean. Not always a busier host: a repetition
    apart on the fast side is not contention (``run._advice``)."""
    return bool(r.single.bimodal or r.single.outliers or steal_reps(host_cpu, r.cell.id))


class Starved(NamedTuple):
    """An instance far behind the others of its cell (``aggregate.CellValues.starved``)."""

    share: float
    """Median over repetitions of its value / the others' median (inverted for ↓ metrics)."""
    behind: int
    """Repetitions in which it was below ``aggregate.STARVED_RATIO`` of the others..."""
    of: int
    """...of those in which it had others to compare with."""


def pick_baseline_cell(cells: list[CellView], workload: str, count: int) -> CellView | None:
    """The baseline's cell for a workload: same count, else highest below, else lowest."""
    same = [c for c in cells if c.workload == workload]
    if not same:
        return None
    exact = [c for c in same if c.instances == count]
    if exact:
        return exact[0]
    below = [c for c in same if c.instances < count]
    return max(below, key=lambda c: c.instances) if below else min(same, key=lambda c: c.instances)
