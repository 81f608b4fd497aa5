"""JSON lines: one sample per line, the shape of PerfKitBenchmarker's samples as its JSON
publisher writes them with ``--collapse_labels=false`` (metric, value as a float, unit, metadata,
timestamp in seconds since the epoch, and what its SampleCollector adds: test, product_name,
official, owner, run_uri, sample_uri), so that dashboards that read those read hvbench's too.
``owner`` is null (hvbench does not record who ran a study), ``official`` false, ``value`` null
only for a figure the tool printed no number for (its text in the metadata).

One line per metric of one instance in one repetition. Its metadata names what ran: ``accel``
(kvm or tcg, pv/pvh/hvm, systrap/ptrace; null for drivers with nothing to choose), ``label``
(the name the report gives the platform) and ``platform_settings`` (the settings that define
it); and it carries the cell's per-instance figure against the baseline, so that no line can be
read without its uncertainty: ``pct_of_baseline`` (% of native, 100 = native, less is worse),
its 95% interval ``pct_of_baseline_ci_low``/``_high`` (Fieller's; null when not tested or
unbounded), ``n``/``n_baseline`` (repetitions on each side) and ``vs_baseline``: loss, gain, no
significant difference (the interval within ±5%), inconclusive (null bounds: unbounded), not
tested (fewer than 2 repetitions on a side, or identical ones of unknown resolution) or
baseline; ``pct_of_baseline_ci_clipped`` where its lower bound was raised to 0 (a ratio of
figures that cannot be negative), and, for a figure that can be below 0 (``memory.overhead_mib``),
``difference_from_baseline`` in its unit with ``difference_ci_low``/``_high`` instead of a
ratio. ``resolution`` is the smallest change of the cell's mean its measurement can show
(null: unknown), and ``identical_repetitions`` is "below the measurement's resolution" or
"identical repetitions: resolution unknown" where the repetitions show no spread it resolves,
else null. Other derived figures (aggregates, per-core costs) are the CSV's business.

Each claim of the study (``expect:``) and each SLO of a consolidation is a line too: metric
``claim``, its measured figure (in ``unit``; % for a % of native), its metadata the claim, its
bound and source, the 95% interval, the p-values (raw and Holm's over the run's claims), the
outcome (held, refuted, inconclusive) and the repetitions that would settle an inconclusive one.

Each cell of the run's matrix (a platform's headline % of native for a workload, the figure its
verdict states) is a line too: metric ``verdict``, with its interval, reading (loss, gain, no
significant difference, inconclusive, not tested, left out, not a win) and printed text.

Each platform's density ascents (consolidation's ``sets: auto``) are a line too: metric
``<workload>.density_sets``, the median of the steps its ascents held, with its 95% interval
``ci_low``/``ci_high`` (order statistics of the median; null below 6 ascents, ``interval``
saying why, "not tested" at one) and each ascent's steps and stop.

Where the study profiled the host, each function of a platform's profile (``profiles``) is a
line too: metric ``host.profile.share``, its % of the host's CPU time, with ``rank``,
``symbol``, ``dso``, ``samples``, ``profile_samples`` and ``profiled_samples`` in its metadata.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime

from hvbench.analysis import claims
from hvbench.analysis.compare import Comparison
from hvbench.analysis.model import MetricResult, RunAnalysis
from hvbench.analysis.verdict import density_interval
from hvbench.report.comparison import platform_label, ran_on
from hvbench.report.summary import summarize


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
            "platform_settings": c.provenance.settings,
            "workload": c.workload,
            "instances": c.instances,
            "baseline": a.baseline,
            "hvbench_version": a.hvbench_version,
        }
        for c in a.cells
    }
    names = {c.id: c.workload_name for c in a.cells}
    versus = {(r.cell.id, r.name): _versus(r) for r in a.results}
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
        meta.update(versus.get((m.cell_id, m.name), {}))
        if m.text is not None:
            meta["text"] = m.text
        lines.append(
            {
                "metric": m.name,
                "value": m.value,
                "unit": m.unit,
                "metadata": meta,
                "timestamp": _epoch(when),
                "test": names[m.cell_id],
            }
        )
    lines += _profile_lines(a)
    lines += _density_lines(a)
    lines += _claim_lines(a)
    lines += _verdict_lines(a)
    return "".join(
        json.dumps(_sample(a, i, x), ensure_ascii=False) + "\n" for i, x in enumerate(lines)
    )


def _sample(a: RunAnalysis, index: int, line: dict) -> dict:
    """A line completed with the fields PerfKitBenchmarker's SampleCollector adds to each sample
    (``product_name``, ``official``, ``owner``, ``run_uri``, ``sample_uri``) and a timestamp
    (the run's start where the line has none of its own): ``sample_uri`` is derived from the run
    and the line's place, so that the same run exports the same file."""
    return {
        **line,
        "value": None if line["value"] is None else float(line["value"]),
        "timestamp": line["timestamp"] if line["timestamp"] is not None else _epoch(a.created_at),
        "product_name": "hvbench",
        "official": False,
        "owner": None,
        "run_uri": a.run_id,
        "sample_uri": str(uuid.uuid5(uuid.NAMESPACE_URL, f"hvbench:{a.run_id}:{index}")),
    }


def _density_lines(a: RunAnalysis) -> list[dict]:
    """One line per ascending workload and platform (``RunAnalysis.densities``): the median
    of the steps its ascents held (None: no ascent measured the platform) with its 95% interval
    (``ci_low``/``ci_high``, order statistics of the median: null below 6 counted ascents, and
    ``interval`` says why), the host CPU there, their spread, and each ascent's steps and stop
    with its cause."""
    lines = []
    for d in a.densities:
        low, high = d.interval
        meta = {
            "study": a.study_name,
            "platform": d.platform,
            "accel": a.ran.get(d.platform),
            "label": a.label(d.platform),
            "workload": d.workload,
            "baseline": a.baseline,
            "hvbench_version": a.hvbench_version,
            "instances": d.instances(d.units_held),
            "host_cpu_pct": None if (cpu := d.cpu_at(d.units_held)) is None else 100 * cpu.busy,
            "ci_low": _finite(low),
            "ci_high": _finite(high),
            "interval": density_interval(d) if d.counted else None,
            "spread": d.spread,
            "ascents": [
                {
                    "ascent": c.number,
                    "steps": c.units_held,
                    "counted": c.counted,
                    "stopped_by": c.stopped_by,
                    "stopped_step": c.units_at_stop,
                    **(c.stop.to_json() if c.stop else {}),
                }
                for c in d.climbs
            ],
        }
        line = {
            "metric": f"{d.workload_name}.density_{d.unit}",
            "value": d.units_held,
            "unit": d.unit,
            "metadata": meta,
            "timestamp": None,
            "test": d.workload_name,
        }
        lines.append(line)
    return lines


def _claim_lines(a: RunAnalysis) -> list[dict]:
    """One line per judged claim (``RunAnalysis.claims``): metric ``claim``, its measured
    figure as the value (null: not measured), everything else in its metadata
    (``claims.as_json``: the claim, its bound, interval, p-values and outcome)."""
    return [
        {
            "metric": "claim",
            "value": None if math.isnan(j.estimate) else j.estimate,
            "unit": j.unit,
            "metadata": {"study": a.study_name, "baseline": a.baseline, **claims.as_json(j)},
            "timestamp": None,
            "test": "claims",
        }
        for j in a.claims
    ]


def _verdict_lines(a: RunAnalysis) -> list[dict]:
    """One line per cell of the run's matrix (``report.summary``): metric ``verdict``, the
    platform's headline % of the baseline as the value (null: none, or a difference), its
    interval, reading and printed text in the metadata (``MatrixCell.as_json``), the same data as
    ``hvbench run --json`` gives."""
    return [
        {
            "metric": "verdict",
            "value": v.pct,
            "unit": "%",
            "metadata": {"study": a.study_name, "baseline": a.baseline, **v.as_json()},
            "timestamp": None,
            "test": "verdicts",
        }
        for v in summarize(a).verdicts
    ]


def _profile_lines(a: RunAnalysis) -> list[dict]:
    """One line per function of each platform's profile (``RunAnalysis.profiles``)."""
    lines = []
    for p in a.profiles:
        for rank, f in enumerate(p.functions, 1):
            meta = {
                "study": a.study_name,
                "platform": p.platform,
                "accel": a.ran.get(p.platform),
                "label": a.label(p.platform),
                "workload": p.workload,
                "baseline": a.baseline,
                "hvbench_version": a.hvbench_version,
                "rank": rank,
                "symbol": f.symbol,
                "dso": f.dso,
                "samples": f.samples,
                "profile_samples": p.samples,
                "profiled_samples": p.profiles,
            }
            line = {
                "metric": "host.profile.share",
                "value": f.percent,
                "unit": "%",
                "metadata": meta,
                "timestamp": None,
                "test": "profile",
            }
            lines.append(line)
    return lines


def _versus(r: MetricResult) -> dict:
    """The cell's single figure against the baseline, for every line of that metric, with the
    resolution of its mean and whether its repetitions are identical within it."""
    precision = {"resolution": r.single.resolution, "identical_repetitions": r.single.identical}
    v = r.vs_baseline
    if v is None:
        return {"n": r.single.n, **precision}
    return {
        **precision,
        "n": v.n,
        "n_baseline": v.n_baseline,
        "pct_of_baseline": _finite(v.pct_of_native),
        "pct_of_baseline_ci_low": _finite(v.pct_low),
        "pct_of_baseline_ci_high": _finite(v.pct_high),
        "pct_of_baseline_ci_clipped": v.clipped,
        **(
            {
                "difference_from_baseline": _finite(v.difference),
                "difference_ci_low": _finite(v.difference_low),
                "difference_ci_high": _finite(v.difference_high),
            }
            if v.signed
            else {}
        ),
        "vs_baseline": v.reading(),
    }


def render_comparison(c: Comparison) -> str:
    """One line per shared metric: the change, relative (a signed figure's also as a
    ``difference`` in its unit), its interval (null where not tested or unbounded:
    ``ci_bounded`` tells which; ``ci_clipped``: a lower bound raised to 0), Welch's p-value raw
    and adjusted by Holm's step-down within its family (``family``: headline, which gates the
    exit code, or other; ``significant_before_correction``;
    ``significant_only_at_assumed_allowance``), the smallest change it could have
    detected, the repetitions a run and runs a side that would settle it, the run-to-run
    allowance and its source, and the verdict."""
    lines = []
    families = {True: len(c.family(True)), False: len(c.family(False))}
    for ch in c.changes:
        r = ch.judged.ratio
        lines.append(
            json.dumps(
                {
                    "metric": ch.name,
                    "value": _finite(ch.change),
                    "unit": "relative change",
                    "metadata": {
                        "run_a": Comparison.label(c.a),
                        "run_b": Comparison.label(c.b),
                        "observations": "runs" if c.by_run else "repetitions",
                        "allowance": ch.allowance,
                        "allowance_source": c.allowance.source,
                        "allowance_runs": list(c.allowance.runs),
                        "platform": ch.platform,
                        "label": platform_label(c, ch.platform),
                        "accel_a": ran_on(c.a, ch.platform),
                        "accel_b": ran_on(c.b, ch.platform),
                        "workload": ch.workload,
                        "same_work": ch.workload not in c.work_apart,
                        "instances": ch.instances,
                        "unit": ch.unit,
                        "higher_is_better": ch.higher_is_better,
                        "n_a": r.n_a,
                        "n_b": r.n_b,
                        "mean_a": ch.a.mean,
                        "mean_b": ch.b.mean,
                        "ci_low": _finite(ch.ci_low),
                        "ci_high": _finite(ch.ci_high),
                        "ci_bounded": r.bounded,
                        "ci_clipped": r.clipped,
                        "signed": ch.signed,
                        "difference": _finite(r.estimate) if ch.signed else None,
                        "difference_ci_low": _finite(r.low) if ch.signed else None,
                        "difference_ci_high": _finite(r.high) if ch.signed else None,
                        "confidence": 1 - c.alpha,
                        "p_value": _finite(r.p_value),
                        "p_holm": _finite(ch.judged.p_holm),
                        "correction": "holm",
                        "family": "headline" if ch.headline else "other",
                        "family_size": families[ch.headline],
                        "gating": ch.headline,
                        "detectable": _finite(ch.judged.detectable),
                        "significant_before_correction": ch.judged.before_correction,
                        "significant_only_at_assumed_allowance": ch.judged.assumed_only,
                        "repetitions_to_settle": ch.judged.repetitions,
                        "runs_to_settle": ch.judged.runs,
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
