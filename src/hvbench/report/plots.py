"""The HTML report's figures as inline SVG (matplotlib's SVG backend, no pyplot state).

Figures are deterministic (fixed ``svg.hashsalt``, no date) so that the same run gives the
same file; text stays text (``svg.fonttype: none``) and is never parsed as mathtext, since
names come from studies and guests.

Every figure is drawn as wide as the report's column (``PAGE_IN``) and shown at that width, so
that its text has the size it was laid out for and no figure is left in a corner of the page.
Margins are set in inches from what they hold, estimated from the text's length rather than
measured by a layout engine (which would draw every figure twice): the legend in a column of
its own right of the axes, as wide as its longest entry, never over a title; tick labels
wrapped to the room each tick has, or turned until they clear each other; a label shared by a
group of bars (the workload, whose name can be long: consolidation's) once under its group.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple, TypeVar

import matplotlib
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import RcKeyType
from numpy.typing import ArrayLike

from hvbench.analysis.cost import HOST_STATES
from hvbench.analysis.intervals import SampleSummary
from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.normalize import signed
from hvbench.analysis.verdict import scaling_series

FONT_PT = 9
LEGEND_PT = 8
RC: dict[RcKeyType, object] = {
    "svg.hashsalt": "hvbench",
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": FONT_PT,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
}
COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"]
STATE_COLORS = dict(zip(HOST_STATES, COLORS, strict=False))
_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
PAGE_IN = 12.0
"""The report's column (1250 px less its padding: 1186 px, 12.35 in at 96 px to the inch)."""
LEFT_IN = 0.8
CHAR_EM = 0.62
"""A character's mean width in DejaVu Sans, in ems, rounded up: what sizes margins."""
LINE_EM = 1.25


def text_in(chars: int, size_pt: float = FONT_PT) -> float:
    """Width in inches of ``chars`` characters of text."""
    return chars * CHAR_EM * size_pt / 72


def lines_in(lines: int, size_pt: float = FONT_PT) -> float:
    """Height in inches of ``lines`` lines of text."""
    return lines * LINE_EM * size_pt / 72


def wrap(text: str, width_in: float, max_lines: int = 3, size_pt: float = FONT_PT) -> str:
    """``text`` wrapped to ``width_in`` (at spaces, else anywhere), at most ``max_lines`` lines,
    the last cut with "…" where more would be needed."""
    chars = max(3, int(width_in / text_in(1, size_pt)))
    lines = [
        part
        for line in text.splitlines() or [""]
        for part in textwrap.wrap(line, chars, break_long_words=True) or [""]
    ]
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: chars - 1].rstrip() + "…"
    return "\n".join(lines)


def _longest(texts: Sequence[str]) -> int:
    return max((len(line) for t in texts for line in t.splitlines()), default=0)


@contextmanager
def _figure(
    height: float, legend: Sequence[str] = (), bottom_in: float = 0.75, width: float = PAGE_IN
) -> Iterator[tuple[Figure, list[str]]]:
    """A figure whose SVG text is appended to the yielded list on exit, with room right of
    the axes for a legend of entries ``legend`` (``_legend`` puts it there)."""
    out: list[str] = []
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height))
        fig.subplots_adjust(
            left=LEFT_IN / width,
            right=1 - _legend_in(legend) / width,
            bottom=bottom_in / height,
            top=1 - 0.4 / height,
            wspace=0.25,
        )
        yield fig, out
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    out.append(_PROLOGUE.sub("", buf.getvalue(), count=1))


def _legend_in(legend: Sequence[str]) -> float:
    """The right margin: a legend's column (its handles and longest entry), or a little."""
    return 0.3 + 0.35 + text_in(_longest(legend), LEGEND_PT) if legend else 0.3


def _axes_in(legend: Sequence[str], width: float = PAGE_IN) -> float:
    """Width in inches of the axes of a figure ``width`` wide with that legend."""
    return width - LEFT_IN - _legend_in(legend)


def _legend(fig: Figure, ax: Axes, extra: Sequence[tuple[Artist, str]] = ()) -> None:
    """The legend of one axes, and ``extra`` (handle, text) entries, in the figure's right
    margin, its top level with the axes' top (below any title)."""
    handles, labels = ax.get_legend_handles_labels()
    handles += [h for h, _ in extra]
    labels += [t for _, t in extra]
    p = fig.subplotpars
    fig.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(p.right + 0.1 / fig.get_figwidth(), p.top),
        borderaxespad=0,
        fontsize=LEGEND_PT,
        frameon=False,
    )


