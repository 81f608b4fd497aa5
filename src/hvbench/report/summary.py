"""A run's answer on one screen: each platform's headline figure against the baseline, workload
by workload (the matrix), the claims' outcomes and the warnings counted by kind.

One model (``Summary``) for every place that shows it, so that they say the same: the end of
``hvbench run`` (``print_summary``: a screen, where the report has every table), the top of the
HTML report (the matrix coloured, then the verdict's sentences) and the data of ``hvbench run
--json`` and of the JSON lines (``MatrixCell.as_json``). Each cell is the figure the verdict's
sentence states (``analysis.verdict.headlines``), at the workload's smallest instance count,
judged in ``analysis.matrix``; the warnings are counted in ``analysis.warning_counts``. This
module lays them out.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hvbench.analysis import claims as claims_of
from hvbench.analysis.matrix import (
    MARKS,
    MEANINGS,
    MatrixCell,
    baseline_measured,
    finite,
    judged_cell,
    outcomes,
    said,
    unjudged_cell,
)
from hvbench.analysis.model import HELD, JudgedClaim, MetricResult, RunAnalysis
from hvbench.analysis.normalize import CLIPPED
from hvbench.analysis.readings import Reading
from hvbench.analysis.verdict import headlines
from hvbench.analysis.warning_counts import WarningCounts
from hvbench.report.tables import value_text

STYLES: dict[str, str] = {
    Reading.LOSS: "red",
    Reading.GAIN: "green",
    Reading.INCONCLUSIVE: "yellow",
    Reading.NOT_TESTED: "dim",
    Reading.LEFT_OUT: "dim",
}
"""The terminal's colours of a reading (a claim's outcome by the same word); the HTML's are its
stylesheet's ``v-`` classes."""


READY = "boot.ready_s"
"""Boot to ready (the guest's agent answers), each instance's: the seeds' own headline."""
ALL_READY = "boot.storm.all_ready_s"
"""A storm's start to its last instance ready."""


@dataclass(frozen=True)
class BootFigure:
    """One boot time with its interval, as the first screen prints it and ``--json`` carries
    it; an absolute time (native has none to set it against)."""

    instances: int
    mean_s: float
    ci_low_s: float | None
    ci_high_s: float | None
    n: int
    text: str
    """As printed: "5.4 [5.1–5.8]" (s)."""

    @classmethod
    def of(cls, a: RunAnalysis, r: MetricResult) -> BootFigure:
        s = r.single
        return cls(
            r.cell.instances, s.mean, finite(s.ci_low), finite(s.ci_high), s.n, value_text(a, r)
        )

    def as_json(self) -> dict:
        return {
            "instances": self.instances,
            "mean_s": self.mean_s,
            "ci_low_s": self.ci_low_s,
            "ci_high_s": self.ci_high_s,
            "n": self.n,
            "text": self.text,
        }


@dataclass(frozen=True)
class Boot:
    """A platform's boot on the first screen: to ready at its fewest instances, and for a
    storm, all ready at its largest count."""

    label: str
    ready: BootFigure | None
    all_ready: BootFigure | None

    def text(self) -> str:
        """ "qemu-virtio [tcg] 5.4 [5.1–5.8] s, all 8 ready in 21 [19–23] s"."""
        parts = [_seconds(self.ready.text)] if self.ready else []
        if self.all_ready:
            parts.append(f"all {self.all_ready.instances} ready in {_seconds(self.all_ready.text)}")
        return f"{self.label} {', '.join(parts)}"

    def as_json(self) -> dict:
        return {
            "platform": self.label,
            "ready": self.ready.as_json() if self.ready else None,
            "all_ready": self.all_ready.as_json() if self.all_ready else None,
        }


def _seconds(figure: str) -> str:
    """ "11 [0–29] s, floored at 0": the unit after the figure, before what is said of it."""
    value, comma, note = figure.partition(", ")
    return f"{value} s{comma}{note}"


@dataclass(frozen=True)
class Summary:
    """What a run found, as its first screen shows it."""

    run_id: str
    baseline: str | None
    """The baseline's label; None where the study has none (no matrix then)."""
    names: dict[str, str]
    """Every workload's label -> the name the summary gives it (a matrix column's title)."""
    workloads: list[str]
    """The matrix's columns: workload labels."""
    platforms: list[str]
    """The matrix's rows: platform labels, in the run's order."""
    verdicts: list[MatrixCell]
    elsewhere: list[str] = field(default_factory=list)
    """Workloads with no column (no figure against the baseline: host CPU for the same work,
    no baseline): their verdict is in the report."""
    claims: list[JudgedClaim] = field(default_factory=list)
    warnings: WarningCounts = field(default_factory=WarningCounts)
    boots: list[Boot] = field(default_factory=list)
    """Each platform's boot, where the study measures it: absolute times, not a matrix cell."""

    def cell(self, label: str, workload: str) -> MatrixCell | None:
        return next((v for v in self.verdicts if v.label == label and v.workload == workload), None)

    def readings(self) -> list[Reading]:
        """The readings the matrix shows, in ``MARKS``'s order: its legend."""
        seen = {v.reading for v in self.verdicts}
        return [r for r in MARKS if r in seen]

    def claim_counts(self) -> str:
        """ "1 refuted, 2 held" over the claims, the most pressing outcome first."""
        return said(outcomes(self.claims))

    def as_json(self) -> dict:
        return {
            "run": self.run_id,
            "baseline": self.baseline,
            "names": self.names,
            "matrix": [v.as_json() for v in self.verdicts],
            "elsewhere": self.elsewhere,
            "claims": [claims_of.as_json(j) for j in self.claims],
            "warnings": self.warnings.as_json(),
            "boot": [b.as_json() for b in self.boots],
        }


