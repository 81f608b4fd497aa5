"""``hvbench fleet run`` and ``hvbench store import``: one study on many hosts, one store."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hvbench.analysis import analyse
from hvbench.analysis.hosts import across_hosts
from hvbench.cli.lines import console
from hvbench.cli.options import DbOption
from hvbench.cli.run import LabelOption, parse_labels
from hvbench.errors import HvbenchError
from hvbench.store import Store

app = typer.Typer(no_args_is_help=True, help="Run one study on the hosts of an Ansible inventory.")
store_app = typer.Typer(no_args_is_help=True, help="Merge result stores.")
out = console()
err = console(stderr=True)


def _line(text: str) -> None:
    err.print(text, soft_wrap=True)


@app.command("run")
def run(
    study_file: Annotated[Path, typer.Argument(metavar="STUDY", help="study file")],
    inventory: Annotated[Path, typer.Option("-i", "--inventory", help="Ansible inventory")],
    db: DbOption = None,
    limit: Annotated[str | None, typer.Option(help="Ansible host pattern")] = None,
    forks: Annotated[int, typer.Option(min=1, help="hosts at once")] = 5,
    quick: Annotated[bool, typer.Option(help="hvbench run --quick on every host")] = False,
    label: LabelOption = None,
    setup: Annotated[
        list[str] | None,
        typer.Option(
            help="an option of setup.sh for every host (repeatable): what the study needs "
            "beyond the default study's, e.g. --setup=--with-kernbench --setup=--with-gvisor"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Install hvbench on every host with Ansible, run STUDY there, gather the runs in one store.

    With --db, every host writes its run to that store, which it must reach (PostgreSQL);
    without it, each host's SQLite store is fetched back and imported into the local one.

    Prints `fleet <NAME>` first. The same command again resumes what each host had not
    finished. Exit 0: every host finished; 1: a host's study failed; 2: bad input, or a host
    where nothing could run (unreachable, no root, setup failed)."""
    from hvbench import fleet as fleet_mod
    from hvbench.study import load_study

    study = load_study(study_file)
    hosts = fleet_mod.list_hosts(inventory, limit)
    every = hosts if limit is None else fleet_mod.list_hosts(inventory)
    local = Store(db)  # checked (and made) before any host is touched
    labels = parse_labels(label or [])
    name = fleet_mod.fleet_name(study.text, study.name, quick, inventory, db or "", labels)
    print(f"fleet {name}", flush=True)
    state = fleet_mod.FleetRun(name, {h: fleet_mod.HostProgress(h) for h in hosts})
    with tempfile.TemporaryDirectory(prefix="hvbench-fleet-") as tmp:
        extra = {
            "hvbench_archive": str(fleet_mod.pack(fleet_mod.checkout(), Path(tmp) / "hv.tar.gz")),
            "hvbench_study": str(study_file.resolve()),
            "hvbench_fleet": name,
            "hvbench_quick": quick,
            "hvbench_labels": [f"{k}={v}" for k, v in labels.items()],
            "hvbench_db": db or "",
            "hvbench_fetch_dir": str(Path(tmp) / "fetched"),
            "hvbench_setup": setup or [],
        }

        def on_event(host: fleet_mod.HostProgress) -> None:
            if host.status == "failed":
                _line(f"{host.name}: FAILED {host.error}")
            elif host.run_id and host.step == fleet_mod.RUN_TASK:
                _line(f"{host.name}: run {host.run_id} {host.run_status}")
            elif host.status == "running":
                _line(f"{host.name}: {host.step}")

        fleet_mod.play(state, inventory, extra, limit, forks, on_event)
        imported = {h: local.import_runs(Store(f"sqlite:///{p}")) for h, p in state.fetched.items()}
    finished = {h for h, s in state.hosts.items() if s.run_status == "finished"}
    finished |= set(local.fleet_runs(name)) & set(every)
    if finished >= set(every):
        fleet_mod.mark_complete(name)
    report = {
        "fleet": name,
        "store": local.url,
        "hosts": [
            {
                "host": h.name,
                "status": h.status,
                "run": h.run_id,
                "run_status": h.run_status,
                "error": h.error,
                "imported": imported.get(h.name),
            }
            for h in state.hosts.values()
        ],
    }
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for h in state.hosts.values():
            what = h.error or f"run {h.run_id} {h.run_status}"
            print(f"{h.name}: {what}")
    failed = [h for h in state.hosts.values() if h.status == "failed" or h.run_status != "finished"]
    if any(h.failed_before_run for h in failed):
        sys.exit(2)
    if failed:
        sys.exit(1)


@store_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="an hvbench SQLite store (e.g. a host's)")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Copy every run of another store into this one, keeping run ids, inventories, provenance.

    A run already here is replaced by a fuller account of it."""
    if not file.is_file():
        raise HvbenchError(f"{file}: no such file; give an hvbench SQLite store (results.db)")
    source = Store(f"sqlite:///{file.resolve()}")
    outcome = Store(db).import_runs(source)
    if as_json:
        print(json.dumps(outcome, indent=2))
        return
    for run_id, what in outcome.items():
        out.print(f"run {run_id}: {what}")
    if not outcome:
        out.print(f"{file}: no runs")


@app.command("report")
def report(
    fleet: Annotated[str, typer.Argument(help="the fleet run's name (`fleet NAME`)")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The fleet run's headline figures, host by host, each with its % of native on that host.

    `hvbench compare FLEET_A FLEET_B` compares two fleet runs (each host's run one
    observation), `hvbench compare FLEET/HOST_A FLEET/HOST_B` two hosts."""
    store = Store(db)
    runs = store.fleet_runs(fleet)
    if not runs:
        raise HvbenchError(f"no fleet run {fleet!r} in {store.url}; `fleet run` prints its name")
    figures = across_hosts({host: analyse(store, run.id) for host, run in runs.items()})
    if as_json:
        print(json.dumps([f.as_json() for f in figures], indent=2))
        return
    table = Table("host", "platform", "workload", "instances", "metric", "mean", "% of native")
    for f in figures:
        pct = "" if f.pct_of_native is None else f"{f.pct_of_native:.0f}"
        mean = f"{f.mean:.4g} {f.unit}"
        table.add_row(f.host, f.platform, f.workload, str(f.instances), f.metric, mean, pct)
    out.print(table)
