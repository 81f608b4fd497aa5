"""Bencher Metric Format (BMF JSON), so that a Bencher project can track hvbench's runs.

BMF is one JSON object: benchmark name -> measure name -> ``{value, lower_value,
upper_value}``, the bounds optional. A benchmark here is one cell, named by what ran:
``study/workload/platform label/N instances``, the label carrying the accelerator (``qemu-virtio
(tcg)``), so that a run under another accelerator is another benchmark rather than a step in
the same line. Its measures are the cell's numeric metrics, each its per-instance mean with the
95% interval of the mean (``MetricResult.single``), and, for a platform other than the baseline,
``<metric> % of <baseline>``: % of native with its interval (Fieller's), the figure that stays
comparable when the host itself drifts. A signed figure (``memory.overhead_mib``) has its
difference from the baseline instead, ``<metric> difference from <baseline>``. Bounds that are
not finite (not tested, unbounded) are left out, as BMF allows; so is a figure with no finite
value.
Bencher tells a measure by its name up to 64 characters and a benchmark by its name up to 1024:
hvbench's metric names are far shorter.
"""

from __future__ import annotations

import json
import math

from hvbench.analysis.model import MetricResult, RunAnalysis


def benchmark_name(a: RunAnalysis, r: MetricResult) -> str:
    """The BMF benchmark of a figure's cell."""
    n = r.cell.instances
    return (
        f"{a.study_name}/{r.cell.workload}/{a.label(r.cell.platform)}/"
        f"{n} instance{'s' if n > 1 else ''}"
    )


def _metric(value: float, low: float, high: float) -> dict[str, float] | None:
    """A BMF metric; None without a finite value, bounds only where both are finite."""
    if not math.isfinite(value):
        return None
    out = {"value": float(value)}
    if math.isfinite(low) and math.isfinite(high):
        out.update(lower_value=float(low), upper_value=float(high))
    return out


def _measures(a: RunAnalysis, r: MetricResult) -> dict[str, dict[str, float]]:
    """The figure's own mean and, off the baseline, its figure against the baseline."""
    s = r.single
    found = {r.name: _metric(s.mean, s.ci_low, s.ci_high)}
    v = r.vs_baseline
    if v is not None and not v.reference and a.baseline is not None:
        if v.signed:
            found[f"{r.name} difference from {a.baseline}"] = _metric(
                v.difference, v.difference_low, v.difference_high
            )
        else:
            found[f"{r.name} % of {a.baseline}"] = _metric(v.pct_of_native, v.pct_low, v.pct_high)
    return {k: m for k, m in found.items() if m is not None}


def render(a: RunAnalysis) -> str:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in a.results:
        measures = _measures(a, r)
        if measures:
            out.setdefault(benchmark_name(a, r), {}).update(measures)
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"