def summarize(a: RunAnalysis) -> Summary:
    """The run's summary: the matrix over every workload with figures against the baseline."""
    names = {w: a.title(w) for w in a.workloads()}
    verdicts: list[MatrixCell] = []
    columns: list[str] = []
    apart = []
    boots = _boots(a)
    timed = {r.cell.workload for r in a.results if r.name == READY} if boots else set()
    """Workloads whose figure is the boot line's: not "no figure against native"."""
    for w in a.workloads() if a.baseline else []:  # no baseline: nothing to set against
        found = {h.platform: judged_cell(a, w, h) for h in headlines(a, w)}
        if not found and not baseline_measured(a, w):
            apart += [] if w in timed else [names[w]]
            continue
        cells = [
            v
            for p in a.platforms
            if p != a.baseline and (v := found.get(p) or unjudged_cell(a, p, w)) is not None
        ]
        columns += [w] if cells else []
        verdicts += cells
    order = {a.label(p): i for i, p in enumerate(a.platforms)}
    rows = sorted({v.label for v in verdicts}, key=order.__getitem__)
    return Summary(
        run_id=a.run_id,
        baseline=a.label(a.baseline) if a.baseline else None,
        names=names,
        workloads=columns,
        platforms=rows,
        verdicts=verdicts,
        elsewhere=apart,
        claims=list(a.claims),
        warnings=WarningCounts.of(a),
        boots=boots,
    )


def _boots(a: RunAnalysis) -> list[Boot]:
    """Per platform with a boot time: to ready at its fewest instances, and all ready at its
    largest storm (more than one instance), in the run's order."""
    ready: dict[str, list[MetricResult]] = {}
    storms: dict[str, list[MetricResult]] = {}
    for r in a.results:
        if r.name in (READY, ALL_READY) and r.single.n and math.isfinite(r.single.mean):
            group = ready if r.name == READY else storms
            group.setdefault(r.cell.platform, []).append(r)
    out = []
    for p in a.platforms:
        first = min(ready.get(p, []), key=lambda r: r.cell.instances, default=None)
        largest = max(storms.get(p, []), key=lambda r: r.cell.instances, default=None)
        storm = largest if largest is not None and largest.cell.instances > 1 else None
        if first is not None or storm is not None:
            out.append(
                Boot(
                    a.label(p),
                    BootFigure.of(a, first) if first is not None else None,
                    BootFigure.of(a, storm) if storm is not None else None,
                )
            )
    return out


def matrix_title(s: Summary) -> str:
    """ "% of native kept (less is worse), 95% intervals, at 1 instance": what the matrix's
    figures are."""
    counts = sorted({v.instances for v in s.verdicts})
    at = "1 instance" if counts == [1] else "each workload's fewest instances"
    other = ", or the figure a column names" if any(v.figure for v in s.verdicts) else ""
    return f"% of {s.baseline} kept (less is worse){other}, 95% intervals, at {at}"


def column_title(s: Summary, workload: str) -> str:
    """A workload's name over its column, with its instance count where that is not 1, and
    its figure where that is not the % of the baseline ("host CPU for the same work")."""
    counts = {v.instances for v in s.verdicts if v.workload == workload}
    name = s.names[workload]
    title = name if counts == {1} else f"{name} ({min(counts)} inst.)"
    what = next((v.figure for v in s.verdicts if v.workload == workload and v.figure), None)
    return f"{title}: {what}" if what else title


def legend(s: Summary) -> str:
    """The marks the matrix shows, each with its meaning; the mark of a bound raised to 0."""
    parts = [f"{MARKS[r]} {MEANINGS[r]}" for r in s.readings()]
    if any(CLIPPED in v.text for v in s.verdicts):
        parts.append(f"{CLIPPED} a bound raised to 0 (the interval reached below it)")
    return " · ".join(parts)