def _ticks(labels: Sequence[str], slot_in: float) -> tuple[int, float]:
    """Rotation (degrees) that keeps tick labels ``slot_in`` apart from overprinting each
    other, and the height in inches they then take below the axes."""
    length = text_in(_longest(labels))
    height = lines_in(max((t.count("\n") + 1 for t in labels), default=1))
    if length <= 0.9 * slot_in:
        return 0, height
    for angle in (30, 60, 90):
        if slot_in * math.sin(math.radians(angle)) >= 1.2 * height:
            break
    return angle, length * math.sin(math.radians(angle)) + height


def _grouped_axis(ax: Axes, x: np.ndarray, ticks: Ticks, groups: list[tuple[str, int]]) -> None:
    """Ticks at ``x`` labelled ``ticks``, and under them each group's label (text, how many
    ticks it spans, in order) once, centred on its ticks, with a rule between groups."""
    _set_ticks(ax, x, ticks)
    start = 0
    step = float(x[1] - x[0]) if len(x) > 1 else 1.0
    for k, (text, count) in enumerate(groups):
        xs = x[start : start + count]
        ax.annotate(
            text,
            xy=(float(xs.mean()), 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -(8 + 72 * ticks.height + 4)),
            textcoords="offset points",
            ha="center",
            va="top",
            annotation_clip=False,
        )
        if k:
            ax.axvline(float(xs[0]) - step / 2, color="#999999", linewidth=0.6)
        start += count


class Ticks(NamedTuple):
    """Tick labels as drawn: wrapped at spaces where that fits, else turned."""

    labels: list[str]
    angle: int
    height: float
    """Inches they take below the axes."""


def ticks(labels: Sequence[str], slot_in: float) -> Ticks:
    """Labels for ticks ``slot_in`` apart: wrapped at spaces into at most two lines where each
    line fits its slot, else turned as far as they must be (``_ticks``)."""
    chars = int(0.9 * slot_in / text_in(1))
    wrapped = [textwrap.wrap(t, max(chars, 1), break_long_words=False) or [""] for t in labels]
    if all(len(w) <= 2 and max(map(len, w)) <= chars for w in wrapped):
        lines = max(len(w) for w in wrapped)
        return Ticks(["\n".join(w) for w in wrapped], 0, lines_in(lines))
    angle, height = _ticks(labels, slot_in)
    return Ticks(list(labels), angle, height)


def _set_ticks(ax: Axes, x: ArrayLike, t: Ticks) -> None:
    ax.set_xticks(x, t.labels)
    if t.angle:
        ax.tick_params(axis="x", labelrotation=t.angle)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")


Item = TypeVar("Item")


def _grouped(
    items: list[Item],
    group_of: Callable[[Item], str],
    tick_of: Callable[[Item], str],
    axes_in: float,
    gap: float = 0.6,
) -> tuple[np.ndarray, Ticks, list[tuple[str, int]], float]:
    """Positions, tick labels, wrapped group labels and the height in inches all of them
    take below the axes, for ``items`` grouped (in order of first appearance) by
    ``group_of``; a gap of ``gap`` slots between groups."""
    order: dict[str, list[Item]] = {}
    for it in items:
        order.setdefault(group_of(it), []).append(it)
    slots = len(items) + gap * (len(order) - 1)
    slot_in = axes_in / max(slots, 1)
    x, labels, groups = [], [], []
    pos = 0.0
    for name, members in order.items():
        # its slots and the gap beside it: group labels never reach into each other
        group_in = 0.95 * slot_in * (len(members) + gap)
        groups.append((wrap(name, group_in, max_lines=3), len(members)))
        for it in members:
            x.append(pos)
            labels.append(tick_of(it))
            pos += 1
        pos += gap
    t = ticks(labels, slot_in)
    group_lines = max((g.count("\n") + 1 for g, _ in groups), default=1)
    below = 0.15 + t.height + 0.1 + lines_in(group_lines) + 0.15
    return np.array(x), t, groups, below


