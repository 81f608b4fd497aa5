"""Every run of a study as a history: one series per host and figure, its change points found
(``changes``) and explained by what the store recorded of the runs on either side.

A point is one run: the run's mean of a figure (its single, per-instance figure, as ``compare``
reads it) with its 95% interval. A series is one (study, host, platform, workload, instance
count, metric): runs on different hosts are never mixed (the host is the fleet's name for it
where the run was part of a fleet run, else the inventory's hostname). Points are ordered by
run time, or by a version (``ORDERS``): the QEMU that ran (the cell's own, else the host's),
the host's or the guest's kernel, hvbench's commit (in the order commits first ran: the store
knows no commit graph), or a label given at run time (``hvbench run --label KEY=VALUE``);
versions compare as numbers where they hold numbers (10.0 after 7.2), runs of one version by
time, and runs without the version are left out (counted in ``Series.left_out``).

A change point is explained by the difference of provenance between the last run before it and
the first run after: QEMU, kernels, the platform's and the workload's settings, the host's
inventory (tools, conditions; its load, a measurement rather than a setting, left out), the
hvbench commit and the labels. Empty, it says so: explained by nothing recorded.

A series takes little of a run's analysis (``RunFigures``), and a finished run's analysis
changes only with hvbench's code: that little is kept in the store per run (``FIGURES``, keyed
by ``cache.run_key``), by ``hvbench run`` as it ends a run or else by the first history that
analyses it, so that a history of a thousand runs reads them rather than analysing each again.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from hvbench.analysis import changes
from hvbench.analysis.cache import run_key
from hvbench.analysis.compare import _flat, gates
from hvbench.analysis.model import JudgedClaim, RunAnalysis, json_number, number_of
from hvbench.analysis.run_analysis import analyse
from hvbench.errors import HvbenchError
from hvbench.store import FLEET, LABELS, CellView, RunRecord, Store, image_artifact
from hvbench.units import interval_strings

TIME = "time"
QEMU = "qemu"
KERNEL = "kernel"
GUEST_KERNEL = "guest-kernel"
COMMIT = "commit"
LABEL = "label:"
ORDERS = (TIME, QEMU, KERNEL, GUEST_KERNEL, COMMIT, f"{LABEL}NAME")
"""What ``--by`` takes."""

VOLATILE = re.compile(r"load\.|ksm\.pages_sharing$")
"""Host conditions that are measurements of the moment, different in every run."""
VERSION = re.compile(r"\d+(?:\.\d+)+")
FIGURES = "series figures"
"""A finished run's ``RunFigures``, kept in the store (``Store.keep_derived``) under this
name: a history reads them rather than analysing every run again."""


class ItemKind(StrEnum):
    """What an item of a run's provenance is of."""

    HVBENCH = "hvbench"
    QEMU = "QEMU"
    """The QEMU the cell ran (its platform's ``Provenance.qemu``)."""
    GUEST_KERNEL = "guest kernel"
    HOST = "host"
    """An item of the host's description (``Inventory.described``) but its name: a series is
    of one host."""
    HOST_TOOL = "host tool"
    HOST_CONDITION = "host condition"
    PLATFORM = "platform"
    WORKLOAD = "workload"
    LABEL = "label"


class ProvenanceItem(NamedTuple):
    """One item of what the store recorded of a run for a cell (``provenance``): its kind, and
    its name within the kind where the kind alone does not name it."""

    kind: ItemKind
    name: str = ""

    def __str__(self) -> str:
        """As a change point names it, in ``hvbench history`` and on the site: "host tool
        fio", "QEMU"."""
        return f"{self.kind} {self.name}" if self.name else str(self.kind)


HVBENCH_COMMIT = ProvenanceItem(ItemKind.HVBENCH, "commit")
HVBENCH_VERSION = ProvenanceItem(ItemKind.HVBENCH, "version")
QEMU_RAN = ProvenanceItem(ItemKind.QEMU)
GUEST_KERNEL_RAN = ProvenanceItem(ItemKind.GUEST_KERNEL)
HOST_KERNEL = ProvenanceItem(ItemKind.HOST, "kernel")
HOST_QEMU = ProvenanceItem(ItemKind.HOST_TOOL, "qemu-system-x86_64")
"""The host's QEMU, for a cell whose platform did not resolve one."""


