"""``hvbench publish DIR``: a static site of the store's history, as ``asv publish`` makes one.

``index.html`` lists each study on each host (a fleet's hosts side by side: a study's runs on
two hosts are two histories, never one); each has a page of its own with, per headline metric,
the trend of its run means with their intervals and the change points marked, each change
point with the two runs around it and what their provenance says changed; and ``runs/ID.html``
is each run's own HTML report. Every page is self-contained (inline CSS, SVG and script, as the
run report is), so the site works from ``file://`` and from any static server and loads
nothing from the network.

A run's report is the slow part (its analysis and plots, about half a second), and a finished
run's report never changes: it is written again only where its run changed (its end) or
hvbench's analysis and report code did, which ``MANIFEST`` in DIR records. A report missing
there is copied from the one ``hvbench run`` wrote when the run ended, where that is current
(``report.HTML_REPORT``: same run, same code, same bytes), else made, on every core the host
gives.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from markupsafe import Markup

import hvbench
from hvbench.analysis.cache import run_key
from hvbench.analysis.series import ChangePoint, Series, change_sentence, explanation, load
from hvbench.analysis.stats import ALPHA_ACROSS_RUNS
from hvbench.errors import HvbenchError
from hvbench.report import HTML_REPORT, REPORT_CODE
from hvbench.report.html import ENV
from hvbench.store import RunRecord, Store

T = TypeVar("T")
MANIFEST = ".hvbench-site.json"
RUNS = "runs"
TICKS = 8
"""Runs named on a trend's x axis, at most."""


@dataclass(frozen=True)
class ChangeView:
    """A change point as the page says it: where, how much, and what changed."""

    anchor: str
    trend: str
    """The anchor of its trend's figure."""
    title: str
    point: ChangePoint

    @property
    def sentence(self) -> Markup:
        """``series.change_sentence``, its runs linked to their reports."""
        return Markup(change_sentence(self.point, _run_link, _level, Markup))

    @property
    def explanation(self) -> str:
        return explanation(self.point)


def _run_link(run_id: str) -> Markup:
    return Markup('<a href="{}">{}</a>').format(report_path(run_id), run_id)


def _level(text: str, c: ChangePoint) -> Markup:
    return Markup('<span class="{}">{}</span>').format("loss" if c.regression else "gain", text)


@dataclass(frozen=True)
class TrendView:
    """One figure (workload, count, metric) of a history: a line per platform."""

    anchor: str
    title: str
    svg: Markup
    changes: list[ChangeView]
    notes: list[str]


@dataclass
class History:
    """A study's runs on one host, oldest first: one page of the site."""

    study: str
    host: str
    runs: list[RunRecord]
    page: str
    """Its file name in the site."""
    trends: list[TrendView] = field(default_factory=list)
    """Its headline metrics' trends."""

    @property
    def label(self) -> str:
        return f"{self.study} on {self.host}"

    @property
    def changes(self) -> list[ChangeView]:
        return [c for t in self.trends for c in t.changes]


@dataclass(frozen=True)
class Published:
    """What ``publish`` wrote: for the command's summary and for tests."""

    index: Path
    pages: list[Path]
    reports_written: int
    reports_copied: int
    """From the report ``hvbench run`` wrote when the run ended (``report.HTML_REPORT``)."""
    reports_kept: int
    no_report: dict[str, str]
    """Run id -> why it has no report (a run that stored no cell, say)."""


def histories(runs: Iterable[RunRecord], hosts: dict[str, str]) -> list[History]:
    """The store's runs by study and host, studies by name, hosts by name. A run's host is
    its series' (``series.host_of``: a fleet's name for it, else its hostname), given in
    ``hosts``; a run with no figure in any series has its inventory's hostname."""
    grouped: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in runs:
        host = hosts.get(r.id) or r.inventory.name
        grouped[(r.study_name, host)].append(r)
    out = []
    used: set[str] = {"index"}
    for (study, host), rs in sorted(grouped.items()):
        page = _unique(f"{_slug(study)}@{_slug(host)}", used) + ".html"
        out.append(History(study, host, sorted(rs, key=lambda r: r.created_at), page))
    return out


