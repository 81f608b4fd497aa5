"""bench/fidelity.py's statistics, on seeded simulated rounds: the A/A control calls an absent
effect "OUTSIDE" about as often as its 5% level says, and catches a real one."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import bench_scripts
import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with bench_scripts.load("fidelity") as module:
        yield module


def simulate(rng: np.random.Generator, rounds: int, effect: float, cv: float) -> dict:
    """One metric's rounds: a drift shared by the round's three runs (a busy neighbour) and
    independent noise per run; hvbench's runs are ``effect`` times the bare ones."""
    drift = rng.lognormal(0, 0.10, rounds)
    run = rng.lognormal(0, cv, (3, rounds))
    return {
        "bare-1": list(1000 * drift * run[0]),
        "hvbench": list(1000 * drift * run[1] * effect),
        "bare-2": list(1000 * drift * run[2]),
    }


def outside_rate(bench: ModuleType, effect: float, cv: float, rounds: int = 6) -> float:
    rng = np.random.default_rng(11)
    trials = 400
    return (
        sum(bench.fidelity("m", simulate(rng, rounds, effect, cv)).outside for _ in range(trials))
        / trials
    )


def test_no_effect_is_called_outside_at_about_the_nominal_rate(bench):
    assert 0.02 <= outside_rate(bench, effect=1.0, cv=0.05) <= 0.08


def test_a_real_effect_above_the_noise_is_caught(bench):
    assert outside_rate(bench, effect=0.90, cv=0.03) >= 0.9


def test_the_round_drift_cancels_out_of_both_ratios(bench):
    f = bench.fidelity("m", simulate(np.random.default_rng(3), 6, effect=0.95, cv=0.0))
    assert f.effect.median == pytest.approx(0.95)
    assert f.control.median == pytest.approx(1.0)
    assert f.against_control.estimate - 1 == pytest.approx(-0.05)


def test_six_rounds_balance_the_order(bench):
    orders = [bench.order(r) for r in range(6)]
    for arm in bench.ARMS:
        assert sorted(o.index(arm) for o in orders) == [0, 0, 1, 1, 2, 2]
    follows = [(o[i], o[i + 1]) for o in orders for i in range(2)]
    assert all(follows.count(pair) == 2 for pair in set(follows)) and len(set(follows)) == 6
