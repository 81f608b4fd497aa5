"""The report's tables as plain rows of text, shaped like the seeds' tables, for every format.

Markdown prints them as they are, HTML escapes and styles them: one place decides what a table
holds, so that the wiki page and the HTML file never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hvbench.analysis.aggregate import INSTANCE_PERCENTILES
from hvbench.analysis.claims import instance_percentile
from hvbench.analysis.cost import HOST_STATES, same_work, work_cost, work_shortfall
from hvbench.analysis.intervals import BELOW_RESOLUTION, NOISY_CV, RESOLUTION_UNKNOWN, SampleSummary
from hvbench.analysis.matrix import SUSPECT
from hvbench.analysis.model import (
    ASYMMETRY,
    COMPOSITE,
    OUTCOMES,
    MetricKey,
    MetricResult,
    RunAnalysis,
    pick_baseline_cell,
)
from hvbench.analysis.normalize import CLIPPED, Normalized, figure, signed
from hvbench.analysis.outliers import BIMODAL_LEVEL, OUTLIER_LEVEL, OUTLIER_MIN_REL, null_threshold
from hvbench.analysis.readings import Reading
from hvbench.analysis.stats import BURSTY_MIN_N, PRACTICAL, count_interval, quantile_test
from hvbench.analysis.storms import PERCENTILES, Storm, bend_text, estimate_text, storms
from hvbench.analysis.trends import TREND_MIN_N
from hvbench.analysis.verdict import cost_text, efficiency_text
from hvbench.analysis.warning_counts import WarningCounts
from hvbench.store import CellView
from hvbench.units import interval_decimals, interval_strings, number_text, round_up

NOT_SIGNIFICANT = "†"
INCONCLUSIVE_MARK = "‡"
CI_NOTE = (
    "[low–high]: 95% interval of the ratio of means (Fieller's, with Welch's degrees of "
    "freedom: it holds the baseline's noise as well as the platform's); unbounded when the "
    "divisor's mean is not significantly above 0"
)
NS_NOTE = (
    f"{NOT_SIGNIFICANT} no significant difference: the interval lies within "
    f"±{100 * PRACTICAL:.0f}% of the baseline"
)
INCONCLUSIVE_NOTE = (
    f"{INCONCLUSIVE_MARK} inconclusive: the interval holds the baseline's figure but reaches "
    f"beyond ±{100 * PRACTICAL:.0f}% of it; more repetitions would tell"
)
NOT_TESTED_NOTE = (
    "not tested: fewer than 2 repetitions on a side, so a single measurement with no interval "
    "and no test; or a side's repetitions identical with no resolution known, so no spread to "
    "test against"
)
RESOLUTION_NOTES = {
    BELOW_RESOLUTION: (
        f"{BELOW_RESOLUTION}: the repetitions are within half a step of the measurement's "
        "resolution of each other (a job too short for its clock); the interval is then the "
        "resolution's, mean ± half a step, as no interval is narrower than that"
    ),
    RESOLUTION_UNKNOWN: (
        f"{RESOLUTION_UNKNOWN}: the repetitions are equal and the tool did not say how finely "
        "it measures, so nothing tells how far apart they could be: no interval, and not tested "
        "against the baseline"
    ),
}
FLOORED = "floored at 0"
FLOORED_NOTE = (
    f"{FLOORED}: the interval of the mean reached below 0, which the figure cannot (a time, a "
    "rate, a size); its lower bound is 0, and the interval holds the truth as often"
)

BURSTY = "too few repetitions for bursty counts"
COUNT_NOTE = (
    "counts: their total over the repetitions and their range a repetition; the interval of "
    "the mean a repetition is Poisson's exact one, which holds where the events are "
    f"independent; {BURSTY}: the repetitions vary more than Poisson counts do (their variance "
    "over their mean beyond its χ² law, p < 0.05), and no interval of the mean of a few bursty "
    "counts holds its 95% (Student's covers 65–83% of negative binomial ones at 3–5 "
    f"repetitions); below {BURSTY_MIN_N} repetitions Poisson's interval says so too, for so "
    "few cannot tell Poisson counts from bursty ones (0, 0, 1 is as likely of either)"
)
CLIPPED_NOTE = (
    f"{CLIPPED} a bound at 0 (a loss's at 100): Fieller's interval of the ratio reached below 0, "
    "which a ratio of figures that cannot be negative cannot; the interval holds the truth as "
    "often within the ratio's possible values"
)
SIGNED_NOTE = (
    "{names}: a figure that can be below 0, set against the baseline by its difference in its "
    "unit (value − baseline, 95% Welch interval), not by a ratio: a ratio of signed figures "
    "means nothing (−2 against −5 is 40%); no significant difference within ±5% of the "
    "baseline's magnitude"
)
TAILS_NOTE = (
    "what the outlier and bimodal rules assume: normal noise around the mean, on which their "
    f"thresholds are drawn (1 clean cell in {round(1 / OUTLIER_LEVEL)} flagged with an "
    f"outlier, 1 in {round(1 / BIMODAL_LEVEL)} called bimodal). Heavier tails flag more clean "
    "cells: at 10 repetitions 5% (lognormal noise, σ 0.3) and 12% (Student's t, 3 degrees of "
    "freedom) have an outlier, 6% and 12% are called bimodal; at 5 repetitions 1.6% and 2.6%. "
    "And noise hides a busy host: a fifth of the repetitions 30% slower is found in 85% of "
    "cells at a CV of 2%, in 17% at 5% (5 repetitions)"
)
COUNT = "count"
"""The unit of a figure that counts events (failures, retransmits, context switches)."""
OF_INSTANCES = {"boot.storm.failed": ("boots", "failed")}
"""Counts out of a cell's instances in each repetition (a storm's failed boots): what is
counted, and what happened to those counted."""


@dataclass
class Table:
    """A titled grid of text; ``notes`` are printed under it."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: str = ""
    """What the table shows (values, pct, loss, ratio, scaling, symmetry, host, cost,
    profile)."""
    row_kinds: list[str] = field(default_factory=list)
    """Per row, what it says in one word (a comparison's verdict: "regression",
    "not-tested"), for HTML to style it by; empty where rows are all alike."""


