"""A host's run-to-run variation, measured from the runs the store already holds.

Whole runs on one host differ by more than their repetitions say (the host's state between
runs: frequency, caches, placement, other load), and ``compare`` of one run a side must allow
for it. The store often holds earlier runs of the same study on the same host: the spread of
their run means beyond what their repetitions carry measures it (``settling.run_to_run``), pooled
per workload over its gating metrics (``compare.gates``), with the degrees of freedom that say
how well. Earlier: created before the later of the two runs compared, so that a comparison
reads the same however many runs are added afterwards; the two compared runs themselves are
left out (a change between them is what is asked about, not noise).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from hvbench.analysis.compare import (
    ALARM,
    ALLOWANCE,
    ASSUMED,
    FEWEST,
    MEASURED,
    Allowance,
    gates,
)
from hvbench.analysis.model import MetricKey, RunAnalysis
from hvbench.analysis.run_analysis import analyse
from hvbench.analysis.settling import run_to_run
from hvbench.errors import HvbenchError
from hvbench.store import Store

HISTORY = 10
"""Most earlier runs read: the newest, as a host's variation drifts over months."""


def earlier_runs(store: Store, a: RunAnalysis, b: RunAnalysis, limit: int = HISTORY) -> list[str]:
    """Ids of the runs of A's study on A's host (inventory hostname) created before the later
    of A and B, the newest ``limit``; none where A and B differ in study or host."""
    if _apart(a, b):
        return []
    host = a.inventory.hostname
    latest = max(a.created_at, b.created_at)
    found = [
        r.id
        for r in store.runs()
        if r.study_name == a.study_name
        and r.inventory.hostname == host
        and r.id not in (a.run_id, b.run_id)
        and r.created_at < latest
    ]
    return found[-limit:]


def pooled(history: list[RunAnalysis], reference: RunAnalysis) -> dict[str, tuple[float, float]]:
    """Per workload, (run-to-run allowance, degrees of freedom) from the run means in
    ``history`` of the reference run's gating metrics (``compare.gates``), each only where the
    cell ran the same work under the same accelerator (a study edited between runs measures
    that, not noise)."""
    cells = {r.key: r for r in reference.results if gates(r)}
    columns: dict[str, list[MetricKey]] = defaultdict(list)
    for key in cells:
        columns[key.workload].append(key)
    out = {}
    for workload, keys in columns.items():
        means = np.full((len(history), len(keys)), np.nan)
        variances = np.full_like(means, np.nan)
        for i, run in enumerate(history):
            for j, key in enumerate(keys):
                r = run.result(key.platform, key.workload, key.metric, key.instances)
                ref = cells[key].cell
                if r is None or (r.cell.workload_settings, r.cell.accel) != (
                    ref.workload_settings,
                    ref.accel,
                ):
                    continue
                means[i, j] = r.single.mean
                variances[i, j] = r.single.std**2 / r.single.n
        sd, df = run_to_run(means, variances)
        if df > 0:
            out[workload] = (sd, df)
    return out


def measured(store: Store, a: RunAnalysis, b: RunAnalysis) -> Allowance:
    """The allowance of a comparison of A with B, one run a side: measured from the earlier
    runs where they measure it, else ``ALLOWANCE`` assumed, saying what would measure it."""
    ids = earlier_runs(store, a, b)
    where = f"study {a.study_name!r} on host {a.inventory.name!r}"
    history = []
    for run_id in ids:
        try:
            history.append(analyse(store, run_id))
        except HvbenchError:  # a run with no cells yet: nothing to measure
            continue
    workloads = pooled(history, a) if len(history) >= FEWEST else {}
    if not workloads:
        what = (
            "A and B are not runs of one study on one named host"
            if _apart(a, b)
            else f"{len(history)} earlier run{'s' * (len(history) != 1)} of {where} in the "
            f"store; {FEWEST} or more would measure it"
        )
        return Allowance(ALLOWANCE, ASSUMED, note=what, alarm=ALARM)
    used = tuple(r.run_id for r in history)
    return Allowance(
        ALLOWANCE,
        MEASURED,
        workloads=workloads,
        runs=used,
        note=f"{len(used)} earlier runs of {where}: {', '.join(used)}",
        alarm=ALARM,
    )


def _apart(a: RunAnalysis, b: RunAnalysis) -> bool:
    """A and B are of different studies or hosts (or a host without a name)."""
    host = a.inventory.hostname
    return not host or b.inventory.hostname != host or a.study_name != b.study_name
