"""How long each timed job of a stored run lasted, and the clock that timed it: the check that
every job is long enough for its clock (at least a second natively, timed to a millisecond or
better), read from the run's own raw outputs.

    .venv/bin/python bench/job_lengths.py RUN_ID [--db URL] [--platform native]

Per cell and tool: the jobs' lengths (min-max over copies and repetitions), how many, and the
coarsest resolution of their clock. Jobs run by hvbench-clock (cpu programs, dd passes,
kernbench builds) carry its line; iperf3's JSON gives its own measured seconds. Other tools'
jobs are fixed time by their settings and are not listed.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

from hvbench.store import Store

CLOCK_LINE = re.compile(r"status=\d+ start=([0-9.]+) end=([0-9.]+) resolution=([0-9.]+)")


def jobs(tool: str, content: str) -> list[tuple[float, float]]:
    """(seconds, clock resolution) of each job in one raw output."""
    found = [(float(e) - float(s), float(r)) for s, e, r in CLOCK_LINE.findall(content)]
    if found or tool != "iperf3":
        return found
    try:
        end = json.loads(content)["end"]
    except (ValueError, KeyError, TypeError):
        return []
    return [(float(end["sum_received"]["seconds"]), 1e-6)] if "sum_received" in end else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("--db", default=None, help="SQLAlchemy URL of the store (default: SQLite)")
    ap.add_argument("--platform", default=None, help="only this platform's cells")
    args = ap.parse_args()
    store = Store(args.db)
    run_id = store.run(args.run_id).id  # "latest" too
    cells = {c.id: c for c in store.cells(run_id)}
    lengths: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for raw in store.raw_outputs(run_id):
        cell = cells[raw.cell_id]
        if args.platform is None or cell.platform == args.platform:
            lengths[(cell.platform, cell.workload, raw.tool)] += jobs(raw.tool, raw.content)
    print(f"{'platform':<14} {'workload':<34} {'tool':<10} {'n':>3} {'seconds':>15} {'clock':>9}")
    for (platform, workload, tool), found in sorted(lengths.items()):
        if not found:
            continue
        secs = [s for s, _ in found]
        clock = max(r for _, r in found)
        span = f"{min(secs):.3f}-{max(secs):.3f}"
        print(f"{platform:<14} {workload:<34} {tool:<10} {len(found):>3} {span:>15} {clock:>9.1e}")


if __name__ == "__main__":
    main()