WIDE = 8
"""Tables with more metric columns than this are printed with metrics as rows instead."""
SYMMETRIC_REL = 1e-9
"""An interval whose two sides differ by less than this share is symmetric (Student's, up to
the float's rounding): only such a one is printed as mean ± half-width."""
MEAN_CI = (
    "mean ±half-width of its 95% confidence interval, or mean [low–high] where that interval "
    "is not symmetric (the bootstrap's, from 10 repetitions)"
)


def fit(t: Table) -> Table:
    """Platforms as rows and metrics as columns, as in the seeds, unless there are too many
    metrics to read across (kernbench's per-run figures): then the other way round."""
    if len(t.columns) - 1 <= WIDE:
        return t
    rows = [[col, *(row[j] for row in t.rows)] for j, col in enumerate(t.columns) if j > 0]
    return Table(t.title, ["", *(row[0] for row in t.rows)], rows, t.notes, t.kind)


def num(x: float | None) -> str:
    """About 4 significant digits, no exponent for the magnitudes benchmarks print."""
    if x is None or not math.isfinite(x):
        return "n/a"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:.0f}"
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 10:
        return f"{x:.2f}"
    if ax >= 0.1:
        return f"{x:.3f}"
    return f"{x:.3g}"


def with_ci(s: SampleSummary, floor: bool = False) -> str:
    """ "54.2 ±0.43": mean and the CI's half-width to the digits that width supports
    (``units.interval_decimals``; the mean alone when n = 1), where the interval is symmetric
    (Student's); "1.9 [0.7–6.2]" where it is not (the bootstrap's, from 10 repetitions: a ±
    of its half-width would misstate both bounds, the lower one below 0 for a time);
    ``floor``, for a figure that cannot be below 0: "6.7 [0–16], floored at 0" where its
    interval reached below 0; "4.21 ±0.26, below the measurement's resolution" or "4.209,
    identical repetitions: resolution unknown" where the repetitions show no spread the
    measurement resolves."""
    if s.identical == RESOLUTION_UNKNOWN:
        return f"{num(s.mean)}, {RESOLUTION_UNKNOWN}"
    if s.n < 2 or not math.isfinite(s.ci_low):
        return num(s.mean)
    est, low, high = interval_strings(s.mean, s.ci_low, s.ci_high)
    if floor and s.ci_low < 0 <= s.mean:
        text = f"{est} [0–{high}], {FLOORED}"
    elif math.isclose(s.ci_high - s.mean, s.mean - s.ci_low, rel_tol=SYMMETRIC_REL):
        d = interval_decimals(s.mean, s.ci_low, s.ci_high)
        half = round_up((s.ci_high - s.ci_low) / 2, d)
        text = f"{number_text(s.mean, d)} ±{number_text(half, d)}"
    else:
        text = f"{est} [{low}–{high}]"
    return f"{text}, {s.identical}" if s.identical else text


def interval_text(s: SampleSummary, floor: bool = False) -> str:
    """ "52.1–56.3": the interval of the mean alone, by the same rule as ``with_ci``."""
    _, low, high = interval_strings(s.mean, s.ci_low, s.ci_high)
    if floor and s.ci_low < 0 <= s.mean:
        return f"0–{high}, {FLOORED}"
    return f"{low}–{high}"


def count_text(r: MetricResult) -> str:
    """A count as a count: "15 in 5 repetitions, 0–12 a repetition"; "0 in 5 repetitions";
    out of the cell's instances (``OF_INSTANCES``): "0 of 15 boots failed"."""
    values = r.single_values  # a storm's count is stored once, on the cell's first instance
    n, low, high = len(values), float(values.min()), float(values.max())
    total = f"{float(values.sum()):g}"
    if r.name in OF_INSTANCES:
        what, happened = OF_INSTANCES[r.name]
        text = f"{total} of {n * r.cell.instances} {what} {happened}"
    else:
        text = f"{total} in {n} repetition{'s' * (n != 1)}"
    return text + (f", {low:g}–{high:g} a repetition" if high > low else "")


def floored(r: MetricResult) -> bool:
    """Whether a figure cannot be below 0 (a time, a rate, a size, a count): not a difference by
    definition, and never measured below 0 (``normalize.signed``)."""
    return not signed(r.name, r.single_values)


def resolution_notes(cells: list[str]) -> list[str]:
    """The footnotes that figures "below the resolution" (or floored at 0) in ``cells`` need."""
    notes = {**RESOLUTION_NOTES, FLOORED: FLOORED_NOTE}
    return [note for label, note in notes.items() if any(label in c for c in cells)]


