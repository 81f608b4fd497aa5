"""``hvbench report`` and ``hvbench compare``: the store's runs as tables, plots and verdicts.

Exit codes: 0 ok, 1 a significant regression (compare only, so it can gate an upgrade in CI),
2 bad input (HvbenchError, one line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hvbench.analysis import analyse
from hvbench.analysis.compare import THRESHOLD
from hvbench.analysis.compare import compare as compare_runs
from hvbench.report import emit, render, render_comparison
from hvbench.store import Store

FormatOption = Annotated[
    str, typer.Option("--format", "-f", help="md, json (JSON lines), csv or html")
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="file to write (default: stdout)")
]
DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL of the store (default: SQLite)")
]


def report(
    run_id: Annotated[str, typer.Argument(help="run id, or 'latest'")] = "latest",
    format: FormatOption = "md",
    output: OutputOption = None,
    db: DbOption = None,
) -> None:
    """Tables, plots and verdicts of a run, from the store."""
    store = Store(db)
    emit(render(analyse(store, run_id), format), output)


def compare(
    run_a: Annotated[str, typer.Argument(help="the reference run (before)")],
    run_b: Annotated[str, typer.Argument(help="the run to judge (after)")],
    format: Annotated[str, typer.Option("--format", "-f", help="md, json or html")] = "md",
    output: OutputOption = None,
    threshold: Annotated[
        float, typer.Option(help="noise threshold: smaller relative changes are not called")
    ] = THRESHOLD,
    db: DbOption = None,
) -> None:
    """Is B faster or slower than A, metric by metric, and is that significant? Exit code 1 on a
    significant regression."""
    store = Store(db)
    result = compare_runs(analyse(store, run_a), analyse(store, run_b), threshold=threshold)
    emit(render_comparison(result, format), output)
    if result.regressions:
        raise typer.Exit(1)
