"""The consolidation's verdict on stored runs: the host CPU for the same work and the SLOs lead,
the fixed achieved rates only check the work; the density's spread over its ascents with the
cause of every stop."""

from __future__ import annotations

import random

from builders import RunBuilder, host

from hvbench.analysis import analyse
from hvbench.analysis.verdict import verdicts
from hvbench.store import Store
from hvbench.store.ascent import AscentRecord, AscentStop, write_ascents

WORKLOAD = "consolidation 1×[web:1,imap:1,app:1,db:1,idle:1]"
ROLES = {"web": (50, 50.0), "imap": (5, 500.0), "app": (10, 200.0), "db": (20, 100.0)}
"""Role: its rate per second and p95 limit (ms), as the workload's defaults."""
SETTINGS = {
    "name": "consolidation",
    "sets": 1,
    "load": {role: {"rate": rate, "p95_ms": limit} for role, (rate, limit) in ROLES.items()},
}


def _run(
    tmp_path,
    seed: int,
    cost: float = 1.0,
    achieved: dict[str, float] | None = None,
    p95: dict[str, float] | None = None,
    cv: float = 0.01,
) -> Store:
    """native and container, 5 repetitions of one set: the host 10.4% busy natively with a CV
    of ``cv``, container ``cost`` times that; every role at its rate (``achieved``: container's
    instead) and a p95 of a tenth of its limit (``p95``: container's instead), at a CV of 2%."""
    store = Store(f"sqlite:///{tmp_path}/{seed}.db")
    rng = random.Random(seed)
    spread = random.Random(-seed)  # the p95s' own, so that the host CPU's draws stay as they were
    b = RunBuilder(store)
    kinds = {}
    for role in ROLES:
        stem = f"consolidation.{role}"
        kinds |= {
            f"{stem}.achieved_per_s": ("requests/s", True),
            f"{stem}.latency_p95_ms": ("ms", False),
            f"{stem}.slo_met": ("0/1", True),
        }
    for platform, factor in (("native", 1.0), ("container", cost)):
        driver = None if platform == "native" else "container"
        cell = b.cell(platform, WORKLOAD, 5, driver, workload_settings=SETTINGS)
        for rep in range(1, 6):
            metrics: dict[str, list[float | None]] = {}
            for role, (rate, limit) in ROLES.items():
                got = rate if platform == "native" else (achieved or {}).get(role, rate)
                late = limit / 10 if platform == "native" else (p95 or {}).get(role, limit / 10)
                stem = f"consolidation.{role}"
                metrics[f"{stem}.achieved_per_s"] = [got] * 5
                metrics[f"{stem}.latency_p95_ms"] = [late * spread.gauss(1, 0.02) for _ in range(5)]
                metrics[f"{stem}.slo_met"] = [float(late <= limit)] * 5
            busy = 10 * 2 * 0.104 * factor * rng.gauss(1, cv)  # core-seconds of 10 s on 2
            headline = {n for n in metrics if n.endswith(".latency_p95_ms")}
            b.sample(cell, rep, metrics, host_cpu=host(10, busy), kinds=kinds, headline=headline)
    return store


def _lines(store: Store) -> list[str]:
    return [v for v in verdicts(analyse(store, "latest")) if v.startswith("consolidation")]


def test_the_verdict_leads_with_the_host_cpu_for_the_same_work_and_the_slos(tmp_path):
    cost, levels = _lines(_run(tmp_path, 1))
    assert cost.startswith("consolidation (5 instances, host CPU for the same work): container ")
    assert "0.994× [0.979–1.009×] native's (10.4% of the host against 10.4%)" in cost
    assert cost.endswith("no significant difference (within ±5%)")
    assert levels.startswith("consolidation SLOs (mean p95 over the repetitions, 95% interval")
    assert "native: web 5.01 ms [4.94–5.08 ms] ≤ 50 ms: held, imap 49." in levels
    assert levels.count(": held") == 8
    assert "geometric mean" not in cost  # the fixed rates are no headline


