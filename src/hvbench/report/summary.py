"""A run's answer on one screen: each platform's headline figure against the baseline, workload
by workload (the matrix), the claims' outcomes and the warnings counted by kind.

One model (``Summary``) for every place that shows it, so that they say the same: the end of
``hvbench run`` (``print_summary``: a screen, where the report has every table), the top of the
HTML report (the matrix coloured, then the verdict's sentences) and the data of ``hvbench run
--json`` and of the JSON lines (``Verdict.as_json``). Each cell is the figure the verdict's
sentence states (``analysis.verdict.headlines``), at the workload's smallest instance count.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hvbench.analysis import claims as claims_of
from hvbench.analysis.model import HELD, OUTCOMES, JudgedClaim, RunAnalysis
from hvbench.analysis.normalize import CLIPPED, Normalized, figure
from hvbench.analysis.stats import EQUIVALENT, GAIN, INCONCLUSIVE, LOSS, NOT_TESTED, PRACTICAL
from hvbench.analysis.verdict import headlines
from hvbench.report.tables import SUSPECT, conditions_table, warnings

LEFT_OUT = "left out"
"""A cell with no figure: its samples failed, or no repetition measured all of its metrics."""
NOT_A_WIN = "not a win"
"""A cell whose every headline figure is above the baseline where that cannot be a win (the
host's page cache under a guest's disk, ``MetricResult.suspect``): not judged."""
MARKS = {
    LOSS: "▼",
    GAIN: "▲",
    EQUIVALENT: "=",
    INCONCLUSIVE: "?",
    NOT_TESTED: "·",
    LEFT_OUT: "×",
    NOT_A_WIN: SUSPECT,
}
"""Each reading's mark, in the order the legend names them."""
MEANINGS = {
    LOSS: "loss",
    GAIN: "gain",
    EQUIVALENT: f"no difference (within ±{100 * PRACTICAL:.0f}%)",
    INCONCLUSIVE: "inconclusive",
    NOT_TESTED: "not tested (one repetition, or none the clock tells apart)",
    LEFT_OUT: "left out",
    NOT_A_WIN: "above the baseline, not a win",
}
WARNING_KINDS = {
    "noisy_figures": ("noisy figure", "noisy figures"),
    "noisy_side_figures": ("noisy side figure", "noisy side figures"),
    "other": ("other warning", "other warnings"),
    "host_conditions": (
        "host condition not benchmark-grade",
        "host conditions not benchmark-grade",
    ),
}
"""The kinds of warning the summary counts, each in the singular and the plural: the noisy
headline figures (the report's noise table), the noisy side figures, the other warnings
(failed repetitions, starved instances, composites left out), and the host's conditions."""
STYLES = {LOSS: "red", GAIN: "green", INCONCLUSIVE: "yellow", NOT_TESTED: "dim", LEFT_OUT: "dim"}
"""The terminal's colours of a reading; the HTML's are its stylesheet's ``v-`` classes."""


