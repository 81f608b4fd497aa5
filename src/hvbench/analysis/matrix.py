"""The matrix of a run's answer: each platform's headline figure of each workload against the
baseline (a cell), judged, with what it reads as (``Reading``) and its mark; the cells of
platforms the verdict has no figure of (left out, not a win); whether the baseline measured a
workload at all. ``report.summary`` lays the cells out; this says what each holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from hvbench.analysis.model import OUTCOMES, JudgedClaim, RunAnalysis
from hvbench.analysis.normalize import Normalized, apart, figure
from hvbench.analysis.readings import Reading
from hvbench.analysis.stats import PRACTICAL
from hvbench.analysis.verdict import SAME_WORK, Headline

SUSPECT = "§"
"""Marks a figure above the baseline that cannot be a win (``MetricResult.suspect``)."""
MARKS = {
    Reading.LOSS: "▼",
    Reading.SMALL_LOSS: "▽",
    Reading.GAIN: "▲",
    Reading.SMALL_GAIN: "△",
    Reading.MIXED: "▼▲",
    Reading.EQUIVALENT: "=",
    Reading.INCONCLUSIVE: "?",
    Reading.NOT_TESTED: "·",
    Reading.LEFT_OUT: "×",
    Reading.NOT_A_WIN: SUSPECT,
}
"""Each reading's mark, in the order the legend names them."""
MEANINGS = {
    Reading.LOSS: "loss",
    Reading.SMALL_LOSS: f"a real loss, smaller than {100 * PRACTICAL:.0f}%",
    Reading.GAIN: "gain",
    Reading.SMALL_GAIN: f"a real gain, smaller than {100 * PRACTICAL:.0f}%",
    Reading.MIXED: "a loss in one headline figure, a gain in another (each shown)",
    Reading.EQUIVALENT: f"no difference (within ±{100 * PRACTICAL:.0f}%)",
    Reading.INCONCLUSIVE: "inconclusive",
    Reading.NOT_TESTED: "not tested (one repetition, or none the clock tells apart)",
    Reading.LEFT_OUT: "left out",
    Reading.NOT_A_WIN: "above the baseline, not a win",
}
"""Each reading in words, as the legend says it (and a cell not judged says why)."""


@dataclass(frozen=True)
class MatrixCell:
    """One cell of the matrix: a platform's headline figure of a workload against the
    baseline, with its 95% interval and what it reads as."""

    platform: str
    label: str
    workload: str
    instances: int
    reading: Reading
    text: str
    """As printed: "84% [79–90%]"; a figure that can be below 0 as its difference in its
    unit ("+3.0 MiB [+1.2–+4.8 MiB]"), or where it differs, its distance and side ("25.0 MiB
    [24.0–26.0 MiB] below"); "" where there is none."""
    pct: float | None = None
    low: float | None = None
    high: float | None = None
    """% of the baseline and its interval (None: not computed, unbounded, or a difference)."""
    why: str = ""
    """Why it is not a loss or a gain, in words (left out, not tested, inconclusive)."""
    parts: tuple[Part, ...] = ()
    """Each headline figure of a mixed cell (``Reading.MIXED``), which ``text`` shows marked."""
    figure: str = ""
    """What the figure is where it is not the headline metrics' % of the baseline: "host CPU
    for the same work, × native's" (consolidation)."""
    slos: dict[str, int] = field(default_factory=dict)
    """How many of the platform's SLOs came out each way (``OUTCOMES``), where it has any."""

    @property
    def mark(self) -> str:
        """The reading's mark; none for a mixed cell, whose text marks each of its parts."""
        return "" if self.parts else MARKS[self.reading]

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
            "parts": [p._asdict() for p in self.parts],
            "figure": self.figure or None,
            "slos": self.slos,
        }


class Part(NamedTuple):
    """One headline figure of a mixed cell: "in", its reading and % of the baseline."""

    name: str
    reading: Reading
    pct_of_baseline: float | None
    ci_low: float | None
    ci_high: float | None
    text: str
    """As printed: "▼ in 92.0%"."""


