"""What the bench scripts that measure through hvbench's own run session share: a study run into a
store of its own in a temporary directory, and each cell's figures printed as the mean (min-max,
n) over the repetitions that succeeded, with the failures and their errors."""

from __future__ import annotations

import statistics
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study


def run_and_print(text: str, source: str, shown: Sequence[str]) -> None:
    """Run the study ``text`` (progress one line a sample), then print ``shown`` per cell."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'results.db'}")
        session = RunSession.preflight(
            store,
            NewRun(parse_study(text, source)),
            on_progress=lambda p: print(
                f"rep {p.repetition} {p.cell.platform} × {p.cell.instances} {p.cell.workload}: "
                f"{p.status}" + (f" ({p.error})" if p.error else ""),
                flush=True,
            ),
        )
        session.run()
        cells = {
            c.id: f"{c.platform} × {c.instances} {c.workload}" for c in store.cells(session.run_id)
        }
        values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in store.metric_rows(session.run_id):
            if row.value is not None and row.name in shown:
                values[cells[row.cell_id]][row.name].append(row.value)
        for cell, metrics in sorted(values.items()):
            print(f"\n{cell}")
            for name in shown:
                got = metrics.get(name)
                if got:
                    mean = statistics.fmean(got)
                    print(
                        f"  {name:30} {mean:10.2f}  ({min(got):.2f}-{max(got):.2f}, n={len(got)})"
                    )
        failed = [(cells[s.cell_id], s.error) for s in store.samples(session.run_id) if s.error]
        for cell, error in failed:
            print(f"\nfailed: {cell}: {error}")