def _whiskers(s: SampleSummary, scale: float, floor: float | None = 0.0) -> tuple[float, float]:
    """Distances below and above the mean (times ``scale``) for error bars; 0 without a CI.
    The lower one stops at ``floor``, what the quantity can take (a time, a throughput, a
    count: 0; None for a figure that can be below 0), wherever the interval reaches."""
    if s.n < 2 or not math.isfinite(s.ci_low):
        return 0.0, 0.0
    low = s.ci_low if floor is None else max(s.ci_low, min(floor, s.mean))
    return (s.mean - low) * scale, (s.ci_high - s.mean) * scale


def _relative(r: MetricResult, relative: bool) -> tuple[float, float, float, str] | None:
    """Height, whiskers and a label of a bar. Against the baseline: % of it with the 95%
    interval of the ratio of means (Fieller's, holding the baseline's noise too), labelled
    where there is no finite interval; None without a figure against the baseline. Without a
    baseline: the raw mean and its own interval."""
    if not relative:
        floor = None if signed(r.name, r.single_values) else 0.0
        lo, hi = _whiskers(r.single, 1.0, floor)
        return r.single.mean, lo, hi, ""
    v = r.vs_baseline
    if v is None or not math.isfinite(v.pct_of_native):
        return None
    if v.reference:
        return v.pct_of_native, 0.0, 0.0, ""
    if not v.tested:
        n = min(v.n, v.n_baseline)
        return v.pct_of_native, 0.0, 0.0, "no spread" if n >= 2 and v.unresolved else f"n={n}"
    if not (math.isfinite(v.pct_low) and math.isfinite(v.pct_high)):
        return v.pct_of_native, 0.0, 0.0, "unbounded"
    return v.pct_of_native, v.pct_of_native - v.pct_low, v.pct_high - v.pct_of_native, ""


def _by_unit(a: RunAnalysis, workload: str, count: int, names: list[str]) -> dict[str, list[str]]:
    """Metric names grouped by their unit, in order of first appearance: one axes each, so
    that no axis holds figures of two units."""
    out: dict[str, list[str]] = {}
    for n in names:
        r = next(r for p in a.platforms if (r := a.result(p, workload, n, count)) is not None)
        out.setdefault(r.unit, []).append(n)
    return out


def bars(a: RunAnalysis, workload: str, count: int) -> str | None:
    """Grouped bars: one group per headline metric, one bar per platform, 95% CI whiskers (of
    the ratio to the baseline where there is one); hatched where a figure above the baseline
    cannot be a win (``MetricResult.suspect``). Without a baseline the raw means, one axes a
    unit, each axis labelled with its unit."""
    names = [
        n
        for n in a.metric_names(workload)
        if any((r := a.result(p, workload, n, count)) and r.headline for p in a.platforms)
    ]
    platforms = [p for p in a.platforms if any(a.result(p, workload, n, count) for n in names)]
    if not platforms or not names:
        return None
    relative = a.baseline is not None and a.baseline in platforms
    groups = {f"% of {a.baseline}": names} if relative else _by_unit(a, workload, count, names)
    suspect = any(
        (r := a.result(p, workload, n, count)) is not None and r.suspect
        for p in platforms
        for n in names
    )
    hatched_label = "not a win\n(see tables)"
    legend = [a.label(p) for p in platforms] + ([hatched_label] if suspect else [])
    width = max(PAGE_IN, LEFT_IN + _legend_in(legend) + 0.25 * len(names) * len(platforms))
    axes_in = _axes_in(legend, width)
    labels = {
        unit: ticks([n.split(".", 1)[-1] for n in group], axes_in / len(names))
        for unit, group in groups.items()
    }
    below = max(t.height for t in labels.values())
    bar = 0.8 / len(platforms)
    with _figure(2.6 + below, legend, bottom_in=0.35 + below, width=width) as (fig, out):
        axes = fig.subplots(
            1, len(groups), squeeze=False, width_ratios=[len(g) for g in groups.values()]
        )[0]
        # legend entries of their own: a hatched first bar would hatch its platform's entry
        entries: list[tuple[Artist, str]] = []
        for i, p in enumerate(platforms):
            color = COLORS[i % len(COLORS)]
            for ax, group in zip(axes, groups.values(), strict=True):
                xs, hs, hatches = [], [], []
                errs: list[list[float]] = [[], []]
                for j, n in enumerate(group):
                    r = a.result(p, workload, n, count)
                    if r is None or (bar_of := _relative(r, relative)) is None:
                        continue
                    h, lo, hi, text = bar_of
                    xs.append(j + (i - (len(platforms) - 1) / 2) * bar)
                    hs.append(h)
                    errs[0].append(lo)
                    errs[1].append(hi)
                    hatches.append("///" if r.suspect else "")
                    if text:
                        ax.annotate(text, (xs[-1], h), ha="center", va="bottom", fontsize=6)
                drawn = ax.bar(xs, hs, bar, yerr=errs, capsize=2, color=color)
                for patch, hatch in zip(drawn.patches, hatches, strict=True):
                    patch.set_hatch(hatch)
            entries.append((Patch(color=color), a.label(p)))
        for ax, (unit, group) in zip(axes, groups.items(), strict=True):
            _set_ticks(ax, range(len(group)), labels[unit])
            ax.set_ylabel(unit if relative else f"mean ({unit})" if unit else "mean")
            if relative:
                ax.axhline(100, color="black", linewidth=0.8)
        title = f"{workload}, {count} instance{'s' if count > 1 else ''}"
        axes[0].set_title(wrap(title, axes_in * len(groups[next(iter(groups))]) / len(names), 2))
        if suspect:
            hatched = Patch(facecolor="white", edgecolor="black", hatch="///")
            entries.append((hatched, hatched_label))
        _legend(fig, axes[0], entries)
    return out[0]