@dataclass(frozen=True)
class Point:
    """One run's mean of the series' figure."""

    run_id: str
    time: datetime
    version: str | None
    """The ordering key's value (``Series.by``); for ``time``, what ran: its QEMU, else the
    host's kernel."""
    mean: float
    low: float
    high: float
    """95% interval of the mean (NaN with one repetition)."""
    n: int
    """Repetitions."""
    provenance: dict[ProvenanceItem, str] = field(repr=False, compare=False)
    """What the store recorded of the run for this cell, flat."""


@dataclass(frozen=True)
class Difference:
    """One item of provenance that differs between the runs either side of a change."""

    item: ProvenanceItem
    before: str | None
    after: str | None

    def __str__(self) -> str:
        return f"{self.item} {self.before or '-'} → {self.after or '-'}"


@dataclass(frozen=True)
class ChangePoint:
    """The series' level moves from ``after``'s run on (``changes`` tests it against noise)."""

    index: int
    """Of the first point after the change."""
    before: Point
    """The last run before the change."""
    after: Point
    """The first run after it."""
    ratio: float
    """Geometric mean of the runs' means from ``after`` to the next change, over that of the
    runs since the previous change up to ``before``."""
    low: float
    high: float
    """Its interval at 1 − ``stats.ALPHA_ACROSS_RUNS``."""
    p_value: float
    """Adjusted for every series loaded together (``changes.find``)."""
    regression: bool
    """The change is in the figure's worse direction."""
    differences: tuple[Difference, ...]
    """Provenance of ``before`` against ``after``; empty: explained by nothing recorded."""

    @property
    def change(self) -> float:
        return self.ratio - 1

    @property
    def explained(self) -> bool:
        return bool(self.differences)


def when(p: Point) -> str:
    """A point's run time, with its version where it has one."""
    return f"{p.time:%Y-%m-%d %H:%M}" + (f", {p.version}" if p.version else "")


CHANGE = "from run {after} ({when}) on: {level} ({what}; the run before: {before})"


def change_sentence(
    c: ChangePoint,
    run: Callable[[str], str] = str,
    level: Callable[[str, ChangePoint], str] = lambda text, _: text,
    kind: Callable[[str], str] = str,
) -> str:
    """The one wording of a change point, in ``hvbench history`` and on the site: "from run X
    (date, version) on: −8.1% [−10.2, −6.0] (regression; the run before: W)". ``run`` shows a
    run's id and ``level`` the change (the site links and colours them); ``kind`` makes the
    sentence's text (``Markup`` escapes what it is given that is not markup)."""
    texts = interval_strings(100 * (c.ratio - 1), 100 * (c.low - 1), 100 * (c.high - 1), sign=True)
    est, low, high = (x.replace("-", "−") for x in texts)
    return kind(CHANGE).format(
        after=run(c.after.run_id),
        when=when(c.after),
        level=level(f"{est}% [{low}, {high}]", c),
        what="regression" if c.regression else "improvement",
        before=run(c.before.run_id),
    )


def explanation(c: ChangePoint) -> str:
    """What changed between the runs either side, or that nothing recorded did: the one
    wording, in ``hvbench history`` and on the site."""
    if not c.differences:
        return (
            "explained by nothing recorded: host, versions, platform and workload settings, "
            "hvbench and labels are the same in both runs"
        )
    return "changed: " + "; ".join(str(d) for d in c.differences)


@dataclass
class Series:
    """One figure of one study on one host across its runs."""

    study: str
    host: str
    platform: str
    label: str
    """The platform as reports name it, with what ran (``kvm-virtio [tcg]``)."""
    workload: str
    instances: int
    metric: str
    unit: str
    higher_is_better: bool
    headline: bool
    """In the family ``compare`` gates on (``compare.gates``): a headline figure, or a sub-score
    of a cpu cell's composite (the composite is relative to its own run's baseline, whose own
    reads 1 in every run)."""
    by: str
    """The ordering key (``ORDERS``)."""
    points: list[Point] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)
    left_out: int = 0
    """Runs without the ordering key's version, not in ``points``."""

    @property
    def name(self) -> str:
        return f"{self.label} / {self.workload} / {self.instances} inst. / {self.metric}"

    def recent(self, window: int) -> list[ChangePoint]:
        """Change points whose first run after is among the newest ``window`` points."""
        return [c for c in self.changes if c.index >= len(self.points) - window]


