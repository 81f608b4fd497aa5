"""JSON lines: one sample per line (metric, value, unit, metadata), the shape of
PerfKitBenchmarker's samples, so that dashboards that read those read hvbench's too.

One line per metric of one instance in one repetition; derived figures (aggregates, % of
native) are the CSV's business. Each line's metadata names what ran: ``accel`` (kvm or tcg,
pv/pvh/hvm, systrap/ptrace; null for drivers with nothing to choose), ``label`` (the name the
report gives the platform) and ``platform_settings`` (the settings that define it).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from hvbench.analysis.compare import Comparison
from hvbench.analysis.platforms import defining_settings
from hvbench.analysis.run import RunAnalysis
from hvbench.report.comparison import platform_label


def _epoch(when: datetime | None) -> float | None:
    """Seconds since the epoch; SQLite hands back naive datetimes, which the store wrote in UTC."""
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def render(a: RunAnalysis) -> str:
    cells = {
        c.id: {
            "study": a.study_name,
            "platform": c.platform,
            "driver": c.driver,
            "accel": c.accel,
            "label": a.label(c.platform),
            "platform_settings": defining_settings(c.platform_settings),
            "workload": c.workload,
            "instances": c.instances,
            "baseline": a.baseline,
            "hvbench_version": a.hvbench_version,
        }
        for c in a.cells
    }
    names = {c.id: c.workload_name for c in a.cells}
    lines = []
    for m in a.rows:
        when = a.started.get((m.cell_id, m.repetition))
        meta = {
            **cells[m.cell_id],
            "repetition": m.repetition,
            "instance": m.instance,
            "higher_is_better": m.higher_is_better,
            "headline": m.headline,
        }
        if m.text is not None:
            meta["text"] = m.text
        lines.append(
            json.dumps(
                {
                    "metric": m.name,
                    "value": m.value,
                    "unit": m.unit,
                    "metadata": meta,
                    "timestamp": _epoch(when),
                    "run_uri": a.run_id,
                    "test": names[m.cell_id],
                    "product_name": "hvbench",
                },
                ensure_ascii=False,
            )
        )
    return "\n".join(lines) + ("\n" if lines else "")


def render_comparison(c: Comparison) -> str:
    """One line per shared metric: the change, its CI, p-value and verdict."""
    lines = []
    for ch in c.changes:
        d = ch.diff
        lines.append(
            json.dumps(
                {
                    "metric": ch.name,
                    "value": _finite(d.change),
                    "unit": "relative change",
                    "metadata": {
                        "run_a": c.a.run_id,
                        "run_b": c.b.run_id,
                        "platform": ch.platform,
                        "label": platform_label(c, ch.platform),
                        "accel_a": c.a.ran.get(ch.platform),
                        "accel_b": c.b.ran.get(ch.platform),
                        "workload": ch.workload,
                        "instances": ch.instances,
                        "unit": ch.unit,
                        "higher_is_better": ch.higher_is_better,
                        "mean_a": ch.a.single.mean,
                        "mean_b": ch.b.single.mean,
                        "ci_low": _finite(d.ci_low),
                        "ci_high": _finite(d.ci_high),
                        "confidence": 1 - c.alpha,
                        "p_value": _finite(d.p_value),
                        "threshold": c.threshold,
                        "verdict": ch.verdict,
                    },
                },
                ensure_ascii=False,
            )
        )
    return "\n".join(lines) + ("\n" if lines else "")


def _finite(x: float) -> float | None:
    """JSON has no NaN: not applicable is null."""
    return x if math.isfinite(x) else None