def scaling(a: RunAnalysis, workload: str) -> str | None:
    """Aggregate and per-instance throughput against the instance count, per platform, of the
    metric the verdict's scaling line reads (``scaling_series``)."""
    series = scaling_series(a, workload)
    if not any(len(rs) > 1 for rs in series.values()):
        return None
    first = next(iter(series.values()))[0]
    name, unit = first.name, first.unit
    legend = [a.label(p) for p in series]
    half_in = _axes_in(legend) / 2.25  # two axes, 0.25 of one between them
    with _figure(3.2, legend, bottom_in=0.55) as (fig, out):
        agg_ax, one_ax = fig.subplots(1, 2)
        for i, (p, rs) in enumerate(series.items()):
            color = COLORS[i % len(COLORS)]
            counts = [r.cell.instances for r in rs]
            for ax, pick in ((agg_ax, "aggregate"), (one_ax, "single")):
                summaries = [getattr(r, pick) for r in rs]
                err = np.array([_whiskers(s, 1.0) for s in summaries]).T
                ax.errorbar(
                    counts,
                    [s.mean for s in summaries],
                    yerr=err,
                    marker="o",
                    capsize=2,
                    color=color,
                    label=a.label(p),
                )
                over = [
                    (c, s.mean)
                    for c, s, r in zip(counts, summaries, rs, strict=True)
                    if r.overcommit
                ]
                if over:
                    ax.scatter(*zip(*over, strict=True), s=80, facecolors="none", edgecolors=color)
        agg_ax.set_title(wrap(f"{name}: aggregate", half_in, 2))
        one_ax.set_title("per instance")
        counts = sorted({r.cell.instances for rs in series.values() for r in rs})
        for ax in (agg_ax, one_ax):
            ax.set_xticks(counts)
            ax.set_xlabel("instances (ringed: overcommitted)")
            ax.set_ylabel(unit)
            ax.set_ylim(bottom=0)
        _legend(fig, agg_ax)
    return out[0]


def symmetry(a: RunAnalysis) -> str | None:
    """Inbound and outbound bars side by side, per platform (smallest instance count), the
    platforms of each workload together under its name."""
    if not a.symmetry:
        return None
    first = min(s.cell.instances for s in a.symmetry)
    pairs = sorted(
        (s for s in a.symmetry if s.cell.instances == first),
        key=lambda s: a.workloads().index(s.cell.workload),
    )
    legend = ["inbound", "outbound"]
    x, labels, groups, below = _grouped(
        pairs, lambda s: s.cell.workload, lambda s: a.label(s.cell.platform), _axes_in(legend)
    )
    with _figure(2.8 + below, legend, bottom_in=0.1 + below) as (fig, out):
        ax = fig.add_subplot()
        for k, (direction, color) in enumerate((("inbound", COLORS[0]), ("outbound", COLORS[1]))):
            summaries = [getattr(s, direction).single for s in pairs]
            err = np.array([_whiskers(s, 1.0) for s in summaries]).T
            ax.bar(
                x + (k - 0.5) * 0.38,
                [s.mean for s in summaries],
                0.38,
                yerr=err,
                capsize=2,
                color=color,
                label=direction,
            )
        for i, s in enumerate(pairs):
            if s.asymmetric:
                top = max(s.inbound.single.mean, s.outbound.single.mean)
                ax.annotate(f"−{100 * s.gap:.0f}%", (x[i], top), ha="center", va="bottom")
        _grouped_axis(ax, x, labels, groups)
        ax.set_ylabel(pairs[0].inbound.unit)
        ax.set_title(f"inbound vs outbound, {first} instance{'s' if first > 1 else ''}")
        _legend(fig, ax)
    return out[0]


