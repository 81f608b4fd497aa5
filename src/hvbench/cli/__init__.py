"""The command line: parse arguments, print progress, call the layers below.

Errors meant for the user (HvbenchError and its kin, a command line click cannot parse), and what
the host refuses (OSError: a path that cannot be made or written), end in one line on stderr and
exit code 2; a run with failed cells exits 1.

Each command loads what it measures (the session, the runner, doctor, the study, the drivers, the
host's tuning) only when it runs, in its body: typer reads every command's signature when the
command line is built, so a module-level import would load the measuring side for
``hvbench report`` too, which must work on a machine that runs no platform.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, NoReturn, TypedDict

import typer
from rich.table import Table

from hvbench import __version__, toolenv
from hvbench.cli import fleet as fleet_cmd
from hvbench.cli import history as history_cmd
from hvbench.cli import host as host_cmd
from hvbench.cli import image as image_cmd
from hvbench.cli import reporting
from hvbench.cli import run as run_cmd
from hvbench.cli.lines import console, print_finding
from hvbench.cli.options import DbOption, require_root
from hvbench.errors import HvbenchError
from hvbench.store import TIME, Store, TimeRecord

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Measure what a virtualization platform costs, against the same host running natively.",
)
study_app = typer.Typer(no_args_is_help=True, help="Check and show study files, and their schema.")
app.add_typer(study_app, name="study")
app.add_typer(image_cmd.app, name="image", help="Build, list and prune guest images.")
app.add_typer(fleet_cmd.app, name="fleet")
app.add_typer(fleet_cmd.store_app, name="store")
app.add_typer(host_cmd.app, name="host")
app.command("run")(run_cmd.run)
app.command("report")(reporting.report)
app.command("compare")(reporting.compare)
app.command("claims")(reporting.claims)
app.command("history")(history_cmd.history)
app.command("publish")(reporting.publish)

out = console()
err = console(stderr=True)


@app.command()
def version() -> None:
    """Print hvbench's version."""
    out.print(__version__)