def _slug(text: str) -> str:
    """A file name's part from a study's, host's or run's name (which may hold anything)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "_"


def _unique(name: str, used: set[str]) -> str:
    """``name``, or ``name-2``, ``-3``... where two names slug the same (case too, for
    case-insensitive file systems)."""
    candidate, k = name, 1
    while candidate.lower() in used:
        k += 1
        candidate = f"{name}-{k}"
    used.add(candidate.lower())
    return candidate


def report_path(run_id: str) -> str:
    """A run's report in the site, relative to its root (run ids are unique in a store, and
    their slugs too: ids are made of letters, digits and dashes)."""
    return f"{RUNS}/{_slug(run_id)}.html"


# run reports ------------------------------------------------------------------------------


@dataclass
class Manifest:
    """What DIR's ``MANIFEST`` records of the site's run reports: the key (``cache.run_key``)
    each run's report was made under, and why a run has none (a run that cannot have one is
    not tried again under the same key)."""

    made: dict[str, str | None] = field(default_factory=dict)
    """Run id -> the key its report, or its failure, was made under."""
    no_report: dict[str, str] = field(default_factory=dict)
    """Run id -> why it has no report."""

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest at ``path``; an empty one where there is none to read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data.get("made"), dict):
            # A site published before this form: one mapping, each failure under "!" + run id.
            # Read once here; ``write`` leaves it in this form.
            failed = {k for k in data if k.startswith("!")}
            made = {k: v for k, v in data.items() if k not in failed}
            return cls(made, {k.removeprefix("!"): data[k] for k in failed})
        return cls(data["made"], data["no_report"])

    def write(self, path: Path, runs: Iterable[str]) -> None:
        """Keep what is recorded of ``runs`` (the store's), at ``path``."""
        keep = set(runs)
        content = {
            "made": {k: v for k, v in self.made.items() if k in keep},
            "no_report": {k: v for k, v in self.no_report.items() if k in keep},
        }
        path.write_text(json.dumps(content, indent=1, sort_keys=True), encoding="utf-8")


def _reuse(store: Store, runs: list[RunRecord], root: Path) -> set[str]:
    """Copy into the site the reports of ``runs`` that ``hvbench run`` wrote when each ended,
    where still current (same run, same code, same bytes); the ids of those copied."""
    kept = store.derived(HTML_REPORT)
    copied = set()
    for r in runs:
        key = run_key(r, REPORT_CODE)
        if key is None or r.id not in kept or kept[r.id][0] != key:
            continue
        try:
            data = Path(kept[r.id][1]["path"]).read_bytes()
        except OSError:  # moved or removed since: made again
            continue
        if hashlib.sha256(data).hexdigest() == kept[r.id][1]["sha256"]:
            (root / report_path(r.id)).write_bytes(data)
            copied.add(r.id)
    return copied


@functools.cache
def _worker_store(url: str) -> Store:
    """A worker process's own store at ``url``, opened at its first report (a connection is
    never shared across processes)."""
    return Store(url)


def _write_report_in_worker(url: str, job: tuple[str, str]) -> tuple[str, str | None]:
    """``_write_report`` in a worker process, on its own store."""
    return _write_report(_worker_store(url), job)


def _write_report(store: Store, job: tuple[str, str]) -> tuple[str, str | None]:
    """Analyse a run and write its HTML report; (run id, why not) where it has none."""
    from hvbench.analysis import analyse
    from hvbench.report import html

    run_id, path = job
    try:
        text = html.render(analyse(store, run_id))
    except HvbenchError as e:
        return run_id, str(e)
    Path(path).write_text(text, encoding="utf-8")
    return run_id, None


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def write_reports(
    store: Store,
    runs: list[RunRecord],
    root: Path,
    meanwhile: Callable[[], T],
    jobs: int | None = None,
) -> tuple[int, int, int, dict[str, str], T]:
    """Each run's report under ``root/RUNS``, copied or made again only where stale;
    (written, copied from the run's own, kept, {run id: why no report}, what ``meanwhile``
    returned): ``meanwhile`` runs in this process while other processes make the reports."""
    (root / RUNS).mkdir(parents=True, exist_ok=True)
    manifest = Manifest.read(root / MANIFEST)
    stamps = {r.id: run_key(r, REPORT_CODE) for r in runs}

    def current(run_id: str) -> bool:
        """Made from this run as it is, and there (or known to have no report: a run that
        cannot have one keeps its reason in the manifest and is not tried again)."""
        if stamps[run_id] is None or manifest.made.get(run_id) != stamps[run_id]:
            return False
        return run_id in manifest.no_report or (root / report_path(run_id)).exists()

    stale = [r for r in runs if not current(r.id)]
    copied = _reuse(store, stale, root)
    todo = [(r.id, str(root / report_path(r.id))) for r in stale if r.id not in copied]
    missing = {r.id: manifest.no_report[r.id] for r in runs if r.id in manifest.no_report}
    jobs = max(1, min(jobs or _cores(), len(todo)))
    if jobs == 1:
        done = [_write_report(store, job) for job in todo]
        other = meanwhile()
    else:
        # spawned, not forked: a forked child would share the parent's database connections
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
            write = functools.partial(_write_report_in_worker, store.url)
            pending = pool.map(write, todo, chunksize=4)
            other = meanwhile()
            done = list(pending)
    for run_id, why in [*done, *((run_id, None) for run_id in copied)]:
        manifest.made[run_id] = stamps[run_id]
        manifest.no_report.pop(run_id, None)
        missing.pop(run_id, None)
        if why is not None:
            manifest.no_report[run_id] = why
            missing[run_id] = why
    manifest.write(root / MANIFEST, stamps)
    return len(todo), len(copied), len(runs) - len(stale), missing, other


# trends -----------------------------------------------------------------------------------


def trends(h: History, series: list[Series]) -> list[TrendView]:
    """The history's figures, one per (workload, count, metric) with a line per platform on
    the history's runs (a platform missing from a run leaves a gap), its change points
    numbered through the page."""
    from hvbench.report import plots

    place = {r.id: i for i, r in enumerate(h.runs)}
    ticks = _ticks(h.runs)
    room = [*sorted({s.label for s in series}), "change point"]
    grouped: dict[tuple[str, int, str], list[Series]] = defaultdict(list)
    for s in series:
        grouped[(s.workload, s.instances, s.metric)].append(s)
    out = []
    number = 0
    for k, ((workload, count, metric), members) in enumerate(grouped.items(), 1):
        anchor = f"t{k}"
        lines, views = [], []
        for s in members:
            changes = []
            for c in s.changes:
                number += 1
                view = ChangeView(f"cp{number}", anchor, f"{s.label}: {metric}", c)
                views.append(view)
                changes.append((place[c.after.run_id] - 0.5, f"#{view.anchor}"))
            lines.append(
                plots.TrendLine(
                    s.label,
                    np.array([place[p.run_id] for p in s.points], dtype=float),
                    np.array([p.mean for p in s.points]),
                    np.array([p.low for p in s.points]),
                    np.array([p.high for p in s.points]),
                    changes,
                )
            )
        first = members[0]
        better = "higher" if first.higher_is_better else "lower"
        unit = f"{first.unit} ({better} is better)"
        title = f"{metric}: {workload}, {count} instance{'s' if count > 1 else ''}"
        notes = [
            f"{s.label}: {s.left_out} run{'s' if s.left_out > 1 else ''} without the ordering "
            "key left out"
            for s in members
            if s.left_out
        ]
        svg = Markup(plots.trend(title, unit, lines, ticks, room))
        out.append(TrendView(anchor, title, svg, views, notes))
    return out


def _ticks(runs: list[RunRecord]) -> dict[float, str]:
    """Up to ``TICKS`` runs of a history, evenly apart, named by their date, or their time
    where the history spans less than two days."""
    if not runs:
        return {}
    span = runs[-1].created_at - runs[0].created_at
    fmt = (
        "%Y-%m-%d"
        if span.days >= 2
        else "%m-%d %H:%M"
        if span.total_seconds() > 3600
        else "%H:%M:%S"
    )
    step = -(-len(runs) // TICKS)
    return {float(i): runs[i].created_at.strftime(fmt) for i in range(0, len(runs), step)}


# pages ------------------------------------------------------------------------------------


def _series(store: Store) -> list[Series]:
    """Every history's series with its change points; none where no run holds a figure."""
    try:
        return load(store)
    except HvbenchError:
        return []


def publish(store: Store, root: Path, jobs: int | None = None) -> Published:
    """Write the site of every run in the store into ``root``."""
    runs = store.runs()
    if not runs:
        raise HvbenchError(f"no runs in {store.url} to publish; start one with 'hvbench run'")
    try:
        root.mkdir(parents=True, exist_ok=True)
        written, copied, kept, missing, found_series = write_reports(
            store, runs, root, lambda: _series(store), jobs
        )
        by_history: dict[tuple[str, str], list[Series]] = defaultdict(list)
        for s in found_series:
            by_history[(s.study, s.host)].append(s)
        hosts = {p.run_id: s.host for s in found_series for p in s.points}
        found = histories(runs, hosts)
        for h in found:
            h.trends = trends(h, by_history[(h.study, h.host)])
        pages = []
        for h in found:
            pages.append(
                _write(
                    root / h.page,
                    ENV.get_template("site_history.html.j2").render(
                        h=h,
                        title=f"hvbench: {h.label}",
                        report=report_path,
                        missing=missing,
                        confidence=f"{1 - ALPHA_ACROSS_RUNS:.0%}",
                    ),
                )
            )
        index = _write(
            root / "index.html",
            ENV.get_template("site_index.html.j2").render(
                histories=found,
                title="hvbench results",
                report=report_path,
                missing=missing,
                version=hvbench.__version__,
            ),
        )
    except OSError as e:
        raise HvbenchError(f"cannot write the site to {root}: {e.strerror}") from None
    return Published(index, pages, written, copied, kept, missing)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
