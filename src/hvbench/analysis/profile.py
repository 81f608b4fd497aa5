"""The hypervisor's profile: each platform's top functions during its measured windows, the
table the consolidation post drew from oprofile.

Each sample's profile is a count of perf's cpu-clock samples per function over every CPU of
the host (``hvbench.host.profile``); a platform's profile for a workload sums the counts of its
samples, so a function's share is the share of the host's CPU time it took while that platform
ran that workload. The host's idle loop is in it (a 2-core host half idle shows its idle
function near 50%), and so is whatever else ran on the host then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from hvbench.analysis.model import PlatformProfile, TopFunction
from hvbench.store import CellView, FunctionView

TOP = 30
"""Functions a platform's profile shows, as the post's table did."""


def platform_profiles(
    rows: list[FunctionView], cells: Mapping[int, CellView], top: int = TOP
) -> list[PlatformProfile]:
    """Per (workload, platform), workloads and platforms in the run's order: the ``top``
    functions by samples summed over the platform's profiled samples of that workload. Each
    sample stored only its own top functions (``hvbench.host.profile.TOP``, more than ``top``),
    so a function's sum leaves out the samples in which it ranked lower: it can only be
    undercounted, and only where it is far down the list."""
    counts: dict[tuple[str, str], dict[tuple[str, str], int]] = defaultdict(
        lambda: defaultdict(int)
    )
    totals: dict[tuple[str, str], dict[tuple[int, int], int]] = defaultdict(dict)
    for r in rows:
        cell = cells[r.cell_id]
        key = (cell.workload, cell.platform)
        counts[key][(r.symbol, r.dso)] += r.samples
        totals[key][(r.cell_id, r.repetition)] = r.profile_samples
    workloads = {w: i for i, w in enumerate(dict.fromkeys(c.workload for c in cells.values()))}
    platforms = {p: i for i, p in enumerate(dict.fromkeys(c.platform for c in cells.values()))}
    out = []
    for key in sorted(counts, key=lambda k: (workloads[k[0]], platforms[k[1]])):
        functions = counts[key]
        total = sum(totals[key].values())
        best = sorted(functions.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        out.append(
            PlatformProfile(
                platform=key[1],
                workload=key[0],
                samples=total,
                profiles=len(totals[key]),
                functions=[TopFunction(n, 100 * n / total, s, d) for (s, d), n in best],
            )
        )
    return out
