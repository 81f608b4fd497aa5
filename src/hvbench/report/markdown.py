"""Markdown: the tables in the seeds' shape, to paste into a wiki page or a ticket."""

from __future__ import annotations

from hvbench.analysis.compare import Comparison
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.verdict import verdicts
from hvbench.report.comparison import changes_table, summary_lines
from hvbench.report.tables import (
    Table,
    all_tables,
    claims_table,
    conditions_table,
    provenance,
    warnings,
)


def _cell(text: str) -> str:
    """Table cells cannot hold a pipe or a line break."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    lines = [f"### {_cell(t.title)}", ""]
    lines.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|")
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows)
    if t.notes:
        lines.append("")
        lines.extend(f"{_cell(n)}  " for n in t.notes)
    return "\n".join(lines)


def render(a: RunAnalysis) -> str:
    out = [f"# hvbench report: {_cell(a.study_name)} (run {a.run_id})", ""]
    found = warnings(a)
    if (count := found.summary()) is not None:
        out += [f"[{count}](#{found.anchor()}), after the results", ""]
    if lines := verdicts(a):
        out += ["## Verdict", "", *(f"- {_cell(v)}" for v in lines), ""]
    if (claims := claims_table(a)) is not None:
        out += ["## Claims", "", table_markdown(claims).removeprefix("### Claims\n\n"), ""]
    out += ["## Tables", ""]
    for t in all_tables(a):
        out += [table_markdown(t), ""]
    if found.count():
        out += ["## Warnings", ""]
        out += [table_markdown(found.noise), ""] if found.noise else []
        out += [*(f"- {_cell(w)}" for w in found.lines), ""] if found.lines else []
    if (hc := conditions_table(a)) is not None:
        out += ["## Host conditions", ""]
        if hc.rows:
            out += [table_markdown(hc), ""]
        else:
            out += [f"{_cell(hc.title)}", ""] + [f"{_cell(n)}  " for n in hc.notes] + [""]
    out += ["## Provenance", "", "| | |", "|---|---|"]
    out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in provenance(a)]
    if a.commands:
        fence = "`" * 4  # longer than any ``` a command might hold
        out += ["", "### Commands", "", fence]
        out += [f"{tool}: {' '.join(argv)}".replace(fence, "'") for tool, argv in a.commands]
        out += [fence]
    return "\n".join(out) + "\n"


def render_comparison(c: Comparison) -> str:
    out = [f"# hvbench compare: {Comparison.label(c.b)} against {Comparison.label(c.a)}", ""]
    out += ["## Verdict", "", *(f"- {_cell(line)}" for line in summary_lines(c)), ""]
    out += [table_markdown(changes_table(c)), ""]
    for title, items in (("Only in A", c.only_a), ("Only in B", c.only_b)):
        if items:
            out += [f"## {title}", "", *(f"- {_cell(i)}" for i in items), ""]
    return "\n".join(out)