@dataclass(frozen=True)
class Verdict:
    """One cell of the matrix: a platform's headline figure of a workload against the
    baseline, with its 95% interval and what it reads as."""

    platform: str
    label: str
    workload: str
    instances: int
    reading: str
    """loss, gain, no significant difference, inconclusive, not tested, left out, not a win."""
    text: str
    """As printed: "84% [79–90%]"; a figure that can be below 0 as its difference in its
    unit ("+3.0 MiB [+1.2–+4.8 MiB]"); "" where there is none."""
    pct: float | None = None
    low: float | None = None
    high: float | None = None
    """% of the baseline and its interval (None: not computed, unbounded, or a difference)."""
    why: str = ""
    """Why it is not a loss or a gain, in words (left out, not tested, inconclusive)."""

    @property
    def mark(self) -> str:
        return MARKS[self.reading]

    def as_json(self) -> dict:
        """The cell as data: what ``hvbench run --json`` and the JSON lines give."""
        return {
            "platform": self.platform,
            "label": self.label,
            "workload": self.workload,
            "instances": self.instances,
            "reading": self.reading,
            "pct_of_baseline": self.pct,
            "ci_low": self.low,
            "ci_high": self.high,
            "text": self.text,
            "why": self.why or None,
        }


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
    verdicts: list[Verdict]
    elsewhere: list[str] = field(default_factory=list)
    """Workloads with no column (no figure against the baseline: host CPU for the same work,
    no baseline): their verdict is in the report."""
    claims: list[JudgedClaim] = field(default_factory=list)
    warnings: dict[str, int] = field(default_factory=dict)
    """How many warnings of each kind (``WARNING_KINDS``), the kinds with none left out."""

    def cell(self, label: str, workload: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.label == label and v.workload == workload), None)

    def readings(self) -> list[str]:
        """The readings the matrix shows, in ``MARKS``'s order: its legend."""
        seen = {v.reading for v in self.verdicts}
        return [r for r in MARKS if r in seen]

    def claim_counts(self) -> str:
        """ "1 refuted, 2 held" over the claims, the most pressing outcome first."""
        counts = [(o, sum(j.outcome == o for j in self.claims)) for o in OUTCOMES]
        return ", ".join(f"{n} {o}" for o, n in counts if n)

    def warnings_line(self) -> str | None:
        """ "16 noisy figures, 1 other warning, 3 host conditions not benchmark-grade"."""
        words = (f"{n} {WARNING_KINDS[kind][n != 1]}" for kind, n in self.warnings.items())
        return ", ".join(words) or None

    def as_json(self) -> dict:
        return {
            "run": self.run_id,
            "baseline": self.baseline,
            "names": self.names,
            "matrix": [v.as_json() for v in self.verdicts],
            "elsewhere": self.elsewhere,
            "claims": [claims_of.as_json(j) for j in self.claims],
            "warnings": self.warnings,
        }


def _verdict(a: RunAnalysis, platform: str, workload: str, v: Normalized | None) -> Verdict:
    """A cell from the verdict's figure (None: left out)."""
    count = min(a.counts(workload))
    if v is None:
        return Verdict(platform, a.label(platform), workload, count, LEFT_OUT, "")
    est, interval = figure(v, "pct", "%")

    def bound(x: float) -> float | None:
        return x if math.isfinite(x) and not v.signed else None

    return Verdict(
        platform,
        a.label(platform),
        workload,
        count,
        v.reading(),
        f"{est} {interval}".rstrip(),
        bound(v.pct_of_native),
        bound(v.pct_low),
        bound(v.pct_high),
        v.describe(),
    )


def _unjudged(a: RunAnalysis, platform: str, workload: str) -> Verdict | None:
    """The cell of a platform that ran a workload the baseline has figures of, but that has
    no figure of its own in the verdict: its headline figures are all above the baseline where
    that cannot be a win (``MetricResult.suspect``), or it measured none (its samples failed:
    the warnings say why). None where it did not run the workload."""
    count = min(a.counts(workload))
    if not any(c.platform == platform and c.workload == workload for c in a.cells):
        return None
    rs = [
        r
        for r in a.results
        if r.cell.platform == platform
        and r.cell.workload == workload
        and r.cell.instances == count
        and r.headline
    ]
    label = a.label(platform)
    if rs and all(r.suspect for r in rs):
        return Verdict(platform, label, workload, count, NOT_A_WIN, "", why=MEANINGS[NOT_A_WIN])
    why = "no headline figure measured (the warnings say why)"
    return Verdict(platform, label, workload, count, LEFT_OUT, "", why=why)


def _baseline_measured(a: RunAnalysis, workload: str) -> bool:
    """Whether the baseline has a headline figure of a workload: what a platform's cell is set
    against (native has none of boot)."""
    count = min(a.counts(workload))
    return any(
        r.cell.platform == a.baseline
        and r.cell.workload == workload
        and r.cell.instances == count
        and r.headline
        for r in a.results
    )