@dataclass(frozen=True)
class Figure:
    """One figure of a run as a series reads it: which series, and the run's mean."""

    cell: str
    """Its cell's key (``RunFigures.provenance``)."""
    platform: str
    label: str
    workload: str
    workload_name: str
    instances: int
    name: str
    unit: str
    higher_is_better: bool
    headline: bool
    mean: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class RunFigures:
    """What the series take of one run's analysis: little, and kept per finished run."""

    host: str
    figures: list[Figure]
    provenance: dict[str, dict[ProvenanceItem, str]]
    """Per cell key (``provenance``)."""
    claims: list[JudgedClaim] = field(default_factory=list)
    """The run's judged claims, for a claim's outcome run by run."""

    @classmethod
    def of(cls, run: RunAnalysis) -> RunFigures:
        figures = [
            Figure(
                r.cell.key,
                r.cell.platform,
                run.label(r.cell.platform),
                r.cell.workload,
                r.cell.workload_name,
                r.cell.instances,
                r.name,
                r.unit,
                r.higher_is_better,
                gates(r),
                r.single.mean,
                r.single.ci_low,
                r.single.ci_high,
                r.single.n,
            )
            for r in run.results
        ]
        cells = {c.key: provenance(run, c) for c in run.cells}
        return cls(host_of(run), figures, cells, list(run.claims))

    def to_json(self) -> dict:
        """As JSON holds it, each record by its fields' names (``model.json_number``). Kept
        under a key of the code that wrote it (``cache.run_key``), so that what an older
        hvbench kept is worked out again rather than read."""
        return {
            "host": self.host,
            "figures": [{k: json_number(v) for k, v in vars(f).items()} for f in self.figures],
            "provenance": {
                cell: [
                    {"kind": item.kind.value, "name": item.name, "value": value}
                    for item, value in items.items()
                ]
                for cell, items in self.provenance.items()
            },
            "claims": [j.to_json() for j in self.claims],
        }

    @classmethod
    def from_json(cls, data: dict) -> RunFigures:
        figures = [
            Figure(**{**f, **{k: number_of(f[k]) for k in ("mean", "low", "high")}})
            for f in data["figures"]
        ]
        provenance = {
            cell: {ProvenanceItem(ItemKind(i["kind"]), i["name"]): i["value"] for i in items}
            for cell, items in data["provenance"].items()
        }
        claims = [JudgedClaim.from_json(j) for j in data["claims"]]
        return cls(data["host"], figures, provenance, claims)


def host_of(run: RunAnalysis) -> str:
    """The host a run ran on: its fleet name, else its inventory's hostname."""
    tag = run.artifacts.get(FLEET) or {}
    return str(tag.get("host") or run.inventory.name)


def _guest_kernel(run: RunAnalysis, cell: CellView) -> str | None:
    """The guest kernel of the cell's image, where its guests booted one."""
    key = cell.provenance.image_key
    if key is None:
        return None
    kernel = (run.artifacts.get(image_artifact(key)) or {}).get("kernel") or {}
    if not kernel:
        return None
    return f"{kernel.get('release', '')} ({kernel.get('version', '')})".strip()


def provenance(run: RunAnalysis, cell: CellView) -> dict[ProvenanceItem, str]:
    """What the store recorded of a run for one of its cells, flat (``Difference``'s items)."""
    host = {k: v for k, v in run.inventory.described().items() if k != "hostname"}
    items: dict[ProvenanceItem, object] = {
        HVBENCH_COMMIT: run.git_commit,
        HVBENCH_VERSION: run.hvbench_version,
    }
    described = cell.provenance
    items[QEMU_RAN] = described.qemu
    items[GUEST_KERNEL_RAN] = _guest_kernel(run, cell)
    conditions = [c for c in run.conditions if not VOLATILE.match(c.name)]
    groups: list[tuple[ItemKind, Mapping[str, object]]] = [
        (ItemKind.HOST, host),
        (ItemKind.HOST_TOOL, run.inventory.tools),
        (ItemKind.HOST_CONDITION, {c.name: c.value for c in conditions}),
        (ItemKind.PLATFORM, _flat({**described.settings, **described.records()})),
        (ItemKind.WORKLOAD, _flat(cell.workload_settings)),
        (ItemKind.LABEL, run.options.get(LABELS) or {}),
    ]
    items |= {ProvenanceItem(kind, k): v for kind, found in groups for k, v in found.items()}
    return {k: str(v) for k, v in items.items() if v is not None}


def differences(before: Point, after: Point) -> tuple[Difference, ...]:
    a, b = before.provenance, after.provenance
    return tuple(
        Difference(k, a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)
    )


