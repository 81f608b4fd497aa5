"""CSV: one row per figure (metric × cell × view) with every statistic, for spreadsheets.

Views: ``single`` (per-instance value), ``aggregate`` (sum over instances), ``per_core``
(aggregate per busy host core). Numbers are written at full precision; empty means "not
applicable". Every row names what ran: ``accel`` (kvm or tcg, pv/pvh/hvm, systrap/ptrace; empty
for drivers with nothing to choose), ``label`` (the name the report gives the platform) and
``platform_settings`` (the settings that define it, as compact JSON); ``headline`` says whether
the metric is its workload's answer, ``suspect`` why a figure above the baseline is not a win.
``resolution`` is the smallest change of the mean its measurement can show (empty: unknown), no
interval being narrower than mean ± half of it; ``identical_repetitions`` says where the
repetitions show no spread the measurement resolves: "below the measurement's resolution", or
"identical repetitions: resolution unknown" (no interval, not tested).

Against the baseline: ``pct_of_baseline`` (% of native, 100 = native, less is worse in either
direction) and ``ratio_to_baseline`` (mean / baseline's mean), each with the bounds of its 95%
interval (``*_ci_low``, ``*_ci_high``: Fieller's, holding both series' noise; empty when not
tested and for the baseline itself, ``inf``/``-inf`` when unbounded); ``n_baseline`` the
baseline's repetitions; ``p_value`` Welch's test at the interval's degrees of freedom,
``significant`` the interval excludes 100%; ``vs_baseline`` what may be said: loss, gain, no
significant difference (the interval within ±5%), inconclusive, not tested (fewer than 2
repetitions on a side, or identical ones of unknown resolution), or baseline. ``ci_clipped``:
the ratio's lower bound was raised to 0 (Fieller's set reached below 0, which a ratio of figures
that cannot be negative cannot). A figure that can be below 0 (``memory.overhead_mib``, or any
measured below 0) has no ratio: ``difference_from_baseline`` (mean − baseline's mean, in its
unit) and its 95% interval (``difference_ci_low``, ``difference_ci_high``: Welch's) instead.
"""

from __future__ import annotations

import csv
import io
import json
import math

from hvbench.analysis.intervals import SampleSummary
from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.normalize import Normalized

COLUMNS = [
    "run_id",
    "study",
    "platform",
    "driver",
    "accel",
    "label",
    "workload",
    "instances",
    "metric",
    "unit",
    "higher_is_better",
    "view",
    "n",
    "median",
    "mean",
    "std",
    "cv",
    "ci95_low",
    "ci95_high",
    "outliers",
    "resolution",
    "identical_repetitions",
    "pct_of_baseline",
    "pct_of_baseline_ci_low",
    "pct_of_baseline_ci_high",
    "pct_loss",
    "ratio_to_baseline",
    "ratio_to_baseline_ci_low",
    "ratio_to_baseline_ci_high",
    "difference_from_baseline",
    "difference_ci_low",
    "difference_ci_high",
    "ci_clipped",
    "n_baseline",
    "p_value",
    "significant",
    "vs_baseline",
    "scaling_efficiency",
    "overcommit",
    "host_cpu_vs_baseline",
    "headline",
    "suspect",
    "platform_settings",
]


def _f(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else repr(float(x))


def _bound(x: float) -> str:
    """An interval's bound: ``inf``/``-inf`` where unbounded, empty where there is none."""
    return repr(float(x)) if math.isinf(x) else _f(x)


def _views(r: MetricResult) -> list[tuple[str, SampleSummary, Normalized | None]]:
    views = [("single", r.single, r.vs_baseline)]
    if r.aggregate is not None:
        views.append(("aggregate", r.aggregate, r.aggregate_vs_baseline))
    if r.per_core is not None:
        views.append(("per_core", r.per_core, None))
    return views


def render(a: RunAnalysis) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in a.results:
        c = r.cell
        settings = json.dumps(c.provenance.settings, separators=(",", ":"), sort_keys=True)
        for view, s, norm in _views(r):
            w.writerow(
                [
                    a.run_id,
                    a.study_name,
                    c.platform,
                    c.driver,
                    c.accel or "",
                    a.label(c.platform),
                    c.workload,
                    c.instances,
                    r.name,
                    f"{r.unit}/core" if view == "per_core" else r.unit,
                    r.higher_is_better,
                    view,
                    s.n,
                    _f(s.median),
                    _f(s.mean),
                    _f(s.std),
                    _f(s.cv),
                    _f(s.ci_low),
                    _f(s.ci_high),
                    len(s.outliers),
                    _f(s.resolution),
                    s.identical or "",
                    _f(norm.pct_of_native) if norm else "",
                    _bound(norm.pct_low) if norm else "",
                    _bound(norm.pct_high) if norm else "",
                    _f(norm.pct_loss) if norm else "",
                    _f(norm.ratio) if norm else "",
                    _bound(norm.ratio_low) if norm else "",
                    _bound(norm.ratio_high) if norm else "",
                    _f(norm.difference) if norm else "",
                    _bound(norm.difference_low) if norm else "",
                    _bound(norm.difference_high) if norm else "",
                    norm.clipped if norm else "",
                    norm.n_baseline if norm else "",
                    _f(norm.p_value) if norm else "",
                    norm.significant if norm else "",
                    norm.reading() if norm else "",
                    _f(r.efficiency) if view == "aggregate" else "",
                    "" if r.overcommit is None else r.overcommit,
                    _f(r.cost_vs_baseline.estimate)
                    if view == "per_core" and r.cost_vs_baseline
                    else "",
                    r.headline,
                    r.suspect or "",
                    settings,
                ]
            )
    return buf.getvalue()
