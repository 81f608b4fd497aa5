"""``hvbench history``: every run of a study as series, with their change points explained.

Exit codes: 0 ok; 1 (``--check`` only) a headline figure regressed at a change point among the
newest runs; 2 bad input (HvbenchError, one line).
"""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer

from hvbench.analysis import claims
from hvbench.analysis.series import (
    TIME,
    ClaimHistory,
    Series,
    change_sentence,
    claim_histories,
    explanation,
    load,
    when,
)
from hvbench.cli.lines import console
from hvbench.cli.options import DbOption
from hvbench.store import Store
from hvbench.units import interval_strings

WINDOW = 3
"""Newest runs ``--check`` looks at: a change needs two runs after it (``changes.MIN_SIDE``),
so a nightly gate sees it on the second and third night after."""

out = console(soft_wrap=True)


def _as_json(s: Series) -> dict:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "study": s.study,
        "host": s.host,
        "platform": s.platform,
        "label": s.label,
        "workload": s.workload,
        "instances": s.instances,
        "metric": s.metric,
        "unit": s.unit,
        "higher_is_better": s.higher_is_better,
        "headline": s.headline,
        "by": s.by,
        "left_out": s.left_out,
        "points": [
            {
                "run": p.run_id,
                "time": p.time.isoformat(),
                "version": p.version,
                "mean": p.mean,
                "ci_low": num(p.low),
                "ci_high": num(p.high),
                "n": p.n,
            }
            for p in s.points
        ],
        "changes": [
            {
                "index": c.index,
                "before_run": c.before.run_id,
                "after_run": c.after.run_id,
                "ratio": c.ratio,
                "ci_low": c.low,
                "ci_high": c.high,
                "p_adjusted": c.p_value,
                "regression": c.regression,
                "explained": c.explained,
                "differences": [
                    {"name": str(d.item), "before": d.before, "after": d.after}
                    for d in c.differences
                ],
            }
            for c in s.changes
        ],
    }


def _print(s: Series) -> None:
    better = "higher" if s.higher_is_better else "lower"
    order = "" if s.by == TIME else f", by {s.by}"
    left = f" ({s.left_out} runs without it left out)" if s.left_out else ""
    out.print(f"{s.study} on {s.host}: {s.name} ({s.unit}, {better} is better{order}){left}")
    for p in s.points:
        mean, low, high = interval_strings(p.mean, p.low, p.high)
        ci = f" [{low}, {high}]" if math.isfinite(p.low) else ""
        out.print(f"  {p.run_id}  {when(p)}  {mean}{ci}  n={p.n}")
    for c in s.changes:
        out.print(f"  {change_sentence(c)}")
        out.print(f"      {explanation(c)}")


def _claims(histories: list[ClaimHistory], as_json: bool) -> None:
    """Each claim's outcome run by run (``history --claims``)."""
    if as_json:
        data = [
            {
                "study": h.study,
                "host": h.host,
                "label": h.label,
                "workload": h.workload,
                "claim": h.claim,
                "runs": [
                    {"run": r.run_id, "time": r.time.isoformat(), **claims.as_json(r.judged)}
                    for r in h.runs
                ],
            }
            for h in histories
        ]
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for h in histories:
        out.print(f"{h.study} on {h.host}: {h.label} / {h.workload}: {h.claim}")
        for r in h.runs:
            j, est = r.judged, "not measured"
            if not math.isnan(j.estimate):
                value, low, high = interval_strings(j.estimate, j.low, j.high)
                ci = f" [{low}, {high}]" if not math.isnan(j.low) else ""
                est = f"{value}{ci} {j.unit}"
            out.print(f"  {r.run_id}  {r.time:%Y-%m-%d %H:%M}  {j.outcome}: {est}  n={j.n}")


def history(
    study: Annotated[
        str | None, typer.Argument(metavar="[STUDY-NAME]", help="study (default: every study)")
    ] = None,
    platform: Annotated[str | None, typer.Option(help="one platform")] = None,
    workload: Annotated[
        str | None, typer.Option(help="one workload: its name (disk) or its cells' (disk dd …)")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(help="a metric or a pattern (net.*); default: the headline figures"),
    ] = None,
    by: Annotated[
        str,
        typer.Option(help="order runs by time, qemu, kernel, guest-kernel, commit or label:KEY"),
    ] = TIME,
    host: Annotated[str | None, typer.Option(help="one host (default: each, side by side)")] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="exit 1 when a headline figure regressed at a change point among the newest "
            "runs (a gate for nightly CI)",
        ),
    ] = False,
    window: Annotated[int, typer.Option(min=1, help="newest runs --check looks at")] = WINDOW,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    claims: Annotated[
        bool, typer.Option("--claims", help="each claim's outcome run by run, not the figures")
    ] = False,
    db: DbOption = None,
) -> None:
    """Every run of a study as one series per host and figure, with its change points explained.

    A change point says where the level moved, by how much (the ratio of the means either side,
    with its 99% interval), and what the store recorded differently of the runs either side.
    --claims: each claim's outcome (held, refuted, inconclusive) run by run instead.

    Exit codes: 0 ok; 1 with --check, a headline figure regressed at a change point among the
    newest --window runs; 2 bad input.
    """
    if claims:
        _claims(claim_histories(Store(db), study, host), as_json)
        return
    series = load(Store(db), study, platform, workload, metric, host, by)
    gate = [(s, c) for s in series if s.headline for c in s.recent(window) if c.regression]
    if as_json:
        print(json.dumps([_as_json(s) for s in series], indent=2))
    elif check:
        for s, c in gate:
            line = f"{change_sentence(c)}; {explanation(c)}"
            out.print(f"regression: {s.study} on {s.host}: {s.name}: {line}")
        if not gate:
            heads = sum(s.headline for s in series)
            out.print(
                f"no regression at a change point in the newest {window} runs of {heads} "
                "headline series"
            )
    else:
        for s in series:
            _print(s)
    if check and gate:
        raise typer.Exit(1)