def short_version(text: str | None) -> str | None:
    """ "QEMU emulator version 7.2.22 (Debian …)" → "7.2.22"; other text as it is."""
    if text is None:
        return None
    found = VERSION.search(text)
    return found.group(0) if found and text.startswith("QEMU") else text


def _key(by: str, p: dict[ProvenanceItem, str]) -> str | None:
    """The value of the ordering key ``by`` in a point's provenance."""
    if by == QEMU:
        return short_version(p.get(QEMU_RAN) or p.get(HOST_QEMU))
    if by == KERNEL:
        return p.get(HOST_KERNEL)
    if by == GUEST_KERNEL:
        return p.get(GUEST_KERNEL_RAN)
    if by == COMMIT:
        return p.get(HVBENCH_COMMIT)
    return p.get(ProvenanceItem(ItemKind.LABEL, by.removeprefix(LABEL)))


def natural(text: str) -> tuple:
    """A sort key under which "10.0.2" comes after "7.2.22" and "rc10" after "rc9"."""
    return tuple(
        (0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.findall(r"\d+|\D+", text)
    )


def check_order(by: str) -> str:
    if by in ORDERS[:-1] or (by.startswith(LABEL) and len(by) > len(LABEL)):
        return by
    raise HvbenchError(f"--by {by!r}: give one of {', '.join(ORDERS)}")


def _ordered(points: list[Point], by: str) -> list[Point]:
    points = sorted(points, key=lambda p: p.time)
    if by == TIME:
        return points
    if by == COMMIT:  # no commit graph: commits in the order they first ran
        first: dict[str | None, int] = {}
        for p in points:
            first.setdefault(p.version, len(first))
        return sorted(points, key=lambda p: first[p.version])
    return sorted(points, key=lambda p: natural(p.version or ""))


def _point(run: RunRecord, f: Figure, prov: dict[ProvenanceItem, str], by: str) -> Point:
    version = (
        _key(by, prov) if by != TIME else short_version(prov.get(QEMU_RAN)) or prov.get(HOST_KERNEL)
    )
    return Point(run.id, run.created_at, version, f.mean, f.low, f.high, f.n, prov)


def _matches(f: Figure, platform: str | None, workload: str | None, metric: str | None) -> bool:
    return (
        (platform is None or f.platform == platform)
        and (workload is None or workload in (f.workload, f.workload_name))
        and (f.headline if metric is None else fnmatch.fnmatchcase(f.name, metric))
    )


def _runs(store: Store, study: str | None, host: str | None) -> list[tuple[RunRecord, RunFigures]]:
    """The figures of a study's runs (every study's where None) on a host (every host): kept
    ones where their key (``cache.run_key``) is current, else analysed and kept."""
    records = store.runs()
    if not records:
        raise HvbenchError(f"no runs in {store.url} yet; start one with 'hvbench run'")
    studies = sorted({r.study_name for r in records})
    if study is not None and study not in studies:
        raise HvbenchError(
            f"no runs of study {study!r} in {store.url}; its studies: {', '.join(studies)}"
        )
    kept = store.derived(FIGURES)
    found = []
    for record in records:
        if study is not None and record.study_name != study:
            continue
        key = run_key(record)
        if key is not None and kept.get(record.id, ("",))[0] == key:
            found.append((record, RunFigures.from_json(kept[record.id][1])))
            continue
        try:
            figures = RunFigures.of(analyse(store, record.id))
        except HvbenchError:  # a run with no cells yet: no point in any series
            continue
        if key is not None:
            store.keep_derived(record.id, FIGURES, key, figures.to_json())
        found.append((record, figures))
    hosts = sorted({f.host for _, f in found})
    if host is not None and host not in hosts:
        raise HvbenchError(f"--host {host!r}: no runs on it; the runs' hosts: {', '.join(hosts)}")
    return [(r, f) for r, f in found if host is None or f.host == host]


def keep(store: Store, run: RunAnalysis) -> None:
    """Keep a run's figures for the history, from its analysis made anyway (``hvbench run``
    reports every run it ends)."""
    record = store.run(run.run_id)
    if (key := run_key(record)) is not None:
        store.keep_derived(run.run_id, FIGURES, key, RunFigures.of(run).to_json())


def load(
    store: Store,
    study: str | None = None,
    platform: str | None = None,
    workload: str | None = None,
    metric: str | None = None,
    host: str | None = None,
    by: str = TIME,
) -> list[Series]:
    """Every series of a study's runs in the store (every study's where None), per host, each
    with its change points; only the figures ``compare`` gates on (``Series.headline``) unless
    ``metric`` names others (a name or a shell pattern: ``net.*``). ``workload`` is a cell's
    workload (``disk dd size=2G``) or its name (``disk``). Change points of all of them are
    judged as one family."""
    by = check_order(by)
    runs = _runs(store, study, host)
    found: dict[tuple, Series] = {}
    missing: dict[tuple, int] = defaultdict(int)
    for run, figures in runs:
        for f in figures.figures:
            if not _matches(f, platform, workload, metric):
                continue
            key = (run.study_name, figures.host, f.platform, f.workload, f.instances, f.name)
            s = found.get(key)
            if s is None:
                s = found[key] = Series(
                    study=run.study_name,
                    host=figures.host,
                    platform=f.platform,
                    label=f.label,
                    workload=f.workload,
                    instances=f.instances,
                    metric=f.name,
                    unit=f.unit,
                    higher_is_better=f.higher_is_better,
                    headline=f.headline,
                    by=by,
                )
            point = _point(run, f, figures.provenance[f.cell], by)
            if point.version is None and by != TIME:
                missing[key] += 1
            else:
                s.points.append(point)
    if not found:
        raise HvbenchError(_nothing(runs, platform, workload, metric))
    series = sorted(found.values(), key=lambda s: (s.study, s.platform, s.workload, s.host))
    for key, s in found.items():
        s.points = _ordered(s.points, by)
        s.left_out = missing[key]
    _find_changes(series)
    return series


def _nothing(
    runs: list[tuple[RunRecord, RunFigures]],
    platform: str | None,
    workload: str | None,
    metric: str | None,
) -> str:
    """Which filter matched nothing, and what the runs hold instead."""
    results = [f for _, figures in runs for f in figures.figures]
    if not results:
        return "the runs hold no figures yet"
    for what, given, values in (
        ("--platform", platform, {f.platform for f in results}),
        ("--workload", workload, {f.workload for f in results}),
        ("--metric", metric, {f.name for f in results}),
    ):
        if given is None:
            continue
        hit = (
            any(fnmatch.fnmatchcase(v, given) for v in values)
            if what == "--metric"
            else given in values or any(v.split()[0] == given for v in values)
        )
        if not hit:
            shown = sorted(values)
            more = f" and {len(shown) - 12} more" if len(shown) > 12 else ""
            return (
                f"{what} {given!r} is in none of the runs; they have {', '.join(shown[:12])}{more}"
            )
    return "no figure of the runs has that platform, workload and metric together"


def _find_changes(series: list[Series]) -> None:
    """Each series' change points, judged together as one family (``changes.find``)."""
    judged = changes.find([[p.mean for p in s.points] for s in series])
    for s, candidates in zip(series, judged, strict=True):
        s.changes = [
            ChangePoint(
                index=c.index,
                before=s.points[c.index - 1],
                after=s.points[c.index],
                ratio=c.ratio,
                low=c.low,
                high=c.high,
                p_value=c.p_holm,
                regression=(c.ratio < 1) == s.higher_is_better,
                differences=differences(s.points[c.index - 1], s.points[c.index]),
            )
            for c in candidates
            if c.significant
        ]


@dataclass(frozen=True)
class ClaimRun:
    """A claim as one run judged it."""

    run_id: str
    time: datetime
    judged: JudgedClaim


@dataclass
class ClaimHistory:
    """One claim on one platform of a study on one host, run by run, oldest first."""

    study: str
    host: str
    label: str
    workload: str
    claim: str
    runs: list[ClaimRun] = field(default_factory=list)


def claim_histories(
    store: Store, study: str | None = None, host: str | None = None
) -> list[ClaimHistory]:
    """Each claim's outcome in every run of a study (every study's where None) on each host."""
    found: dict[tuple, ClaimHistory] = {}
    for run, figures in sorted(_runs(store, study, host), key=lambda x: x[0].created_at):
        for j in figures.claims:
            key = (run.study_name, figures.host, j.label, j.workload, j.claim.text)
            h = found.setdefault(key, ClaimHistory(*key))
            h.runs.append(ClaimRun(run.id, run.created_at, j))
    return sorted(found.values(), key=lambda h: (h.study, h.host, h.label, h.workload, h.claim))