def host_cpu(a: RunAnalysis) -> str | None:
    """Host CPU split stacked per platform, for each workload at its smallest count, the
    platforms of each workload together under its name."""
    cells = []
    for w in a.workloads():
        count = min(a.counts(w))
        cells += [
            c for c in a.cells if c.workload == w and c.instances == count and c.id in a.host_cpu
        ]
    if not cells:
        return None
    states = [s for s in HOST_STATES if any(a.host_cpu[c.id].states.get(s, 0.0) for c in cells)]
    x, labels, groups, below = _grouped(
        cells, lambda c: c.workload, lambda c: a.label(c.platform), _axes_in(states)
    )
    with _figure(3.0 + below, states, bottom_in=0.1 + below) as (fig, out):
        ax = fig.add_subplot()
        bottom = np.zeros(len(cells))
        for state in states:
            values = np.array([100 * a.host_cpu[c.id].states.get(state, 0.0) for c in cells])
            ax.bar(x, values, 0.6, bottom=bottom, label=state, color=STATE_COLORS[state])
            bottom += values
        _grouped_axis(ax, x, labels, groups)
        ax.set_ylabel("% of all host cores")
        ax.set_title("host CPU during the measurement")
        _legend(fig, ax)
    return out[0]


class TrendLine(NamedTuple):
    """One platform's run means over a history (``trend``)."""

    label: str
    x: np.ndarray
    """Each run's place in the history."""
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    """95% interval of each run's mean (NaN with one repetition: no band there)."""
    changes: Sequence[tuple[float, str]]
    """(x between the runs either side, link to what is said of it) of each change point."""


MARKERS_UP_TO = 60
"""Runs up to which each run's mean is a dot as well (beyond, dots would only blur the line)."""


def trend(
    title: str,
    unit: str,
    lines: Sequence[TrendLine],
    places: dict[float, str],
    room: Sequence[str] = (),
) -> str:
    """A figure's run means across a history, a line per platform with its interval as a band
    and each change point a dashed rule in the line's colour, linked (``set_url``: an SVG link)
    to what the page says of it; ``places`` labels some places of the x axis. The legend's
    column is as wide as for the entries ``room`` as well, so that the figures of one page,
    given the same, have their axes one above the other; a line's colour is that of its label's
    place among them, so that a platform keeps its colour from figure to figure."""
    marked = any(line.changes for line in lines)
    legend = [line.label for line in lines] + (["change point"] if marked else [])
    legend_room = [*legend, *room]
    axes_in = _axes_in(legend_room)
    labels = ticks(list(places.values()), axes_in / max(len(places), 1))
    below = labels.height
    with _figure(2.6 + below, legend_room, bottom_in=0.35 + below) as (fig, out):
        ax = fig.add_subplot()
        order = list(dict.fromkeys([*room, *(line.label for line in lines)]))
        for line in lines:
            color = COLORS[order.index(line.label) % len(COLORS)]
            ax.fill_between(line.x, line.low, line.high, color=color, alpha=0.2, linewidth=0)
            dots = len(line.x) <= MARKERS_UP_TO
            ax.plot(
                line.x,
                line.mean,
                color=color,
                linewidth=1.2,
                marker="o" if dots else None,
                markersize=3,
                label=line.label,
            )
            for x, url in line.changes:
                rule = ax.axvline(x, color=color, linestyle="--", linewidth=1.4)
                rule.set_url(url)
        _set_ticks(ax, list(places), labels)
        ax.set_ylabel(unit)
        ax.set_title(wrap(title, axes_in, 2))
        extra = [(Line2D([], [], color="black", linestyle="--"), "change point")] if marked else []
        _legend(fig, ax, extra)
    return out[0]
