"""The one rule figures are printed by (``units.interval_strings``): digits as the interval's
width allows, never an estimate outside its own printed interval."""

from __future__ import annotations

import math

import pytest

from hvbench.units import interval_decimals, interval_strings


@pytest.mark.parametrize(
    ("estimate", "low", "high", "expected"),
    [
        # issue 48's arbitrary precision: "20.4× [10.39–170.98×]" and "0.04 ±0.00745"
        (20.4, 10.39, 170.98, ("20", "10", "180")),
        (0.04, 0.04 - 0.00745, 0.04 + 0.00745, ("0.040", "0.032", "0.048")),
        (84.2, 79.1, 90.3, ("84", "79", "91")),
        # the Particle Data Group's rule: two digits of a half-width led by 100-354 ...
        (1234.0, 1010.0, 1460.0, ("1230", "1010", "1460")),
        (3.4, 2.1, 5.7, ("3.4", "2.1", "5.7")),
        # ... one of one led by 355-949, bounds outward ...
        (41.0, 40.06, 41.94, ("41.0", "40.0", "42.0")),
        (3.0, -3.45, 9.45, ("3", "-4", "10")),
        # ... and two of the next power of ten from 950 (0.96 is 1.0)
        (5.0, 4.04, 5.96, ("5.0", "4.0", "6.0")),
        # a positive bound keeps a digit of its own: 70 [20-1210], not 100 [0-1300]
        (70.0, 20.0, 1210.0, ("70", "20", "1210")),
        (1.0, 0.04, 1.96, ("1.00", "0.04", "1.96")),
    ],
)
def test_interval_strings_keep_the_digits_the_half_width_supports(
    estimate: float, low: float, high: float, expected: tuple[str, str, str]
) -> None:
    assert interval_strings(estimate, low, high) == expected


def test_interval_strings_never_prints_an_estimate_outside_its_interval() -> None:
    # issue 48: cost's "2.0× [1.95–1.97×]"
    est, low, high = interval_strings(2.0, 1.95, 1.97)
    assert float(low) <= float(est) <= float(high)
    assert (est, low, high) == ("1.970", "1.950", "1.970")


def test_interval_strings_rounds_bounds_outward() -> None:
    est, low, high = interval_strings(2.041, 1.05, 33.4)
    assert (est, low, high) == ("2", "1", "34")
    assert float(low) <= 1.05 and float(high) >= 33.4


def test_interval_strings_handles_unbounded_and_missing_bounds() -> None:
    # the distance to the finite bound sets the digits where the other is unbounded
    assert interval_strings(1.5, 0.2, math.inf) == ("1.5", "0.2", "∞")
    assert interval_strings(0.9, -math.inf, math.inf) == ("0.900", "-∞", "∞")
    assert interval_strings(math.nan, math.nan, math.nan) == ("n/a", "n/a", "n/a")
    assert interval_strings(-0.001, -0.3, 0.3) == ("0.00", "-0.30", "0.30")  # never "-0.00"


def test_interval_strings_without_width_keeps_three_significant_digits() -> None:
    assert interval_strings(5.0, 5.0, 5.0) == ("5.00", "5.00", "5.00")
    assert interval_strings(0.0, 0.0, 0.0) == ("0", "0", "0")
    assert interval_decimals(150.0, 150.0, 150.0) == 0


def test_interval_strings_takes_more_decimals_and_a_sign_on_request() -> None:
    assert interval_strings(-3.1, -12.04, 0.04, decimals=1, sign=True) == ("-3.1", "-12.1", "+0.1")