def relative(v: Normalized, kind: str = "pct") -> str:
    """A figure against the baseline with its interval and what it allows one to say: "84.2
    [79.0–90.3]", "99.1 [97.3–102.0]†" (no significant difference), "95 [85–103]‡"
    (inconclusive), "11.0, not tested (1 repetition)"; kind is pct (% of the baseline), loss
    (100 − that) or ratio; a signed figure's difference in its unit whatever the kind ("+3.0
    MiB [+1.2–+4.8 MiB]"). Bounds rounded outward (``normalize.figure``)."""
    text, interval = figure(v, kind)
    if v.reference:
        return text
    what = v.reading()
    if what == Reading.NOT_TESTED:
        return f"{text}, {v.describe()}"
    mark = {Reading.EQUIVALENT: NOT_SIGNIFICANT, Reading.INCONCLUSIVE: INCONCLUSIVE_MARK}.get(
        what, ""
    )
    return f"{text} {interval}{mark}".rstrip()


def muted(cell: str) -> bool:
    """A relative figure that states no difference (HTML greys it)."""
    return NOT_SIGNIFICANT in cell or INCONCLUSIVE_MARK in cell or Reading.NOT_TESTED in cell


def relative_notes(cells: list[str]) -> list[str]:
    """The footnotes that the relative figures in ``cells`` need."""
    notes = [CI_NOTE] if any("[" in c for c in cells) else []
    if any(NOT_SIGNIFICANT in c for c in cells):
        notes.append(NS_NOTE)
    if any(INCONCLUSIVE_MARK in c for c in cells):
        notes.append(INCONCLUSIVE_NOTE)
    if any(Reading.NOT_TESTED in c for c in cells):
        notes.append(NOT_TESTED_NOTE)
    if any(CLIPPED in c for c in cells):
        notes.append(CLIPPED_NOTE)
    return notes + resolution_notes(cells)


def _label(r: MetricResult) -> str:
    arrow = "↑" if r.higher_is_better else "↓"
    return f"{r.name} ({r.unit}) {arrow}"


def _count_title(a: RunAnalysis, workload: str, count: int) -> str:
    return f"{a.title(workload)}, {count} instance{'s' if count > 1 else ''}"


def _grid(
    a: RunAnalysis, workload: str, count: int
) -> tuple[list[str], list[str], list[list[MetricResult | None]]]:
    """Metrics measured at this count (columns), platforms (rows), and their results."""

    def measured(p: str, n: str) -> bool:
        found = a.result(p, workload, n, count)
        return found is not None or MetricKey(p, workload, count, n) in a.text_only

    names = [n for n in a.metric_names(workload) if any(measured(p, n) for p in a.platforms)]
    platforms = [p for p in a.platforms if any(measured(p, n) for n in names)]
    return names, platforms, [[a.result(p, workload, n, count) for n in names] for p in platforms]


def values_table(a: RunAnalysis, workload: str, count: int) -> Table:
    """Raw figures: mean ±95% CI of the per-instance value, and the repetitions."""
    names, platforms, grid = _grid(a, workload, count)
    labels = [
        _label(next(r for r in col if r)) if any(col) else name
        for name, col in zip(names, zip(*grid, strict=True), strict=True)
    ]
    t = Table(
        f"{_count_title(a, workload, count)}: values",
        ["platform", "n", *labels],
        kind="values",
        notes=[
            f"per instance: {MEAN_CI}; n = repetitions; "
            "↑ higher is better, ↓ lower is better; (median …) where some repetitions stand "
            "apart from the rest (outliers, two groups, steal time: see the noise table)"
        ],
    )
    nested = sorted({c.platform for c in a.cells if c.ran.nested} & set(platforms))
    if nested:
        t.notes.append(
            f"{', '.join(nested)}: KVM nested in a virtual machine (resolved nested: true): "
            "a functional check of the KVM path, not KVM's figures"
        )
    for p, row in zip(platforms, grid, strict=True):
        n = max((r.single.n for r in row if r), default=0)
        cells = [
            (value_text(a, r) + (f" (median {num(r.single.median)})" if a.skewed(r) else ""))
            if r
            else a.text_only.get(MetricKey(p, workload, count, name), "")
            for name, r in zip(names, row, strict=True)
        ]
        t.rows.append([a.label(p), str(n), *cells])
    t.notes.extend(resolution_notes([c for row in t.rows for c in row[2:]]))
    if any(r is not None and r.unit == COUNT for row in grid for r in row):
        t.notes.append(COUNT_NOTE)
    return t


def value_text(a: RunAnalysis, r: MetricResult) -> str:
    """A figure's repetitions as its values table shows them: a count as a count
    (``count_text``); a percentile over the cell's instances as that of every instance in every
    repetition, with its order-statistic interval ("17.9 [17.3–19.1], p99 of the 500
    boot.ready_s"); any other figure as its mean with its interval (``with_ci``)."""
    if r.unit == COUNT:
        return count_text(r)
    if (pooled := instance_percentile(a, r)) is not None:
        p, values = pooled
        t = quantile_test(values, p / 100)
        est, low, high = interval_strings(t.estimate, t.low, t.high)
        return f"{est} [{low}–{high}], p{p} of the {t.n} {INSTANCE_PERCENTILES[r.name].of}"
    return with_ci(r.single, floored(r))


def _single(r: MetricResult) -> Normalized | None:
    return r.vs_baseline


