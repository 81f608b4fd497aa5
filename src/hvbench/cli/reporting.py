"""``hvbench report`` and ``hvbench compare``: the store's runs as tables, plots and verdicts.

Exit codes: 0 ok, 1 a significant regression (compare only, so it can gate an upgrade in CI),
2 bad input (HvbenchError, one line), 3 no regression but a headline metric inconclusive
(compare only); ``hvbench claims``: 1 a claim refuted, 3 none refuted but one inconclusive.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from hvbench.analysis import RunAnalysis, analyse
from hvbench.analysis import claims as claims_of
from hvbench.analysis.compare import ALLOWANCE, THRESHOLD, Allowance, Comparison
from hvbench.analysis.compare import compare as compare_runs
from hvbench.analysis.history import measured
from hvbench.analysis.model import INCONCLUSIVE, OUTCOMES, REFUTED, JudgedClaim
from hvbench.cli.options import DbOption
from hvbench.errors import HvbenchError
from hvbench.report import emit, render, render_comparison, site
from hvbench.store import Store

FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        help="md, json (JSON lines: PerfKitBenchmarker's samples), csv, html or bmf (Bencher "
        "Metric Format)",
    ),
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="file to write (default: stdout)")
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


def publish(
    directory: Annotated[Path, typer.Argument(help="the site's directory (made if missing)")],
    db: DbOption = None,
    jobs: Annotated[
        int | None, typer.Option(help="processes making run reports (default: one per core)")
    ] = None,
) -> None:
    """A static site of the store's history: trends with their change points, every run's report.

    Each study on each host, its headline metrics' trends with their change points, and every
    run's report. Works from file:// and any web server; loads nothing from the network. Run
    reports already there are kept unless their run or hvbench changed."""
    done = site.publish(Store(db), directory, jobs)
    print(
        f"{done.index} ({len(done.pages)} histor{'y' if len(done.pages) == 1 else 'ies'}; "
        f"run reports: {done.reports_written} written, {done.reports_copied} copied from "
        f"the runs' own, {done.reports_kept} kept, {len(done.no_report)} without one)"
    )


def compare(
    run_a: Annotated[
        str,
        typer.Argument(
            help="the reference run (before); several: comma-separated ids; a fleet run's "
            "name (its hosts' runs) or FLEET/HOST"
        ),
    ],
    run_b: Annotated[
        str, typer.Argument(help="the run to judge (after); several: comma-separated ids")
    ],
    format: Annotated[str, typer.Option("--format", "-f", help="md, json or html")] = "md",
    output: OutputOption = None,
    threshold: Annotated[
        float,
        typer.Option(help="practical threshold: smaller relative changes are not regressions"),
    ] = THRESHOLD,
    allowance: Annotated[
        float | None,
        typer.Option(
            help="run-to-run standard deviation of a run's mean, relative, with one run per "
            "side (default: measured from earlier runs of the study on this host in the store, "
            f"else {ALLOWANCE} assumed; 0 for a run against itself)"
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Is B faster or slower than A, metric by metric, beyond noise?

    Each change gets a 99% interval; a regression is a headline metric (★ in docs/metrics.md:
    the cpu sub-scores, throughputs, kernbench's time) worse by more than the threshold, past
    Holm's step-down over the headline metrics. With one run per side the repetitions are the
    observations and a run-to-run allowance widens the interval (measured from earlier runs of
    the study on this host where the store has them, and said where from); with several runs
    per side (comma-separated) each run's mean is one observation. Where the data cannot
    decide, it says how many repetitions or runs would. Sounder still, to gate a change: A and
    B as two platforms of one study, their repetitions interleaved on the same host, so that
    what the host does between runs falls on both alike and no allowance is needed.

    Exit codes: 0 no regression, every headline metric settled; 1 a significant regression;
    2 bad input; 3 no regression, but a headline metric inconclusive or not tested.
    """
    store = Store(db)

    def runs(ids: str) -> list[RunAnalysis]:
        picked = [run_id for item in ids.split(",") if item.strip() for run_id in _runs(item)]
        return [analyse(store, run_id) for run_id in picked]

    def _runs(item: str) -> list[str]:
        """A run id, a fleet run's name (its hosts' runs) or FLEET/HOST (one host's run)."""
        item = item.strip()
        if fleet := store.fleet_runs(item):
            return [run.id for _, run in sorted(fleet.items())]
        name, _, host = item.rpartition("/")
        if name and (run := store.fleet_runs(name).get(host)):
            return [run.id]
        return [item]

    side_a, side_b = runs(run_a), runs(run_b)
    allowed: float | Allowance | None = allowance
    one_each = len(side_a) == 1 == len(side_b)
    if allowance is None and one_each and side_a[0].run_id != side_b[0].run_id:
        allowed = measured(store, side_a[0], side_b[0])
    result = compare_runs(side_a, side_b, threshold=threshold, allowance=allowed)
    emit(render_comparison(result, format), output)
    if code := compare_exit(result):
        raise typer.Exit(code)


def claims(
    run_id: Annotated[str, typer.Argument(help="run id, or 'latest'")] = "latest",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: DbOption = None,
) -> None:
    """Judge a stored run's claims again: held, refuted or inconclusive, by their 95% intervals.

    The claims are its study's expect: and its SLOs, each interval set against its bound, the
    run's claims one family (Holm's step-down); an inconclusive one comes with the repetitions
    that would settle it.

    Exit codes: 0 every claim held; 1 a claim refuted; 2 bad input (or nothing to judge);
    3 none refuted, but one inconclusive.
    """
    a = analyse(Store(db), run_id)
    if not a.claims:
        raise HvbenchError(
            f"run {a.run_id}: its study expects nothing (no expect:) and has no SLOs; "
            "add claims to the study (docs/guide/claims.md)"
        )
    if as_json:
        print(json.dumps([claims_of.as_json(j) for j in a.claims], indent=2, ensure_ascii=False))
    else:
        counts = [f"{sum(j.outcome == o for j in a.claims)} {o}" for o in OUTCOMES]
        print(f"run {a.run_id}: {len(a.claims)} claims: {', '.join(counts)}")
        for j in a.claims:
            print(j.line())
    if code := claims_exit(a.claims):
        raise typer.Exit(code)


def compare_exit(result: Comparison) -> int:
    """``hvbench compare``: 1 a headline regression; 3 none, but a headline metric inconclusive;
    else 0. How the process ends is the CLI's to say; the analysis says what changed."""
    return 1 if result.regressions else 3 if result.unsettled else 0


def claims_exit(found: Sequence[JudgedClaim]) -> int:
    """``hvbench claims``: 1 a claim refuted; 3 none, but one inconclusive; else 0."""
    outcomes = {j.outcome for j in found}
    return 1 if REFUTED in outcomes else 3 if INCONCLUSIVE in outcomes else 0
