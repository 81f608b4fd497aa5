"""HTML: one self-contained file (inline CSS, JavaScript and SVG) that opens with no network.

In the order a reader looks: a line that counts the warnings and links to them, the verdicts
(the matrix of each platform's % of native per workload, coloured by what it reads as, then the
verdict's sentences), then per workload its plots and tables, network symmetry, host CPU cost
and the host's profile, then the warnings in full and the host's conditions, then the
provenance. Every string that came from a study, a host or a guest goes through Jinja2's
autoescaping; only the SVG that matplotlib wrote (itself escaped) is inserted as is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from hvbench.analysis.compare import Comparison
from hvbench.analysis.matrix import MEANINGS, SUSPECT
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.readings import Reading
from hvbench.analysis.verdict import verdicts
from hvbench.report.comparison import changes_table, summary_lines
from hvbench.report.summary import (
    boot_line,
    column_title,
    elsewhere,
    legend,
    matrix_title,
    summarize,
)
from hvbench.report.tables import (
    Table,
    claims_table,
    conditions_table,
    cost_table,
    host_table,
    muted,
    profile_tables,
    provenance,
    symmetry_table,
    warnings,
    workload_tables,
)

ENV = Environment(
    loader=PackageLoader("hvbench", "report/templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=False,
    lstrip_blocks=False,
)

READING_CLASS = {
    Reading.LOSS: "loss",
    Reading.SMALL_LOSS: "small-loss",
    Reading.GAIN: "gain",
    Reading.SMALL_GAIN: "small-gain",
    Reading.MIXED: "mixed",
    Reading.EQUIVALENT: "same",
    Reading.INCONCLUSIVE: "unsure",
    Reading.NOT_TESTED: "untested",
    Reading.LEFT_OUT: "untested",
    Reading.NOT_A_WIN: "untested",
}
"""The matrix's cells' CSS class of each reading (``matrix.MARKS``): the stylesheet's colour."""


@dataclass
class _Section:
    name: str
    plots: list[Markup]
    tables: list[Table]


def _svg(text: str | None) -> list[Markup]:
    return [] if text is None else [Markup(text)]


def _pretty(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def render(a: RunAnalysis) -> str:
    from hvbench.report import plots  # matplotlib: half a second to import, for HTML only

    sections = []
    for w in a.workloads():
        # bars at the smallest count (the seeds' "1 VM" figures); other counts are in the
        # scaling figure, so the file stays quick to make and to read
        figs = _svg(plots.bars(a, w, min(a.counts(w)))) + _svg(plots.scaling(a, w))
        sections.append(_Section(w, figs, workload_tables(a, w)))
    platforms = {a.label(c.platform): c.platform_settings for c in a.cells}
    workloads = {c.workload: c.workload_settings for c in a.cells}
    summary = summarize(a)
    return ENV.get_template("report.html.j2").render(
        a=a,
        title=f"hvbench report: {a.study_name}",
        started=a.created_at.strftime("%Y-%m-%d %H:%M") if a.created_at else "",
        hostname=a.inventory.name,
        verdicts=verdicts(a),
        summary=summary,
        matrix_title=matrix_title(summary),
        columns={w: column_title(summary, w) for w in summary.workloads},
        legend=legend(summary),
        elsewhere=elsewhere(summary),
        boot_line=boot_line(summary) if summary.boots else None,
        meanings=MEANINGS,
        reading_class=READING_CLASS,
        warnings=warnings(a),
        conditions_table=conditions_table(a),
        claims_table=claims_table(a),
        workloads=sections,
        symmetry_table=symmetry_table(a),
        symmetry_plot=next(iter(_svg(plots.symmetry(a))), None),
        host_table=host_table(a),
        cost_table=cost_table(a),
        host_plot=next(iter(_svg(plots.host_cpu(a))), None),
        profile_tables=profile_tables(a),
        provenance=provenance(a),
        platforms=[(k, _pretty(v)) for k, v in platforms.items()],
        workload_settings=[(k, _pretty(v)) for k, v in workloads.items()],
        artifacts=[(k, _pretty(v)) for k, v in sorted(a.artifacts.items())],
        muted=muted,
        suspect_mark=SUSPECT,
        baseline_label=a.label(a.baseline) if a.baseline else None,
    )


def render_comparison(c: Comparison) -> str:
    return ENV.get_template("compare.html.j2").render(
        c=c,
        title=f"hvbench compare: {Comparison.label(c.b)} against {Comparison.label(c.a)}",
        lines=summary_lines(c),
        table=changes_table(c),
    )