@app.command()
def runs(db: DbOption = None, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the runs in the store."""
    store = Store(db)
    rows = store.runs()
    if as_json:
        times = store.artifact_of_runs(TIME)
        data = [
            {
                "id": r.id,
                "study": r.study_name,
                "status": r.status,
                "created_at": r.created_at.isoformat(),
                "finished_at": r.finished_at.isoformat() if r.finished_at else None,
                "hvbench_version": r.hvbench_version,
                "labels": r.labels,
                "time": _time_json(times.get(r.id)),
            }
            for r in rows
        ]
        print(json.dumps(data, indent=2))
        return
    table = Table("run", "study", "status", "started", "host")
    for r in rows:
        table.add_row(
            r.id, r.study_name, r.status, f"{r.created_at:%Y-%m-%d %H:%M}", r.inventory.name
        )
    out.print(table)


def _time_json(stored: dict | None) -> dict | None:
    """Where a run's time went (the artifact ``time``), with the part no step accounts for;
    None for a run stored before it was kept."""
    if stored is None:
        return None
    t = TimeRecord.from_json(stored)
    return {**t.to_json(), "other_s": t.other_s()}


@study_app.command("check")
def study_check(files: Annotated[list[Path], typer.Argument(help="study files")]) -> None:
    """Validate study files without running them."""
    from hvbench.host.profile import MISSING
    from hvbench.plan import misfits, this_host
    from hvbench.study import load_study

    for file in files:
        study = load_study(file)
        out.print(
            f"{file}: ok ({len(study.cells())} cells × {study.repetitions} repetitions)",
            soft_wrap=True,
        )
        for misfit in misfits(study, this_host()):
            err.print(f"{file}: warning: not on this host: {misfit}", soft_wrap=True)
        for line in study.ignored_counts() + study.short_jobs(quick=False):
            err.print(f"{file}: warning: {line}", soft_wrap=True)
        if study.profile and shutil.which("perf") is None:
            err.print(
                f"{file}: warning: profile: {MISSING}; runs here will have no profiles",
                soft_wrap=True,
            )


class _CellEstimate(TypedDict):
    """A cell as ``study show --json`` prints it: seconds a sample takes on each host."""

    platform: str
    driver: str
    workload: str
    instances: int
    sample_s: dict[str, float]


@study_app.command("show")
def study_show(
    file: Path,
    quick: Annotated[bool, typer.Option(help="estimate for --quick")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a study's expanded matrix of cells and its estimated duration, here and with KVM.

    The estimate is for this host and for one of as many cores whose KVM runs stock guests
    (accel: auto takes KVM there)."""
    from hvbench.plan import estimate_seconds, sample_seconds, this_host
    from hvbench.study import load_study

    study = load_study(file).quickened() if quick else load_study(file)
    here = this_host()
    hosts = {"this_host": here, "kvm_host": replace(here, kvm=True)}
    cells: list[_CellEstimate] = [
        {
            "platform": c.platform,
            "driver": study.platforms[c.platform].driver,
            "workload": c.workload,
            "instances": c.instances,
            "sample_s": {
                name: round(sample_seconds(study, c, quick, host.kvm), 1)
                for name, host in hosts.items()
            },
        }
        for c in study.cells()
    ]
    total = {name: round(estimate_seconds(study, quick, host)) for name, host in hosts.items()}
    repetitions = 1 if quick else study.repetitions
    if as_json:
        print(
            json.dumps(
                {
                    "study": study.name,
                    "baseline": study.baseline,
                    "quick": quick,
                    "repetitions": repetitions,
                    "cores": here.cores,
                    "kvm_here": here.kvm,
                    "cells": cells,
                    "estimate_s": total,
                },
                indent=2,
            )
        )
        return
    table = Table("platform", "driver", "workload", "n", "s here", "s KVM", title=study.name)
    for c in cells:
        seconds = (f"{c['sample_s'][h]:.0f}" for h in hosts)
        table.add_row(c["platform"], c["driver"], c["workload"], str(c["instances"]), *seconds)
    out.print(table)
    accel = "kvm" if here.kvm else "tcg"
    out.print(
        f"{len(cells)} cells × {repetitions} repetitions{' (quick)' if quick else ''}, "
        f"baseline {study.baseline}; estimated {total['this_host'] / 60:.1f} min on this host "
        f"({here.cores} cores, accel auto: {accel}), {total['kvm_host'] / 60:.1f} min on one "
        "with KVM",
        soft_wrap=True,
    )


@study_app.command("schema")
def study_schema_cmd() -> None:
    """Print the study file's JSON Schema, for editors that complete and check YAML with one.

    With the YAML language server, a study's first line
    `# yaml-language-server: $schema=study.schema.json` names the file this printed.
    """
    from hvbench.cli.study_schema import study_schema

    print(json.dumps(study_schema(), indent=2))


@app.command("doctor")
def doctor_cmd(
    drivers: Annotated[
        list[str] | None,
        typer.Argument(help="Only these drivers (default: every one), e.g. qemu firecracker."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """What this host can run: every driver and tool, and how to fix what is missing."""
    from hvbench import doctor

    findings = doctor.examine(drivers or ())
    if as_json:
        print(json.dumps(doctor.as_json(findings), indent=2))
        return
    for f in findings:
        notes = [f"fix: {f.fix}"] if f.fix else []
        print_finding(out, "ok" if f.ok else "no", f"{f.kind} {f.name}: {f.detail}", notes)


@app.command()
def cleanup(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Remove what runs killed by SIGKILL or power loss left behind (from their ledgers)."""
    from hvbench.host.resources import orphan_ledgers

    require_root("cleanup", "what runs leave (namespaces, mounts, loop devices) is root's")
    removed: dict[str, list[str]] = {}
    for ledger in orphan_ledgers():
        removed[ledger.run_id] = [f"{r.kind} {r.name}" for r in ledger.live]
        ledger.release_all()
    if as_json:
        print(json.dumps([{"run": k, "removed": v} for k, v in removed.items()], indent=2))
        return
    for run_id, names in removed.items():
        out.print(f"run {run_id}: removed {', '.join(names) or 'nothing'}")
    if not removed:
        out.print("nothing to clean up")


def main() -> None:
    """Console entry point: one line per error a user can meet, never a traceback."""
    toolenv.own_text()
    try:
        code = app(standalone_mode=False)  # the parser's errors come here, not to its boxes
    except typer.TyperException as e:  # click's exceptions, as typer vendors them
        if type(e).__name__ == "NoArgsIsHelpError":
            sys.exit(2)  # the help is printed already
        ctx = getattr(e, "ctx", None)
        where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        fail(f"{e.format_message()}{where}", e.exit_code)
    except typer.Abort:
        fail("interrupted", 130)
    except HvbenchError as e:
        fail(str(e), e.exit_code)
    except OSError as e:  # the host refused: a file, a directory, a device, a full disk
        fail(f"{e.filename}: {e.strerror}" if e.filename else str(e), 2)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    sys.exit(code if isinstance(code, int) else 0)


def fail(message: str, code: int) -> NoReturn:
    """``message`` on stderr as one line (a server's or a tool's answer quoted in it may span
    several), then exit with ``code``."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    err.print(f"hvbench: {line}", soft_wrap=True)
    sys.exit(code)
