"""A density ascent's reached count with its interval (issue 53, item 3): the median of the
steps the ascents held, with a 95% interval between two order statistics, "not tested" at one
ascent and none below six, checked by a seeded simulation through ``analysis.cost.density``
and read back through the verdict and the JSON lines of a stored run."""

from __future__ import annotations

import json
import math

import numpy as np
from builders import RunBuilder, host

from hvbench.analysis import analyse
from hvbench.analysis.cost import density
from hvbench.analysis.intervals import MEDIAN_MIN_N, median_interval
from hvbench.analysis.verdict import verdicts
from hvbench.report import jsonl
from hvbench.store import Store
from hvbench.store.ascent import AscentRecord, AscentStop, write_ascents

WORKLOAD = "consolidation 1×[web:1,imap:1,app:1,db:1,idle:1]"
STEPS = [5 * k for k in range(1, 13)]
"""Twelve steps of 5 instances, a set each."""


def _record(platform: str, held: list[int]) -> AscentRecord:
    """An ascent whose climb k held ``held[k − 1]`` steps and stopped at the next on an SLO
    (or held every step)."""
    record = AscentRecord(platform, WORKLOAD, "consolidation", "sets", STEPS, len(held))
    for k, h in enumerate(held, start=1):
        record.held[k] = STEPS[:h]
        if h < len(STEPS):
            record.stops[k] = AscentStop(STEPS[h], "slo", "instance 0 (web) missed its SLO")
    return record


def test_the_reached_count_s_interval_holds_its_level():
    """Climbs whose capacity is 5.3 sets × lognormal(σ), reading the whole sets below it
    (the true median: 5 sets), 2000 runs at each of 6, 8, 10 and 20 ascents, a narrow law
    (σ 0.1: most climbs tie) and a wide one (σ 0.4): the interval holds the median in at least
    95% of runs, and is far from the whole range of steps. Here 99.2–100%, for the steps' ties
    put 18% (σ 0.4) to 61% (σ 0.1) of climbs on the median itself, and an interval between
    whole steps cannot be narrower and still hold 95% (a median width of 1 to 6 steps)."""
    rng = np.random.default_rng(5303)
    for sigma in (0.1, 0.4):
        for n in (6, 8, 10, 20):
            covered, widths = 0, []
            runs = 2000
            for _ in range(runs):
                held = np.minimum(np.floor(5.3 * rng.lognormal(0, sigma, n)), len(STEPS))
                d = density(_record("runc", [int(h) for h in held]), {})
                low, high = d.interval
                covered += low <= 5 <= high
                widths.append(high - low)
            share = covered / runs
            assert share >= 0.95, (sigma, n, share)
            assert np.median(widths) <= 6, (sigma, n, np.median(widths))


def test_on_a_law_without_ties_the_interval_is_as_near_95_as_order_statistics_go():
    """The same order statistics on continuous values (lognormal, 4000 runs each): they hold
    the median as often as the binomial law says (96.9% of 6, 97.9% of 10, 95.9% of 20), no
    less."""
    rng = np.random.default_rng(5304)
    for n, level in ((6, 0.969), (10, 0.979), (20, 0.959)):
        runs = 4000
        got = [median_interval(x) for x in rng.lognormal(0, 0.4, (runs, n))]
        share = np.mean([low <= 1 <= high for low, high in got])
        assert abs(share - level) <= 3 * math.sqrt(level * (1 - level) / runs), (n, share)


def test_below_six_ascents_no_interval_is_given():
    """Of 2 to 5 ascents all may fall on one side of the median with more than 5% chance (of 5,
    2 × 0.5⁵ = 6.2%): no interval, rather than their range under a 95% name."""
    assert MEDIAN_MIN_N == 6
    for n in range(1, MEDIAN_MIN_N):
        low, high = density(_record("runc", [4] * n), {}).interval
        assert math.isnan(low) and math.isnan(high), n
    low, high = density(_record("runc", [4] * MEDIAN_MIN_N), {}).interval
    assert (low, high) == (4, 4)


def test_the_verdict_and_the_json_give_the_median_with_its_interval(tmp_path):
    """Seven ascents of runc (4, 4, 3, 4, 5, 4, 3: median 4, order statistics 1 and 7 of 7 →
    [3–5]), three of lxc, one of native: the verdict and the JSON lines give each as it is."""
    store = Store(f"sqlite:///{tmp_path}/d.db")
    b = RunBuilder(store)
    for platform in ("native", "runc", "lxc"):
        for n in STEPS[:6]:
            cell = b.cell(platform, WORKLOAD, n, "container")
            b.sample(cell, 1, {"x": [1.0]}, host_cpu=host(10, n * 0.2))
    records = {
        "runc": _record("runc", [4, 4, 3, 4, 5, 4, 3]),
        "lxc": _record("lxc", [4, 2, 4]),
        "native": _record("native", [5]),
    }
    write_ascents(store, "run-a", records)
    a = analyse(store, "latest")
    lines = {
        x.split(": ")[1]: x for x in verdicts(a) if x.startswith("consolidation: ")
    }  # by platform
    assert lines["runc"].startswith(
        "consolidation: runc: 3–5 sets at SLO (7 ascents: 4, 4, 3, 4, 5, 4, 3; "
        "median 4 [3–5 sets]), host CPU"
    ), lines["runc"]
    assert lines["lxc"].startswith(
        "consolidation: lxc: 2–4 sets at SLO (3 ascents: 4, 2, 4; median 4: 3 ascents give no "
        "95% interval, 6 do), host CPU"
    ), lines["lxc"]
    assert lines["native"].startswith(
        "consolidation: native: 5 sets at SLO in 1 of 1 ascent (not tested: 1 ascent), host CPU"
    ), lines["native"]
    got = {
        x["metadata"]["platform"]: x
        for x in map(json.loads, jsonl.render(a).splitlines())
        if x["metric"] == "consolidation.density_sets"
    }
    meta = {
        p: (x["value"], x["metadata"]["ci_low"], x["metadata"]["ci_high"]) for p, x in got.items()
    }
    assert meta == {"runc": (4, 3, 5), "lxc": (4, None, None), "native": (5, None, None)}
    assert got["runc"]["metadata"]["interval"] == "median 4 [3–5 sets]"
    assert got["lxc"]["metadata"]["interval"].startswith("median 4: 3 ascents give no 95%")
    assert got["native"]["metadata"]["interval"] == "not tested: 1 ascent"