def _aggregate(r: MetricResult) -> Normalized | None:
    return r.aggregate_vs_baseline


def _relative_table(
    a: RunAnalysis,
    workload: str,
    count: int,
    kind: str,
    title: str,
    note: str,
    only_lower: bool,
    view: Callable[[MetricResult], Normalized | None] = _single,
) -> Table | None:
    """Headline metrics against the baseline, per platform; ``view`` picks the per-instance
    figure's ratio or the aggregate's."""
    if a.baseline is None:
        return None
    _, platforms, grid = _grid(a, workload, count)
    cols = [
        i
        for i, col in enumerate(zip(*grid, strict=True))
        if any(r and view(r) and r.headline for r in col)
        and (not only_lower or not next(r for r in col if r).higher_is_better)
    ]
    if not cols:
        return None
    names = [next(r for r in (row[i] for row in grid) if r).name for i in cols]
    t = Table(f"{_count_title(a, workload, count)}: {title}", ["platform", *names], kind=kind)
    suspects: dict[str, str] = {}
    for p, row in zip(platforms, grid, strict=True):
        cells = []
        for i in cols:
            r = row[i]
            ratio = view(r) if r is not None else None
            if r is None or ratio is None or not r.headline:
                cells.append("")
                continue
            text = relative(ratio, kind)
            if r.suspect:
                text += SUSPECT
                suspects.setdefault(a.label(p), r.suspect)
            cells.append(text)
        t.rows.append([a.label(p), *cells])
    t.notes.append(note)
    t.notes.append("headline metrics only; side figures are in the report's detail tables")
    signed = [
        r.name
        for row in grid
        for i in cols
        if (r := row[i]) is not None and (v := view(r)) is not None and v.signed
    ]
    if signed:
        t.notes.append(SIGNED_NOTE.format(names=", ".join(dict.fromkeys(signed))))
    t.notes.extend(relative_notes([c for row in t.rows for c in row[1:]]))
    t.notes.extend(
        f"{SUSPECT} {p}: above {a.label(a.baseline)}, not a win: {why}"
        for p, why in suspects.items()
    )
    return t


def pct_table(a: RunAnalysis, workload: str, count: int) -> Table | None:
    """The wiki's "comparison to native": 100 = native, less is worse, whatever the direction."""
    return _relative_table(
        a,
        workload,
        count,
        "pct",
        f"% of {a.baseline}",
        f"normalised against {a.baseline} (= 100), rounded; for lower-is-better metrics "
        f"{a.baseline}/value, so that less than 100 is always worse",
        only_lower=False,
    )


def loss_table(a: RunAnalysis, workload: str, count: int) -> Table | None:
    """The paper's Table 1: % loss from the baseline."""
    return _relative_table(
        a,
        workload,
        count,
        "loss",
        f"% loss from {a.baseline}",
        f"100 − % of {a.baseline}; negative means better than {a.baseline}",
        only_lower=False,
    )


def aggregate_loss_table(a: RunAnalysis, workload: str, count: int) -> Table | None:
    """The paper's "% loss" of N instances together (HEP-SPEC06: 8 VMs' sum against the bare
    machine running as many copies): throughput summed over the instances, against the
    baseline's sum at the same count (or its nearest below, as every ratio here)."""
    if count < 2:
        return None
    return _relative_table(
        a,
        workload,
        count,
        "loss",
        f"aggregate % loss from {a.baseline}",
        f"100 − (sum over the {count} instances) / ({a.baseline}'s sum) × 100; throughput "
        "metrics only; negative means better",
        only_lower=False,
        view=_aggregate,
    )


def ratio_table(a: RunAnalysis, workload: str, count: int) -> Table | None:
    """kernbench's "elapsed time / native", for the lower-is-better metrics."""
    return _relative_table(
        a,
        workload,
        count,
        "ratio",
        f"value / {a.baseline}",
        f"mean / {a.baseline}'s mean: 1.56 takes 56% longer than {a.baseline}",
        only_lower=True,
    )


def statistics_table(a: RunAnalysis, workload: str) -> Table:
    """Every cell's statistics of the per-instance figure, one row per metric and cell."""
    t = Table(
        f"{a.title(workload)}: statistics per cell",
        [
            "platform",
            "instances",
            "metric",
            "n",
            "median",
            "mean",
            "sd",
            "CV",
            "CV across instances",
            "95% CI",
            "outliers",
        ],
        kind="statistics",
        notes=[
            "per-instance figure over repetitions; CI of the mean (Student's t below 10 "
            "repetitions, else BCa bootstrap widened for small n); CV across instances: within "
            "each repetition, averaged over them; outliers: repetitions further from the mean "
            "of the others, in their standard deviations, than 1 clean cell in "
            f"{round(1 / OUTLIER_LEVEL)} has one at that n "
            f"({null_threshold('outlier', 5, OUTLIER_LEVEL):.1f} at n = 5, "
            f"{null_threshold('outlier', 10, OUTLIER_LEVEL):.1f} at 10), and more than "
            f"{100 * OUTLIER_MIN_REL:.0f}% off the median; from 5 repetitions; no interval "
            "is narrower than the measurement's resolution (mean ± half its step, where the "
            "workload states it)",
            TAILS_NOTE,
        ],
    )
    key = _cell_order(a)
    metric_order = {n: i for i, n in enumerate(a.metric_names(workload))}
    rows = [r for r in a.results if r.cell.workload == workload]
    for r in sorted(rows, key=lambda r: (key(r.cell), metric_order[r.name])):
        s = r.single
        ci = interval_text(s, floored(r)) if s.n > 1 else "n/a"
        if r.unit == COUNT and s.n > 1:
            ci = count_ci(r.single_values)
        elif s.identical:
            ci = s.identical if s.identical == RESOLUTION_UNKNOWN else f"{ci}, {s.identical}"
        t.rows.append(
            [
                a.label(r.cell.platform),
                str(r.cell.instances),
                r.name,
                str(s.n),
                num(s.median),
                num(s.mean),
                num(s.std),
                f"{100 * s.cv:.1f}%" if math.isfinite(s.cv) else "n/a",
                f"{100 * r.instance_cv:.1f}%" if math.isfinite(r.instance_cv) else "",
                ci,
                ", ".join(num(r.single_values[i]) for i in s.outliers),
            ]
        )
    t.notes.extend(resolution_notes([row[9] for row in t.rows]))
    if any(r.unit == COUNT for r in rows):
        t.notes.append(COUNT_NOTE)
    return t