def boot_line(s: Summary) -> str:
    """ "boot to ready, 95% intervals: uml 1.31 [1.28–1.35] s; …": each platform's boot."""
    return f"boot to ready, 95% intervals: {'; '.join(b.text() for b in s.boots)}"


def elsewhere(s: Summary) -> str:
    """ "boot: no figure against native to show": the workloads the matrix leaves out."""
    return f"{', '.join(s.elsewhere)}: no figure against {s.baseline} to show"


def print_summary(console: Console, s: Summary, where: str) -> None:
    """The summary for a terminal: the matrix, its legend, the claims not held, one line
    counting the warnings; ``where``: where to read them in full."""
    if s.verdicts:
        print_wrapped(console, matrix_title(s) + ":")
        for table in _tables(console, s):
            console.print(table)
        console.print(Text(legend(s), style="dim"), soft_wrap=False)
    elif s.baseline is None:
        console.print("no baseline: no figure against one (the report has every value)")
    if s.boots:
        print_wrapped(console, boot_line(s))
    if s.elsewhere:
        print_wrapped(console, f"{elsewhere(s)}; in {where}")
    if s.claims:
        print_wrapped(console, f"claims: {s.claim_counts()}")
        for j in s.claims:
            if j.outcome != HELD:
                print_wrapped(console, f"  {j.line()}", STYLES.get(j.outcome, ""))
    if (line := s.warnings.line()) is not None:
        print_wrapped(console, f"warnings: {line}; in full in {where} and the HTML report")


def print_wrapped(console: Console, line: str, style: str = "") -> None:
    """A line wrapped at the console's width, each of its continuations indented under it."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    for part in textwrap.wrap(line, console.width, subsequent_indent=indent):
        console.print(Text(part, style=style), soft_wrap=True)


GAP = 3
"""Columns apart in the terminal's matrix: a space of padding each side of its blank rule."""


def _tables(console: Console, s: Summary) -> list[RichTable]:
    """The matrix as tables that fit the console: the workloads' columns in order, as many to
    a table as fit with each cell wrapped at its spaces at most (a figure or an interval is
    never cut: "[96.7–98.1…"), the next ones in a table of their own below it."""
    label = max(cell_len(p) for p in s.platforms)
    spans = {w: _span(s, w) for w in s.workloads}
    groups: list[list[str]] = []
    for w in s.workloads:
        if groups and _room(console, label, [spans[x] for x in [*groups[-1], w]]) >= 0:
            groups[-1].append(w)
        else:
            groups.append([w])
    return [_table(s, g, _widths(console, label, g, spans)) for g in groups]


def _span(s: Summary, workload: str) -> tuple[int, int]:
    """A column's narrowest width (its longest word, its title's included, which is never
    cut) and the width its cells take unwrapped (a title wraps rather than a figure)."""
    cells = [_cell(v).plain for v in s.verdicts if v.workload == workload]
    words = [cell_len(w) for text in [column_title(s, workload), *cells] for w in text.split()]
    narrowest = max(words, default=1)
    return narrowest, max([narrowest, *(cell_len(text) for text in cells)])


def _room(console: Console, label: int, spans: list[tuple[int, int]]) -> int:
    """The console's columns left over when each of ``spans`` has its narrowest width."""
    return console.width - label - sum(lo + GAP for lo, _ in spans)


def _widths(
    console: Console, label: int, workloads: list[str], spans: dict[str, tuple[int, int]]
) -> list[int]:
    """Each column's width: its narrowest, then the room left given to those that need least
    of it to be one line, so that as many as may are."""
    room = _room(console, label, [spans[w] for w in workloads])
    widths = {w: spans[w][0] for w in workloads}
    for w in sorted(workloads, key=lambda w: spans[w][1] - spans[w][0]):
        more = max(0, min(room, spans[w][1] - widths[w]))
        widths[w] += more
        room -= more
    return [widths[w] for w in workloads]


def _table(s: Summary, workloads: list[str], widths: list[int]) -> RichTable:
    """The matrix's rows over the columns of ``workloads``, each as wide as ``widths`` says."""
    table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("", no_wrap=True)
    for w, width in zip(workloads, widths, strict=True):
        table.add_column(Text(column_title(s, w)), width=width, overflow="fold")
    for label in s.platforms:
        cells = (s.cell(label, w) for w in workloads)
        table.add_row(Text(label), *(Text() if v is None else _cell(v) for v in cells))
    return table


def _cell(v: MatrixCell) -> Text:
    """ "▼ 8% [7–9%]" in its reading's colour; the reading in a word or two where there is no
    figure; each part of a mixed cell in its own ("▼ in 92.0%, ▲ out 108.0%")."""
    if v.parts:
        text = Text()
        for i, p in enumerate(v.parts):
            text.append(", " if i else "")
            text.append(p.text, style=STYLES.get(p.reading, ""))
        return text
    return Text(f"{v.mark} {v.text or v.reading}", style=STYLES.get(v.reading, ""))
