"""``hvbench host check|tune|reset``: what makes figures drift on this host, set to
benchmark-grade and back (``host.conditions``, ``host.tuning``), each loaded when a command runs
(``hvbench.cli``'s rule)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from hvbench.cli.lines import console, print_finding, print_text
from hvbench.cli.options import require_root
from hvbench.errors import HvbenchError

if TYPE_CHECKING:
    from hvbench.host import tuning
    from hvbench.host.conditions import Condition

app = typer.Typer(
    no_args_is_help=True,
    help="What makes figures drift on this host (frequency, turbo, C-states, SMT, KSM, THP, "
    "NUMA, irqbalance, swap, load, KVM): check it, tune it, reset it.",
)
out = console()
JsonOption = Annotated[bool, typer.Option("--json")]
LEFT = "C-states, SMT, NUMA, irqbalance, swap and load are left to you: `hvbench host check`"


def _print_condition(c: Condition) -> None:
    from hvbench.host.conditions import NOT_EXPOSED

    marks = {"ok": "ok", "not benchmark-grade": "no", NOT_EXPOSED: "--", "info": "i"}
    if c.value is None:
        print_finding(out, "--", f"{c.name}: not exposed ({c.source})")
    elif c.benchmark_grade is False:
        print_finding(out, "no", f"{c.name}: {c.value}", [f"drifts: {c.effect}", f"fix: {c.fix}"])
    else:
        print_finding(out, marks[c.status], f"{c.name}: {c.value}")


def _print_changes(changes: list[tuning.Change]) -> None:
    for x in changes:
        text = f"{x.name}: {x.old} -> {x.new} ({x.path})"
        print_finding(out, "no" if x.error else "ok", text, [x.error] if x.error else [])


def _refuse(command: str, changes: list[tuning.Change]) -> None:
    if failed := [x for x in changes if x.error]:
        first = failed[0]
        raise HvbenchError(
            f"host {command}: {len(failed)} of {len(changes)} settings not made, first "
            f"{first.path}: {first.error}"
        )


@app.command()
def check(as_json: JsonOption = False) -> None:
    """Each condition as this host shows it, or "not exposed", with what drifts and its fix.

    A condition that is not benchmark-grade comes with what it does to the figures and the
    fix; what `hvbench host tune` changed is listed at the end."""
    from hvbench.host import conditions, tuning

    found = conditions.check()
    tuned = tuning.tuned()
    if as_json:
        print(
            json.dumps(
                {
                    "conditions": [c.as_json() for c in found],
                    "tuned": [x.as_json() for x in tuned],
                },
                indent=2,
            )
        )
        return
    bad = sum(c.benchmark_grade is False for c in found)
    hidden = sum(c.value is None for c in found)
    print_text(
        out,
        f"{bad} condition{'s' * (bad != 1)} not benchmark-grade, {hidden} not exposed by this "
        "host (not guessed). ok: benchmark-grade, no: not, --: not exposed, i: for the record",
    )
    for c in found:
        _print_condition(c)
    if tuned:
        print_text(out, "tuned by `hvbench host tune` (`hvbench host reset` restores):")
        _print_changes(tuned)


@app.command()
def tune(as_json: JsonOption = False) -> None:
    """Set governor, turbo, KSM and THP benchmark-grade; `hvbench host reset` undoes it.

    Only what is not benchmark-grade is written. Each old value goes into a ledger first, so
    `hvbench cleanup` restores a tune killed midway; a finished tune stays until reset."""
    from hvbench.host import conditions, tuning

    require_root("host tune", "it writes the kernel's settings in /sys")
    changes = tuning.tune(conditions.tunable())
    if as_json:
        print(json.dumps({"changed": [x.as_json() for x in changes]}, indent=2))
    elif changes:
        _print_changes(changes)
        print_text(out, f"`hvbench host reset` restores them; {LEFT}")
    else:
        print_text(out, f"nothing to tune: what tune sets is benchmark-grade; {LEFT}")
    _refuse("tune", changes)


@app.command()
def reset(as_json: JsonOption = False) -> None:
    """Write back every value `hvbench host tune` changed, and read each one back."""
    from hvbench.host import tuning

    require_root("host reset", "it writes the kernel's settings in /sys")
    changes = tuning.reset()
    if as_json:
        print(json.dumps({"restored": [x.as_json() for x in changes]}, indent=2))
    elif changes:
        _print_changes(changes)
    else:
        print_text(out, "nothing to reset: `hvbench host tune` changed nothing here")
    _refuse("reset", changes)