def count_ci(values: np.ndarray) -> str:
    """A count's interval as the statistics table gives it (``stats.count_interval``):
    Poisson's, named with what it assumes and, below ``BURSTY_MIN_N`` repetitions, that so few
    cannot vouch for it if the counts come in bursts; or, where they are shown to, no interval."""
    c = count_interval(values)
    if c.bursty:
        return f"{BURSTY} (variance {c.dispersion:.2g}× the mean)"
    _, low, high = interval_strings(float(np.mean(values)), c.low, c.high)
    burst = f"; {BURSTY}" if c.too_few else ""
    return f"{low}–{high} (a count: Poisson's, if its events are independent{burst})"


def scaling_table(a: RunAnalysis, workload: str) -> Table | None:
    """Single vs aggregate per instance count (the paper's figures 1–3 and 6–8)."""
    rows = [
        (r, aggregate)
        for r in a.results
        if r.cell.workload == workload and (aggregate := r.aggregate) is not None
    ]
    if not rows or max(a.counts(workload)) < 2:
        return None
    t = Table(
        f"{a.title(workload)}: single vs aggregate",
        [
            "platform",
            "metric",
            "instances",
            "per instance (mean)",
            "spread across instances",
            "aggregate",
            f"aggregate % of {a.baseline}" if a.baseline else "aggregate % of baseline",
            "scaling efficiency",
            "overcommit",
        ],
        kind="scaling",
        notes=[
            f"aggregate = sum over the instances; {MEAN_CI}, over repetitions; spread = "
            "min–max of the instances' means; efficiency = aggregate / (N × aggregate per "
            "instance at the smallest count), with the 95% interval of its aggregates' ratio "
            "(Fieller's); overcommit = more vCPUs than host cores; "
            "aggregate % of the baseline for headline metrics only"
        ],
    )
    order = {p: i for i, p in enumerate(a.platforms)}
    metric_order = {n: i for i, n in enumerate(a.metric_names(workload))}
    first: dict[tuple[str, str], MetricResult] = {}  # each figure at its platform's fewest
    for r, _ in sorted(rows, key=lambda ra: -ra[0].cell.instances):
        first[(r.cell.platform, r.name)] = r
    for r, aggregate in sorted(
        rows,
        key=lambda ra: (order[ra[0].cell.platform], metric_order[ra[0].name], ra[0].cell.instances),
    ):
        agg = r.aggregate_vs_baseline if r.headline else None
        t.rows.append(
            [
                a.label(r.cell.platform),
                r.name,
                str(r.cell.instances),
                with_ci(r.single, floored(r)),
                f"{num(float(r.per_instance.min()))}–{num(float(r.per_instance.max()))}",
                with_ci(aggregate, floored(r)),
                relative(agg) if agg else "",
                efficiency_text(first[(r.cell.platform, r.name)], r),
                {True: "yes", False: "no", None: "?"}[r.overcommit],
            ]
        )
    t.notes.extend(relative_notes([row[6] for row in t.rows]))
    t.notes.extend(resolution_notes([c for row in t.rows for c in (row[3], row[5])]))
    return t


def symmetry_table(a: RunAnalysis) -> Table | None:
    """Inbound and outbound side by side, with their ratio and the verdict."""
    if not a.symmetry:
        return None
    t = Table(
        "network: inbound vs outbound",
        ["workload", "platform", "instances", "metric", "inbound", "outbound", "out/in", "verdict"],
        kind="symmetry",
        notes=[
            f"per instance, {MEAN_CI}; asymmetric when the weaker direction is more than 15% "
            "below the stronger and the difference is significant (Welch, p < 0.05)"
        ],
    )
    for s in a.symmetry:
        if s.asymmetric and not s.tested:
            verdict = f"{s.weaker} {100 * s.gap:.0f}% lower, {Reading.NOT_TESTED} (1 repetition)"
        elif s.asymmetric:
            verdict = f"asymmetric: {s.weaker} {100 * s.gap:.0f}% lower"
        elif s.gap > ASYMMETRY:  # a large gap the test could not confirm
            verdict = (
                f"{Reading.INCONCLUSIVE}: {s.weaker} {100 * s.gap:.0f}% lower, not significant"
            )
        else:
            verdict = "symmetric"
        t.rows.append(
            [
                a.title(s.cell.workload),
                a.label(s.cell.platform),
                str(s.cell.instances),
                s.inbound.name.replace("inbound", "{in,out}bound"),
                with_ci(s.inbound.single, floored(s.inbound)),
                with_ci(s.outbound.single, floored(s.outbound)),
                f"{s.ratio:.2f}",
                verdict,
            ]
        )
    t.notes.extend(resolution_notes([c for row in t.rows for c in (row[4], row[5])]))
    return t


