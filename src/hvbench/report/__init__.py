"""Reports of a run in every format (hyperfine-style: one exporter module per format).

Each format module has ``render(analysis) -> str``; those that can show a comparison of two
runs also have ``render_comparison(comparison) -> str``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hvbench.analysis.cache import ANALYSIS, run_key
from hvbench.analysis.compare import Comparison
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.run_analysis import analyse
from hvbench.errors import HvbenchError
from hvbench.report import bmf, csv, html, jsonl, markdown
from hvbench.store import Store

EXPORTERS: dict[str, Callable[[RunAnalysis], str]] = {
    "md": markdown.render,
    "json": jsonl.render,
    "csv": csv.render,
    "html": html.render,
    "bmf": bmf.render,
}
COMPARE_EXPORTERS: dict[str, Callable[[Comparison], str]] = {
    "md": markdown.render_comparison,
    "json": jsonl.render_comparison,
    "html": html.render_comparison,
}


Exporter = TypeVar("Exporter")


def _pick(table: dict[str, Exporter], fmt: str) -> Exporter:
    if fmt not in table:
        raise HvbenchError(f"--format {fmt!r}: expected one of {', '.join(table)}")
    return table[fmt]


def render(analysis: RunAnalysis, fmt: str) -> str:
    return _pick(EXPORTERS, fmt)(analysis)


def render_comparison(comparison: Comparison, fmt: str) -> str:
    return _pick(COMPARE_EXPORTERS, fmt)(comparison)


SUFFIXES = {".md": "md", ".jsonl": "json", ".json": "json", ".csv": "csv", ".html": "html"}


HTML_REPORT = "html report"
"""Where a run's HTML report was written when it ended, kept in the store under this name
(``Store.keep_derived``) with its digest: ``hvbench publish`` copies it rather than make it
again while it is current."""
REPORT_CODE = (*ANALYSIS, "report")
"""The packages a run's report is made by."""


def write_report(
    store: Store,
    run_id: str,
    output: Path,
    fmt: str | None = None,
    analysis: RunAnalysis | None = None,
) -> Path:
    """Write a run's report (format from ``fmt``, else from the file's suffix, else HTML): what
    ``hvbench run`` calls at the end of every run. Pass ``analysis`` if it is already made."""
    fmt = fmt or SUFFIXES.get(output.suffix.lower(), "html")
    analysis = analysis or analyse(store, run_id)
    text = render(analysis, fmt)
    emit(text, output)
    key = run_key(store.run(analysis.run_id), REPORT_CODE)
    if fmt == "html" and key is not None:
        digest = hashlib.sha256(text.encode()).hexdigest()
        where = {"path": str(output.resolve()), "sha256": digest}
        store.keep_derived(analysis.run_id, HTML_REPORT, key, where)
    return output


def emit(text: str, output: Path | None) -> None:
    """Write a report to ``output``, or to stdout without one."""
    if output is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise HvbenchError(f"cannot write the report to {output}: {e.strerror}") from None
