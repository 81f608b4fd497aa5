"""``hvbench run``: run a study (or resume a run) with a live progress display."""

from __future__ import annotations

import functools
import json
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import platformdirs
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.text import Text

from hvbench.analysis import analyse, series
from hvbench.analysis.run_analysis import headline_singles
from hvbench.analysis.settling import needs_more
from hvbench.cli.lines import console
from hvbench.cli.options import DbOption, require_root
from hvbench.errors import HvbenchError
from hvbench.report import write_report
from hvbench.report.summary import Summary, print_summary, print_wrapped, summarize
from hvbench.store import Store, TimeRecord

if TYPE_CHECKING:
    from hvbench.runner import SampleProgress

err = console(stderr=True)
REPORTS = platformdirs.user_data_path("hvbench") / "reports"
"""Where the HTML report of every run is written, next to the default store."""


LabelOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="KEY=VALUE",
        help="a label stored with the run (repeatable): the build under test, say "
        "qemu=10.0.2; `hvbench history --by label:KEY` orders runs by it",
    ),
]
"""``--label``, of a run and of every host's run of a fleet."""


def tell(line: str) -> None:
    """One line for the user on stderr, as written: the runner's messages and the run's
    warnings, above the progress bar while it is drawn."""
    err.print(line, soft_wrap=True)


def run(
    study_file: Annotated[
        Path | None, typer.Argument(metavar="[STUDY]", help="study file (default: built in)")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="a smoke run: every workload shortened, one repetition")
    ] = False,
    db: DbOption = None,
    resume: Annotated[
        str | None, typer.Option(metavar="RUN_ID", help="continue an interrupted run")
    ] = None,
    fleet: Annotated[
        str | None,
        typer.Option(
            metavar="FLEET",
            help="this host's part of a fleet run (hvbench fleet run): resumed if unfinished, "
            "not run again if finished",
        ),
    ] = None,
    fleet_host: Annotated[
        str, typer.Option(help="the host's name in the fleet (its Ansible inventory name)")
    ] = platform.node(),
    label: LabelOption = None,
    report: Annotated[
        bool,
        typer.Option(
            help="analyse the run and write its HTML report at the end; --no-report only "
            "stores the results, for `hvbench report` wherever the store is read (a machine "
            "too slow to analyse in good time, such as a nested lab)"
        ),
    ] = True,
    skip_unavailable: Annotated[
        bool,
        typer.Option(
            help="leave out, saying so, the study's platforms this host cannot run (as "
            "`hvbench doctor` finds them) rather than refuse the run; the default study does"
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            help="where another run measures on this host, wait for it to end rather than "
            "refuse (two runs at once measure each other)"
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="end with the run's summary as one JSON document on stdout (its matrix, "
            "claims, warnings, time and report), `run <RUN_ID>` on stderr",
        ),
    ] = False,
) -> None:
    """Run a study: `run <RUN_ID>` first; last, one screen: each platform's % of native per
    workload, the claims, the warnings counted, where the time went and the report's path."""
    from hvbench.host.resources import state_dir
    from hvbench.session import FleetPart, NewRun, Resume, RunSession
    from hvbench.study import default_study, load_study

    started = time.monotonic()
    require_root("run", "a run makes network namespaces, taps, mounts, loop devices and cgroups")
    state_dir()  # before anything is said or examined: a run cannot start without it
    labels = parse_labels(label or [])
    if labels and resume:
        raise HvbenchError("--label is for a new run; a resumed run keeps the labels it had")
    store = Store(db)
    earlier = store.fleet_runs(fleet).get(fleet_host) if fleet else None
    if earlier is not None and earlier.status == "finished":
        print(f"run {earlier.id}: finished, in fleet {fleet} already", flush=True)
        return
    start: NewRun | Resume
    if earlier is not None:
        start = Resume(earlier.id)
    elif resume:
        if study_file is not None:
            raise HvbenchError("--resume takes the study stored with the run; give no STUDY")
        start = Resume(resume)
    else:
        study = default_study() if study_file is None else load_study(study_file)
        part = FleetPart(fleet, fleet_host) if fleet else None
        skip = skip_unavailable or study_file is None  # the default names every platform
        start = NewRun(study, quick, labels, part, skip)
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ETA {task.fields[eta]}"),
        console=err,
        transient=False,
    )
    session = RunSession.preflight(
        store,
        start,
        on_progress=functools.partial(draw, bar, bar.add_task("starting", total=None, eta="?")),
        on_message=tell,
        judge=imprecise_cells,
        started=started,
        wait=wait,
    )
    if as_json:
        tell(f"run {session.run_id}")
    else:
        print(f"run {session.run_id}", flush=True)
    with bar:
        result = session.run()
    end = session.finish(result, reported if report else None)
    if as_json:
        ended = {
            "run": session.run_id,
            "status": end.status,
            "failed_samples": end.failed_samples,
            "report": None if end.made is None else str(end.made.html),
            "time": end.time.to_json(),
            "summary": None if end.made is None else end.made.summary.as_json(),
        }
        print(json.dumps(ended, indent=2, ensure_ascii=False))
    else:
        run_id, made = session.run_id, end.made
        said = f"report: {made.html}" if made else f"no report (hvbench report {run_id} makes it)"
        last = f"run {run_id}: {end.status}, {end.failed_samples} failed sample(s); {said}"
        print_end(console(), run_id, made.summary if made else None, end.time, last)
    if end.status == "failed":
        sys.exit(1)