def _cell_order(a: RunAnalysis) -> Callable[[CellView], tuple[int, int, int]]:
    """Cells grouped by workload, then platform (the study's order), then instance count."""
    workloads = {w: i for i, w in enumerate(a.workloads())}
    platforms = {p: i for i, p in enumerate(a.platforms)}
    return lambda c: (workloads[c.workload], platforms[c.platform], c.instances)


def host_table(a: RunAnalysis) -> Table | None:
    """Host CPU split during each cell (the consolidation post's breakdown), % of the host."""
    if not a.host_cpu:
        return None
    t = Table(
        "host CPU during the measurement (% of all host cores)",
        [
            "workload",
            "platform",
            "instances",
            "total",
            *HOST_STATES,
            "instances' processes (cores)",
            "non-guest / guest",
            "clients (left out)",
        ],
        kind="host",
        notes=[
            "from /proc/stat before and after each sample; user and nice exclude guest time; "
            "non-guest / guest is the virtualization overhead the consolidation post computes; "
            "the load generators' CPU (their cgroup: consolidation's clients) is left out of "
            "user and system and shown apart"
        ],
    )
    for c in sorted(a.cells, key=_cell_order(a)):
        h = a.host_cpu.get(c.id)
        if h is None:
            continue
        bases = [b for b in a.cells if b.platform == a.baseline and b.id in a.host_cpu]
        base = pick_baseline_cell(bases, c.workload, c.instances)
        if base is not None and base.id != c.id and h.clients is not None:
            said = same_work(a.label(c.platform), h.busy, a.label(base.platform),
                             a.host_cpu[base.id].busy,
                             work_shortfall(a.results, c.id, base.id))  # fmt: skip
            t.notes.append(f"{c.workload}: {said}")
        over = h.virtualization_overhead
        t.rows.append(
            [
                c.workload,
                a.label(c.platform),
                str(c.instances),
                f"{100 * h.busy:.2f}",
                *(f"{100 * h.states.get(s, 0.0):.2f}" for s in HOST_STATES),
                num(h.instance_cores) if h.instance_cores is not None else "",
                f"{100 * over:.0f}%" if over is not None else "",
                f"{100 * h.clients:.2f}" if h.clients is not None else "",
            ]
        )
    return t


def cost_table(a: RunAnalysis) -> Table | None:
    """The host CPU one unit of the work costs (per GB, per Gbit, ...), for headline metrics."""
    key = _cell_order(a)
    rows = sorted((r for r in a.results if r.headline and not r.suspect), key=lambda r: key(r.cell))
    costs = [
        (r, per_core, c)
        for r in rows
        if (per_core := r.per_core) is not None and (c := work_cost(r.unit, per_core)) is not None
    ]
    if not costs:
        return None
    base = a.label(a.baseline) if a.baseline else "baseline"
    t = Table(
        "host CPU cost of the work",
        [
            "workload",
            "metric",
            "platform",
            "instances",
            "host CPU per unit of work",
            f"host CPU for the same work (× {base})",
        ],
        kind="cost",
        notes=[
            "host cores busy during the sample / aggregate throughput: for a rate, the host "
            "CPU-seconds one unit of work takes (per GB, per Gbit, per 1000 operations), mean "
            "[its 95% CI]; headline metrics only",
            f"× {base}: how much more host CPU the platform spends than {base} for one unit of "
            "work",
        ],
    )
    for r, per_core, c in costs:
        est, low, high = interval_strings(c.mean, c.low, c.high)
        spread = f" [{low}–{high}]" if not math.isnan(c.low) else ""
        flat = f", {per_core.identical}" if per_core.identical else ""
        t.rows.append(
            [
                a.title(r.cell.workload),
                r.name,
                a.label(r.cell.platform),
                str(r.cell.instances),
                f"{est}{spread} {c.unit}{flat}",
                cost_text(r.cost_vs_baseline) if r.cost_vs_baseline is not None else "",
            ]
        )
    t.notes.extend(resolution_notes([row[4] for row in t.rows]))
    return t


def workload_tables(a: RunAnalysis, workload: str) -> list[Table]:
    """Per instance count: values, % of native, % loss (per instance, and of the N instances
    together), value/native; then scaling and the statistics of every cell."""
    out: list[Table] = []
    for count in a.counts(workload):
        values = values_table(a, workload, count)
        if any(c.startswith(COMPOSITE) for c in values.columns):
            base = a.baseline or "nothing (no baseline: raw values)"
            values.notes.append(
                f"{COMPOSITE}: per repetition and instance, the geometric mean of the workload's "
                f"higher-is-better metrics, each divided by {base}'s single-instance mean"
            )
        out.append(fit(values))
        out.extend(
            fit(t)
            for t in (
                pct_table(a, workload, count),
                loss_table(a, workload, count),
                aggregate_loss_table(a, workload, count),
                ratio_table(a, workload, count),
            )
            if t is not None
        )
    if (t := scaling_table(a, workload)) is not None:
        out.append(t)
    out.extend(storm_table(a, s) for s in storms(a) if s.workload == workload)
    out.append(statistics_table(a, workload))
    return out