def _warning_kinds(a: RunAnalysis) -> dict[str, int]:
    found = warnings(a)
    conditions = conditions_table(a)
    kinds = {
        "noisy_figures": len(found.noise.rows) if found.noise else 0,
        "noisy_side_figures": a.noisy_side,
        "other": len(a.warnings),
        "host_conditions": len(conditions.rows) if conditions else 0,
    }
    return {kind: n for kind, n in kinds.items() if n}


def summarize(a: RunAnalysis) -> Summary:
    """The run's summary: the matrix over every workload with figures against the baseline."""
    names = {w: a.title(w) for w in a.workloads()}
    verdicts: list[Verdict] = []
    columns: list[str] = []
    apart = []
    for w in a.workloads() if a.baseline else []:  # no baseline: nothing to set against
        found = {h.platform: _verdict(a, h.platform, w, h.figure) for h in headlines(a, w)}
        if not found and not _baseline_measured(a, w):
            apart.append(names[w])
            continue
        cells = [
            v
            for p in a.platforms
            if p != a.baseline and (v := found.get(p) or _unjudged(a, p, w)) is not None
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
        warnings=_warning_kinds(a),
    )


def matrix_title(s: Summary) -> str:
    """ "% of native kept (less is worse), 95% intervals, at 1 instance": what the matrix's
    figures are."""
    counts = sorted({v.instances for v in s.verdicts})
    at = "1 instance" if counts == [1] else "each workload's fewest instances"
    return f"% of {s.baseline} kept (less is worse), 95% intervals, at {at}"


def column_title(s: Summary, workload: str) -> str:
    """A workload's name over its column, with its instance count where that is not 1."""
    counts = {v.instances for v in s.verdicts if v.workload == workload}
    name = s.names[workload]
    return name if counts == {1} else f"{name} ({min(counts)} inst.)"


def legend(s: Summary) -> str:
    """The marks the matrix shows, each with its meaning; the mark of a bound raised to 0."""
    parts = [f"{MARKS[r]} {MEANINGS[r]}" for r in s.readings()]
    if any(CLIPPED in v.text for v in s.verdicts):
        parts.append(f"{CLIPPED} a bound raised to 0 (the interval reached below it)")
    return " · ".join(parts)


def elsewhere(s: Summary) -> str:
    """ "boot: no figure against native to show": the workloads the matrix leaves out."""
    return f"{', '.join(s.elsewhere)}: no figure against {s.baseline} to show"


def print_summary(console: Console, s: Summary, where: str) -> None:
    """The summary for a terminal: the matrix, its legend, the claims not held, one line
    counting the warnings; ``where``: where to read them in full."""
    if s.verdicts:
        console.print(Text(matrix_title(s) + ":"), soft_wrap=True)
        table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("", no_wrap=True)
        for w in s.workloads:
            table.add_column(Text(column_title(s, w)))
        for label in s.platforms:
            cells = (s.cell(label, w) for w in s.workloads)
            table.add_row(Text(label), *(Text() if v is None else _cell(v) for v in cells))
        console.print(table)
        console.print(Text(legend(s), style="dim"), soft_wrap=False)
    elif s.baseline is None:
        console.print("no baseline: no figure against one (the report has every value)")
    if s.elsewhere:
        print_wrapped(console, f"{elsewhere(s)}; in {where}")
    if s.claims:
        print_wrapped(console, f"claims: {s.claim_counts()}")
        for j in s.claims:
            if j.outcome != HELD:
                print_wrapped(console, f"  {j.line()}", STYLES.get(j.outcome, ""))
    if (line := s.warnings_line()) is not None:
        print_wrapped(console, f"warnings: {line}; in full in {where} and the HTML report")


def print_wrapped(console: Console, line: str, style: str = "") -> None:
    """A line wrapped at the console's width, each of its continuations indented under it."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    for part in textwrap.wrap(line, console.width, subsequent_indent=indent):
        console.print(Text(part, style=style), soft_wrap=True)


def _cell(v: Verdict) -> Text:
    """ "▼ 8% [7–9%]" in its reading's colour; the reading in a word or two where there is no
    figure."""
    return Text(f"{v.mark} {v.text or v.reading}", style=STYLES.get(v.reading, ""))
