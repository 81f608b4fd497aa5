"""The HTML report's figures as inline SVG (matplotlib's SVG backend, no pyplot state).

Figures are deterministic (fixed ``svg.hashsalt``, no date) so that the same run gives the
same file; text stays text (``svg.fonttype: none``) and is never parsed as mathtext, since
names come from studies and guests.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import matplotlib
import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from hvbench.analysis.cost import HOST_STATES
from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.stats import Summary

RC = {
    "svg.hashsalt": "hvbench",
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
}
COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"]
STATE_COLORS = dict(zip(HOST_STATES, COLORS, strict=False))
_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)


@contextmanager
def _figure(
    width: float, height: float, legend_in: float = 1.3, bottom_in: float = 0.75
) -> Iterator[tuple[Figure, list[str]]]:
    """A figure whose SVG text is appended to the yielded list on exit.

    Margins are fixed in inches (room for a legend on the right and two-line tick labels
    below) rather than computed by a layout engine, which would draw every figure twice.
    """
    out: list[str] = []
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width + legend_in, height))
        fig.subplots_adjust(
            left=0.7 / (width + legend_in),
            right=(width - 0.1) / (width + legend_in),
            bottom=bottom_in / height,
            top=1 - 0.35 / height,
            wspace=0.3,
        )
        yield fig, out
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    out.append(_PROLOGUE.sub("", buf.getvalue(), count=1))


def _legend(fig: Figure, ax, extra: Sequence[tuple[Artist, str]] = ()) -> None:
    """The legend of one axes, and ``extra`` (handle, text) entries, in the figure's right
    margin."""
    handles, labels = ax.get_legend_handles_labels()
    handles += [h for h, _ in extra]
    labels += [t for _, t in extra]
    fig.legend(handles, labels, loc="upper right", fontsize=8, frameon=False)


def _whiskers(s: Summary, scale: float) -> tuple[float, float]:
    """Distances below and above the mean (times ``scale``) for error bars; 0 without a CI."""
    if s.n < 2 or not math.isfinite(s.ci_low):
        return 0.0, 0.0
    return (s.mean - s.ci_low) * scale, (s.ci_high - s.mean) * scale


def _relative(r: MetricResult, relative: bool) -> tuple[float, float, float, str] | None:
    """Height, whiskers and a label of a bar. Against the baseline: % of it with the 95%
    interval of the ratio of means (Fieller's, holding the baseline's noise too), labelled
    where there is no finite interval; None without a figure against the baseline. Without a
    baseline: the raw mean and its own interval."""
    if not relative:
        lo, hi = _whiskers(r.single, 1.0)
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


def bars(a: RunAnalysis, workload: str, count: int) -> str | None:
    """Grouped bars: one group per headline metric, one bar per platform, 95% CI whiskers (of
    the ratio to the baseline where there is one); hatched where a figure above the baseline
    cannot be a win (``MetricResult.suspect``)."""
    names = [
        n
        for n in a.metric_names(workload)
        if any((r := a.result(p, workload, n, count)) and r.headline for p in a.platforms)
    ]
    platforms = [p for p in a.platforms if any(a.result(p, workload, n, count) for n in names)]
    if not platforms or not names:
        return None
    relative = a.baseline is not None and a.baseline in platforms
    bar = 0.8 / len(platforms)
    width = max(4.0, 1.2 + 0.9 * len(names) * max(1, len(platforms) / 3))
    with _figure(width, 3.4, bottom_in=1.1) as (fig, out):
        ax = fig.add_subplot()
        # legend entries of their own: a hatched first bar would hatch its platform's entry
        entries: list[tuple[Artist, str]] = []
        suspect = False
        for i, p in enumerate(platforms):
            xs, hs, errs, hatches = [], [], [[], []], []
            for j, n in enumerate(names):
                r = a.result(p, workload, n, count)
                bar_of = _relative(r, relative) if r is not None else None
                if bar_of is None:
                    continue
                h, lo, hi, text = bar_of
                xs.append(j + (i - (len(platforms) - 1) / 2) * bar)
                hs.append(h)
                errs[0].append(lo)
                errs[1].append(hi)
                hatches.append("///" if r.suspect else "")
                if text:
                    ax.annotate(text, (xs[-1], h), ha="center", va="bottom", fontsize=6)
            color = COLORS[i % len(COLORS)]
            drawn = ax.bar(xs, hs, bar, yerr=errs, capsize=2, color=color)
            for patch, hatch in zip(drawn.patches, hatches, strict=True):
                patch.set_hatch(hatch)
            entries.append((Patch(color=color), a.label(p)))
            suspect = suspect or any(hatches)
        ax.set_xticks(
            range(len(names)), [n.split(".", 1)[-1] for n in names], rotation=20, ha="right"
        )
        ax.set_ylabel(f"% of {a.baseline}" if relative else "mean (own units)")
        if relative:
            ax.axhline(100, color="black", linewidth=0.8)
        ax.set_title(f"{workload}, {count} instance{'s' if count > 1 else ''}")
        if suspect:
            hatched = Patch(facecolor="white", edgecolor="black", hatch="///")
            entries.append((hatched, "not a win\n(see tables)"))
        _legend(fig, ax, entries)
    return out[0]


def scaling(a: RunAnalysis, workload: str, name: str) -> str | None:
    """Aggregate and per-instance throughput against the instance count, per platform."""
    series = {}
    for p in a.platforms:
        rs = sorted(
            (
                r
                for r in a.results
                if r.cell.platform == p
                and r.cell.workload == workload
                and r.name == name
                and r.aggregate is not None
            ),
            key=lambda r: r.cell.instances,
        )
        if rs:
            series[p] = rs
    if not any(len(rs) > 1 for rs in series.values()):
        return None
    unit = next(iter(series.values()))[0].unit
    with _figure(7.0, 3.0, legend_in=1.3, bottom_in=0.55) as (fig, out):
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
        agg_ax.set_title(f"{name}: aggregate")
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
    """Inbound and outbound bars side by side, per platform (smallest instance count)."""
    if not a.symmetry:
        return None
    first = min(s.cell.instances for s in a.symmetry)
    pairs = [s for s in a.symmetry if s.cell.instances == first]
    labels = [f"{a.label(s.cell.platform)}\n{s.cell.workload}" for s in pairs]
    with _figure(max(4.0, 1.0 + 0.9 * len(pairs)), 3.0) as (fig, out):
        ax = fig.add_subplot()
        x = np.arange(len(pairs))
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
                ax.annotate(f"−{100 * s.gap:.0f}%", (i, top), ha="center", va="bottom")
        ax.set_xticks(x, labels)
        ax.set_ylabel(pairs[0].inbound.unit)
        ax.set_title(f"inbound vs outbound, {first} instance{'s' if first > 1 else ''}")
        _legend(fig, ax)
    return out[0]


def host_cpu(a: RunAnalysis) -> str | None:
    """Host CPU split stacked per platform, for each workload at its smallest count."""
    cells = []
    for w in a.workloads():
        count = min(a.counts(w))
        cells += [
            c for c in a.cells if c.workload == w and c.instances == count and c.id in a.host_cpu
        ]
    if not cells:
        return None
    with _figure(max(4.0, 1.0 + 0.8 * len(cells)), 3.2) as (fig, out):
        ax = fig.add_subplot()
        x = np.arange(len(cells))
        bottom = np.zeros(len(cells))
        for state in HOST_STATES:
            values = np.array([100 * a.host_cpu[c.id].states.get(state, 0.0) for c in cells])
            if not values.any():
                continue
            ax.bar(x, values, 0.6, bottom=bottom, label=state, color=STATE_COLORS[state])
            bottom += values
        ax.set_xticks(x, [f"{a.label(c.platform)}\n{c.workload}" for c in cells])
        ax.set_ylabel("% of all host cores")
        ax.set_title("host CPU during the measurement")
        _legend(fig, ax)
    return out[0]