def storm_table(a: RunAnalysis, storm: Storm) -> Table:
    """A platform's boot storm as one reads it: per count, how long until all are ready, how
    the single boots spread (p50, p95 of every boot of every storm, where enough instances stand
    behind them), the failures; under it, the fitted line and where the curve bends."""
    t = Table(
        f"{a.title(storm.workload)} storm: {a.label(storm.platform)}",
        [
            "instances",
            "repetitions",
            "all ready (s)",
            *(f"p{p} ready (s)" for p in PERCENTILES),
            "failed",
        ],
        kind="storm",
        notes=[
            f"all ready: {MEAN_CI}, over the storm's repetitions; p50, p95: of each instance's "
            "ready time, over every boot of every repetition at that count, with the interval "
            "between two order statistics (no normal noise assumed)"
        ],
    )
    left_out: list[str] = []
    for c in storm.counts:
        cells = []
        for q in c.percentiles:
            if q.shortfall is not None:
                cells.append("")
                left_out.append(f"p{q.p} at {c.instances}: {q.shortfall}")
            else:
                cells.append(f"{estimate_text(q.estimate, q.low, q.high)} (of {q.n})")
        failed = "" if c.failed is None else f"{c.failed} of {c.boots}"
        t.rows.append(
            [
                str(c.instances),
                str(c.all_ready.single.n),
                with_ci(c.all_ready.single, floored(c.all_ready)),
                *cells,
                failed,
            ]
        )
    if left_out:
        t.notes.append("left out: " + "; ".join(left_out))
    if (line := storm.line) is not None:
        per = estimate_text(line.slope, line.low, line.high, "s")
        t.notes.append(
            f"fitted line: {per} per added instance (least squares over the {line.n} "
            "repetitions' all-ready times against the count, 95% interval from Student's t, "
            f"n − 2 degrees of freedom); {bend_text(line)} (where one more instance costs more "
            "than twice what it does between the two smallest counts)"
        )
    return t


def side_noise(a: RunAnalysis) -> str | None:
    """How many side figures are noisy too: a note under the noise table, or, where no headline
    figure is noisy, a line of its own (never a table of no rows)."""
    if not a.noisy_side:
        return None
    return (
        f"{a.noisy_side} side figure{'s are' if a.noisy_side > 1 else ' is'} noisy "
        "(not judged by the verdicts): see the statistics tables"
    )


def noise_table(a: RunAnalysis) -> Table | None:
    """The noisy headline figures, worst first: why each is noisy and what would help; None
    where there are none (``side_noise`` says what else is noisy)."""
    if not a.noise:
        return None
    t = Table(
        "noisy figures, worst first",
        ["platform", "workload", "instances", "metric", "n", "CV", "95% CI", "why", "what to do"],
        kind="noise",
        notes=[
            f"headline figures with a CV above {100 * NOISY_CV:.0f}%, outlier repetitions, "
            f"repetitions in two groups (bimodal: a gap between them that 1 clean cell in "
            f"{round(1 / BIMODAL_LEVEL)} shows, and more than {100 * OUTLIER_MIN_REL:.0f}% of "
            "the median; from 4 repetitions, and likely from 5 when a fifth of them are 30% "
            "slower), steal time above 5% of the host's CPU in any repetition, an interval "
            "still wider than adaptive repetitions' target, repetitions that the measurement "
            "cannot tell apart (below its resolution, or equal with no resolution known), or a "
            f"trend over the repetitions in the order they ran (from {TREND_MIN_N} repetitions: "
            "Kendall's τ against the repetition, Holm's step-down over the run's headline "
            "figures, p < 0.05; % a repetition: Theil–Sen's slope); repetitions needed: "
            "Student's t at this CV",
            TAILS_NOTE,
        ],
    )
    for x in a.noise:
        r, s = x.result, x.result.single
        t.rows.append(
            [
                a.label(r.cell.platform),
                a.title(r.cell.workload),
                str(r.cell.instances),
                r.name,
                str(s.n),
                f"{100 * s.cv:.1f}%" if math.isfinite(s.cv) else "n/a",
                f"±{100 * s.ci_half_width:.1f}%" if math.isfinite(s.ci_half_width) else "n/a",
                "; ".join(x.reasons),
                x.advice,
            ]
        )
    if (side := side_noise(a)) is not None:
        t.notes.append(side.replace(" noisy ", " noisy as well ", 1))
    return t


@dataclass
class Warnings:
    """The run's warnings as a report shows them, in full at its end and counted at its top:
    the noisy figures' table, and every other warning a line."""

    noise: Table | None
    lines: list[str]
    counts: WarningCounts
    """What the top line says: the count the run's end and its ``--json`` give too."""

    def count(self) -> int:
        """The items of the warnings' section (the noise table's rows and the lines)."""
        return (len(self.noise.rows) if self.noise else 0) + len(self.lines)

    def summary(self) -> str | None:
        """The report's top line: "warnings: 14 noisy figures, 3 other warnings" as
        ``WarningCounts.line`` says it; None where there are none."""
        line = self.counts.line()
        return None if line is None else f"warnings: {line}"

    def anchor(self) -> str:
        """Where the top line leads: the warnings' section, or where the host's conditions are
        the only warnings, theirs."""
        return "warnings" if self.count() else "host-conditions"