def judged_cell(a: RunAnalysis, workload: str, h: Headline) -> MatrixCell:
    """A cell from the verdict's figure (None: left out, and why)."""
    count, platform, v = min(a.counts(workload)), h.platform, h.figure
    if h.same_work:
        return _same_work(a, workload, h)
    if v is None:
        return MatrixCell(
            platform, a.label(platform), workload, count, Reading.LEFT_OUT, "", why=h.why or ""
        )
    if h.parts:
        parts = tuple(_part(p.name, p.figure) for p in h.parts)
        text = ", ".join(p.text for p in parts)
        return MatrixCell(
            platform, a.label(platform), workload, count, Reading.MIXED, text, parts=parts
        )
    est, interval = figure(v, "pct", "%")
    distance = apart(v)  # a signed figure that differs: "25.0 MiB [24.0–26.0 MiB] below"

    def bound(x: float) -> float | None:
        return x if math.isfinite(x) and not v.signed else None

    return MatrixCell(
        platform,
        a.label(platform),
        workload,
        count,
        v.reading(),
        " ".join(distance) if distance else f"{est} {interval}".rstrip(),
        bound(v.pct_of_native),
        bound(v.pct_low),
        bound(v.pct_high),
        v.describe(),
    )


def outcomes(claims: list[JudgedClaim]) -> dict[str, int]:
    """How many claims came out each way, the most pressing outcome first (``OUTCOMES``)."""
    return {o: n for o in OUTCOMES if (n := sum(j.outcome == o for j in claims))}


def said(counts: dict[str, int]) -> str:
    """ "1 refuted, 2 held"."""
    return ", ".join(f"{n} {o}" for o, n in counts.items())


def _part(name: str, v: Normalized) -> Part:
    """ "▼ in 92.0%": one figure of a mixed cell, marked with its own reading."""
    what = v.reading()
    text = f"{MARKS[what]} {name} {figure(v, 'pct', '%').estimate}"
    return Part(name, what, finite(v.pct_of_native), finite(v.pct_low), finite(v.pct_high), text)


def finite(x: float) -> float | None:
    """A bound as data: None where it is unbounded or not computed."""
    return x if math.isfinite(x) else None


def _same_work(a: RunAnalysis, workload: str, h: Headline) -> MatrixCell:
    """The cell of a workload of fixed-rate clients: the host CPU for the same work as a
    multiple of the baseline's, "1.1× [0.5–2.6×]", as its sentence says it, then how its SLOs
    came out ("SLOs: 1 refuted, 3 held"); left out where it has none (``h.why``)."""
    mine = [
        j for j in a.claims if j.claim.slo and (j.workload, j.platform) == (workload, h.platform)
    ]
    counts, v = outcomes(mine), h.figure
    base = a.label(a.baseline) if a.baseline else ""
    cell = MatrixCell(
        h.platform,
        a.label(h.platform),
        workload,
        min(a.counts(workload)),
        Reading.LEFT_OUT,
        "",
        why=h.why or "",
        figure=f"{SAME_WORK}, × {base}'s",
        slos=counts,
    )
    if v is None:
        return cell
    text = " ".join(x for x in figure(v, "ratio", "×") if x)
    text += f", SLOs: {said(counts)}" if counts else ""
    return replace(
        cell,
        reading=v.reading(),
        text=text,
        pct=finite(v.pct_of_native),
        low=finite(v.pct_low),
        high=finite(v.pct_high),
        why=v.describe(),
    )


def unjudged_cell(a: RunAnalysis, platform: str, workload: str) -> MatrixCell | None:
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
        return MatrixCell(
            platform, label, workload, count, Reading.NOT_A_WIN, "", why=MEANINGS[Reading.NOT_A_WIN]
        )
    why = "no headline figure measured (the warnings say why)"
    return MatrixCell(platform, label, workload, count, Reading.LEFT_OUT, "", why=why)


def baseline_measured(a: RunAnalysis, workload: str) -> bool:
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