def test_more_host_cpu_a_missed_slo_and_less_work_are_said(tmp_path):
    cost, levels = _lines(_run(tmp_path, 2, cost=1.3, p95={"app": 235.0}))
    assert "more host CPU for the same work" in cost
    assert "app 235.4 ms [233.6–237.2 ms] ≤ 200 ms: refuted" in levels.split("container: ")[1]
    assert levels.count(": held") == 7
    cost, _ = _lines(_run(tmp_path, 3, achieved={"imap": 0.33}))
    assert "container did less work than native (imap 1.65/s of 25/s): its" in cost
    assert "is not the cost of the same work" in cost


def test_the_host_cpu_verdict_errs_as_its_interval_says():
    """Seeded: of 60 runs of the same work at the same true cost (CV 3%, 5 repetitions a side),
    few read more or less host CPU (a 95% interval: about 5%); of 60 at 15% more, most read
    more. The figures: 2 of 60 and 60 of 60 with these seeds."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        same = [_lines(_run(Path(tmp), s, cv=0.03))[0] for s in range(100, 160)]
        dear = [_lines(_run(Path(tmp), s, cost=1.15, cv=0.03))[0] for s in range(200, 260)]
    wrong = sum("host CPU for the same work" in x.split("): ", 1)[1] for x in same)
    found = sum(x.endswith("more host CPU for the same work") for x in dear)
    assert wrong <= 6 and found >= 54, (wrong, found)


def test_density_reads_the_spread_and_names_every_stop(tmp_path):
    """A density recorded by three ascents each: native held every step; runc held 4, 4 and
    stopped once at 3 sets with the host far from busy; a harness stop is no density."""
    store = Store(f"sqlite:///{tmp_path}/d.db")
    b = RunBuilder(store)
    counts = [5, 10, 15, 20]
    for platform in ("native", "runc"):
        for n in counts:
            cell = b.cell(platform, WORKLOAD, n, "container", workload_settings=SETTINGS)
            b.sample(cell, 1, {"x": [1.0]}, host_cpu=host(10, n * 0.2))
    app = "instance 12 (app) missed its SLO: p95 235 ms (limit 200), 0 of 150 requests failed"
    native = AscentRecord("native", WORKLOAD, "consolidation", "sets", counts, 3)
    native.held = dict.fromkeys((1, 2, 3), counts)
    runc = AscentRecord("runc", WORKLOAD, "consolidation", "sets", counts, 3)
    runc.held = {1: counts, 2: [5, 10], 3: counts[:3]}
    on_time = "clients on schedule: send lag p95 at most 1.2 ms"
    runc.stops = {
        2: AscentStop(15, "slo", app, 0.33, 0.03, 0.41, on_time, instances=0.2),
        3: AscentStop(20, "harness", app, 0.9, 0.05, 0.41, "clients fell behind: ..."),
    }
    records = {"native": native, "runc": runc}
    write_ascents(store, "run-a", records)
    lines = [v for v in verdicts(analyse(store, "latest")) if v.startswith("consolidation")]
    native = next(x for x in lines if x.startswith("consolidation: native: "))
    assert native.startswith(
        "consolidation: native: 4 sets at SLO in 3 of 3 ascents (median 4: 3 ascents give no 95% "
        "interval, 6 do), host CPU"
    )
    assert native.endswith("(every step held: raise the bound)")
    runc = next(x for x in lines if x.startswith("consolidation: runc: "))
    assert runc.startswith(
        "consolidation: runc: 2–4 sets at SLO (2 ascents: 4, 2; median 2: 2 ascents give no 95% "
        "interval, 6 do), host CPU"
    )
    assert (
        "ascent 2 stopped at 3 sets, slo: " + app + "; host CPU 36% (instances 20%, clients 3%), "
        "memory 41%: far "
        "from busy, so the limit was not the platform's CPU or memory; clients on schedule"
    ) in runc
    assert "ascent 3 stopped at 4 sets, harness: " in runc and "host CPU 95% (clients 5%)" in runc
    said = "consolidation density: runc and native: no difference shown (2–4 vs 4 sets"
    assert any(x.startswith(said) for x in lines)