def warnings(a: RunAnalysis) -> Warnings:
    """The noise table and the warning lines (the noisy side figures' line where no headline
    figure is noisy: otherwise it is a note under the table)."""
    noise = noise_table(a)
    side = [] if noise or (line := side_noise(a)) is None else [line]
    return Warnings(noise, side + a.warnings, WarningCounts.of(a))


def conditions_table(a: RunAnalysis) -> Table | None:
    """The host conditions of the run that were not benchmark-grade, what each does to the
    figures and its fix; the others named in the notes. None for a run recorded without them."""
    if not a.conditions:
        return None
    bad = [c for c in a.conditions if c.benchmark_grade is False]
    graded = [c for c in a.conditions if c.value is not None and c.benchmark_grade is not None]
    t = Table(
        f"host conditions before the run: {len(bad)} of {len(graded)} not benchmark-grade",
        ["condition", "value", "what it does to the figures", "fix"],
        [[c.name, c.value or "", c.effect, c.fix] for c in bad],
        kind="conditions",
    )
    hidden = [c.name for c in a.conditions if c.value is None]
    info = [f"{c.name} {c.value}" for c in a.conditions if c.value and c.benchmark_grade is None]
    for label, names in (
        ("benchmark-grade", [c.name for c in graded if c.benchmark_grade]),
        ("not exposed by this host (not guessed)", hidden),
        ("for the record", info),
    ):
        if names:
            t.notes.append(f"{label}: {', '.join(names)}")
    return t


def profile_tables(a: RunAnalysis) -> list[Table]:
    """Each platform's top functions per workload, as the consolidation post's oprofile table."""
    out = []
    for p in a.profiles:
        out.append(
            Table(
                f"host profile: {a.label(p.platform)}, {p.workload}: top {len(p.functions)} "
                "functions",
                ["rank", "samples", "%", "function", "shared object"],
                [
                    [str(i), str(f.samples), f"{f.percent:.2f}", f.symbol, f.dso]
                    for i, f in enumerate(p.functions, 1)
                ],
                notes=[
                    f"Linux perf sampling cpu-clock on every host CPU during the measured window "
                    f"of {p.profiles} sample{'s' * (p.profiles > 1)}, {p.samples} perf samples in "
                    "all; %: share of the host's CPU time, its idle loop and whatever else ran on "
                    "the host included; (no symbols): addresses in a binary without symbols, "
                    "summed"
                ],
                kind="profile",
            )
        )
    return out


def all_tables(a: RunAnalysis) -> list[Table]:
    tables = [t for w in a.workloads() for t in workload_tables(a, w)]
    tables.extend(t for t in (symmetry_table(a), host_table(a), cost_table(a)) if t is not None)
    return tables + profile_tables(a)


def provenance(a: RunAnalysis) -> list[tuple[str, str]]:
    """(label, text) pairs: where the numbers come from."""
    items = [
        ("run", a.run_id),
        ("study", a.study_name),
        ("status", a.status),
        ("started", a.created_at.isoformat() if a.created_at else ""),
        ("finished", a.finished_at.isoformat() if a.finished_at else ""),
        ("hvbench", f"{a.hvbench_version}" + (f" ({a.git_commit})" if a.git_commit else "")),
        ("baseline", a.baseline or "none (no normalization)"),
    ]
    items.extend((f"host {k}", v) for k, v in a.inventory.described().items())
    items.extend((f"tool {k}", str(v)) for k, v in sorted(a.inventory.tools.items()))
    if a.options:
        items.append(("options", ", ".join(f"{k}={v}" for k, v in sorted(a.options.items()))))
    return items


def claims_table(a: RunAnalysis) -> Table | None:
    """The report's "Claims": each claim the study wrote (and the consolidation's SLOs) on each
    platform, its source, the measured figure with its 95% interval and its outcome, judged as
    one family (``analysis.claims``). A claim on a platform whose guests ran nested is noted:
    its figures are this lab's, not the bare metal's a vendor's claim is about, and its outcome
    stands for this host only."""
    if not a.claims:
        return None
    rows = []
    for j in a.claims:
        figure, interval = j.figure()
        where = f"{j.label} / {a.title(j.workload)}" + (
            f" / {j.instances} inst." if j.instances else ""
        )
        outcome = j.outcome + (f" ({s})" if (s := j.settle()) else "")
        interval += f", {FLOORED}" if j.floored else ""
        rows.append([where, j.claim.text, j.claim.source, figure, interval, outcome])
    counts = {o: sum(j.outcome == o for j in a.claims) for o in OUTCOMES}
    notes = [
        ", ".join(f"{n} {o}" for o, n in counts.items() if n)
        + f" of {len(a.claims)}: 95% intervals; held or refuted only where the test of the "
        "claim's bound passes Holm's step-down over all of the run's claims (5% family-wise)",
        *resolution_notes([row[4] for row in rows]),
    ]
    judged = {j.platform for j in a.claims}
    nested = sorted({c.platform for c in a.cells if c.ran.nested} & judged)
    if nested:
        notes.append(
            f"{', '.join(map(a.label, nested))}: measured in a guest nested in a virtual "
            "machine: a claim about bare metal is judged here on this lab's figures, and its "
            "outcome holds for this host only"
        )
    columns = ["where", "claim", "source", "measured", "95% CI", "outcome"]
    return Table("Claims", columns, rows, notes, kind="claims")