def draw(bar: Progress, task: TaskID, p: SampleProgress) -> None:
    """One sample's line above the progress bar, and the bar moved on."""
    cell = f"{p.cell.platform} × {p.cell.instances} {p.cell.workload}"
    line = Text(f"rep {p.repetition} {cell}: {p.status}")
    if p.status != "ok":
        line.append(f"  failed: {p.error}", style="red")
    bar.console.print(line)
    bar.update(
        task,
        total=p.total,
        completed=p.done,
        description=f"{p.cell.platform} {p.cell.workload}",
        eta=f"{p.eta_s / 60:.1f} min",
    )


@dataclass(frozen=True)
class Reported:
    """What ``hvbench run`` makes of a finished run: its HTML report and its summary."""

    html: Path
    summary: Summary


def reported(store: Store, run_id: str) -> Reported:
    """The run analysed, its figures kept for the history (which reads them rather than
    analysing it again), its HTML report written and its summary made."""
    analysis = analyse(store, run_id)
    series.keep(store, analysis)
    html = write_report(store, run_id, REPORTS / f"{run_id}.html", analysis=analysis)
    return Reported(html, summarize(analysis))


def imprecise_cells(store: Store, run_id: str, ci_target: float, max_count: float) -> set[str]:
    """The session's judge of precision (``session.PrecisionJudge``): keys of cells with fewer
    than ``ADAPTIVE_MIN_N`` repetitions or a headline metric whose CI (over repetitions,
    instances averaged) is still wider than the target, among those with fewer than
    ``max_count``. Side figures (a retransmits count) do not keep a cell going."""
    cells = {c.id: c for c in store.cells(run_id)}
    singles = headline_singles(store.metric_rows(run_id), cells)
    return {
        cells[cell_id].key
        for (cell_id, _), single in singles.items()
        if needs_more(list(single), ci_target, max_count=max_count)
    }


def print_end(
    console: Console, run_id: str, summary: Summary | None, spent: TimeRecord, last: str
) -> None:
    """A run's end for a person, one screen: its summary (``report.summary``), where its time
    went (wrapped at the console's width), and ``last``, its outcome and the report's path, on
    one line whatever its length (a path cut in two cannot be copied); every table is in the
    report."""
    names: dict[str, str] = {}
    if summary is not None:
        print_summary(console, summary, f"hvbench report {run_id}")
        names = summary.names
    for line in time_lines(spent, names):
        print_wrapped(console, line)
    console.print(last, soft_wrap=True)


def time_lines(t: TimeRecord, names: dict[str, str] | None = None) -> list[str]:
    """Where the run's time went, in three lines: its total, the steps, the workloads (by
    ``names`` where given: a label can take a line of its own); each part longest first."""

    def parts(seconds: dict[str, float]) -> str:
        longest = sorted(seconds.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{(names or {}).get(k, k)} {span(v)}" for k, v in longest) or "none"

    return [
        f"time: {span(t.total_s)} in all",
        f"  {parts({**t.steps, 'other': t.other_s()})}",
        f"  workloads: {parts(t.workloads)}",
    ]


def span(seconds: float) -> str:
    """ "9 min 25 s", "48 s"."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


LABEL_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def parse_labels(given: list[str]) -> dict[str, str]:
    """``--label KEY=VALUE`` options as a dict; a malformed or repeated key is one clear line."""
    labels: dict[str, str] = {}
    for item in given:
        key, eq, value = item.partition("=")
        if not eq or not LABEL_KEY.fullmatch(key) or not value:
            raise HvbenchError(
                f"--label {item!r}: give KEY=VALUE, KEY of letters, digits, '_', '.' or '-' "
                "(qemu=10.0.2)"
            )
        if key in labels:
            raise HvbenchError(f"--label {key} given twice ({labels[key]!r}, {value!r})")
        labels[key] = value
    return labels
