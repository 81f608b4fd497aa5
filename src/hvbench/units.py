"""Sizes as users write them in studies ("4G", "256K", "2GiB") and as tools want them; the bounds
of claims with their units; and the one rule figures are printed by, as their intervals allow."""

from __future__ import annotations

import math
import re
from typing import Annotated, NamedTuple

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes from 4G / 256K / 2GiB / 512m / a plain integer (binary multiples, as tools use)."""
    if isinstance(value, bool):
        raise ValueError("a size such as 4G, 256K or 2GiB")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a positive size such as 4G, 256K or 2GiB")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError("a size such as 4G, 256K or 2GiB")
    size = int(float(m.group(1)) * _FACTOR[m.group(2).lower()])
    if size <= 0:
        raise ValueError("a positive size such as 4G, 256K or 2GiB")
    return size


def format_size(size: int) -> str:
    """The shortest exact binary form: 4294967296 -> 4G."""
    for suffix in ("T", "G", "M", "K"):
        factor = _FACTOR[suffix.lower()]
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string"}],
            "description": "bytes, or a size such as 4G, 256K or 2GiB",
        }
    ),
]
"""A byte count that studies write as 4G; serialized back the same way, and described so in the
study's JSON Schema (pydantic would say integer, the type after the validator)."""


# --- quantities of claims (``analysis.claims``): a bound with its unit ------------------------

_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_BYTES = {
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1e3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1e6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1e9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1e12,
}
_BITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
_BITS_PER_S = {"bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8}
_QUANTITY = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(\S*)\s*$", re.IGNORECASE)
UNIT_KINDS = (
    "a time (125ms, 60s), a size (5MiB), a rate (1GiB/s, 14.5Gbit/s) or a share of native (95%)"
)


class UnitScale(NamedTuple):
    """A unit's kind and its factor to that kind's base unit."""

    kind: str
    factor: float


def unit_scale(unit: str) -> UnitScale | None:
    """A unit's kind (time, bytes, bytes/s, %) and its factor to that kind's base (seconds,
    bytes, bytes a second, %): "ms" → ("time", 0.001), "Gbit/s" → ("bytes/s", 1.25e8); None for
    a unit of its own (requests/s, count, pixels/s), which a bound states as a bare number."""
    u = unit.strip()
    if u == "%":
        return UnitScale("%", 1.0)
    if u in _TIME:
        return UnitScale("time", _TIME[u])
    low = u.lower()
    if low in _BITS_PER_S:
        return UnitScale("bytes/s", _BITS_PER_S[low])
    per_s = low.endswith("/s")
    base = low.removesuffix("/s")
    factor = _BYTES.get(base) or _BITS.get(base)
    if factor is None:
        return None
    return UnitScale("bytes/s" if per_s else "bytes", float(factor))


class Quantity(NamedTuple):
    """A number and its unit (None: the metric's own)."""

    number: float
    unit: str | None


def parse_quantity(value: object) -> Quantity:
    """A bound as a study writes it: (number, unit) from "125ms", "5MiB", "95%", "14.5Gbit/s"
    or a bare number (unit None: the metric's own)."""
    if isinstance(value, bool):
        raise ValueError(f"a number, or one with a unit: {UNIT_KINDS}")
    if isinstance(value, int | float):
        return Quantity(float(value), None)
    m = _QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"a number, or one with a unit: {UNIT_KINDS}")
    number, unit = float(m.group(1)), m.group(2)
    if not unit:
        return Quantity(number, None)
    if unit_scale(unit) is None:
        raise ValueError(f"a known unit: {UNIT_KINDS}; or a bare number in the metric's unit")
    return Quantity(number, unit)


# --- figures as their intervals allow: one rule for every estimate printed with its bounds ----

SIGNIFICANT_BELOW = 3.55
"""The rule for an interval's digits, the Particle Data Group's for an uncertainty: two
significant digits of the half-width where its leading digits are 100 to 354, one where they
are 355 to 949, and two of the next power of ten from 950 (0.96 is 1.0). The width says how
many digits mean anything: "41.0% [40.1–42.0%]", not "41.00% [40.08–41.95%]"."""
_MOST_DECIMALS = 12


def interval_decimals(estimate: float, low: float, high: float) -> int:
    """Decimals (below 0: tens, hundreds) to print an estimate and its bounds with: the
    half-width's significant digits (``SIGNIFICANT_BELOW``), or the distance's to the finite
    bound where the other is unbounded, and a digit of a positive lower bound at least; 3
    significant digits of the largest figure where the interval has no width to go by
    (identical readings, or no bound at all)."""
    finite = [x for x in (low, high) if math.isfinite(x)]
    if len(finite) == 2:
        half = (high - low) / 2
    elif finite and math.isfinite(estimate):
        half = abs(estimate - finite[0])
    else:
        half = 0.0
    if not half > 0:
        largest = max((abs(x) for x in (estimate, *finite) if math.isfinite(x)), default=0.0)
        return min(2 - math.floor(math.log10(largest)), _MOST_DECIMALS) if largest > 0 else 0
    exponent = math.floor(math.log10(half))
    lead = half / 10.0**exponent
    digits = 2 if lead < SIGNIFICANT_BELOW else 1
    if lead >= 9.5:
        digits, exponent = 2, exponent + 1
    decimals = digits - 1 - exponent
    if math.isfinite(low) and low > 0:  # a positive figure keeps a digit: 20 never prints as 0
        decimals = max(decimals, -math.floor(math.log10(low)))
    return min(decimals, _MOST_DECIMALS)


def round_down(x: float, decimals: int) -> float:
    """``x`` rounded toward −∞ at ``decimals`` (below 0: to tens, hundreds)."""
    return math.floor(round(x * 10.0**decimals, 6)) / 10.0**decimals if math.isfinite(x) else x


def round_up(x: float, decimals: int) -> float:
    """``x`` rounded toward +∞ at ``decimals``."""
    return math.ceil(round(x * 10.0**decimals, 6)) / 10.0**decimals if math.isfinite(x) else x


def number_text(x: float, decimals: int, sign: bool = False) -> str:
    """``x`` at ``decimals`` (no "-0"); "∞"/"-∞" for an unbounded end, "n/a" for NaN;
    ``sign``: "+3"."""
    if math.isnan(x):
        return "n/a"
    plus = "+" if sign else ""
    if math.isinf(x):
        return f"{plus if x > 0 else '-'}∞"
    x = round(x, decimals) + 0.0  # + 0.0: -0.0 prints as 0
    text = f"{x:{plus}.{max(decimals, 0)}f}"
    return f"{0.0:{plus}.{max(decimals, 0)}f}" if float(text) == 0 else text


class IntervalText(NamedTuple):
    """An estimate and its interval as printed (``interval_strings``): "2.04", "1.1", "33.4"."""

    estimate: str
    low: str
    high: str


def interval_strings(
    estimate: float, low: float, high: float, decimals: int | None = None, sign: bool = False
) -> IntervalText:
    """An estimate and its 95% interval as text by the one rule every figure is printed by:
    to the digits the interval's width supports (``interval_decimals``, or ``decimals`` where a
    caller needs more, e.g. to keep a bound off a boundary it does not reach). The bounds are
    rounded outward, so the printed interval holds the computed one; the estimate to the
    nearest, then into its printed interval, so that no figure is printed outside its own
    interval. An infinite bound prints "∞"/"-∞", a NaN one "n/a"."""
    d = interval_decimals(estimate, low, high) if decimals is None else decimals
    lo, hi = round_down(low, d), round_up(high, d)
    est = round(estimate, d) if math.isfinite(estimate) else estimate
    est = max(est, lo) if not math.isnan(lo) else est
    est = min(est, hi) if not math.isnan(hi) else est
    return IntervalText(
        number_text(est, d, sign), number_text(lo, d, sign), number_text(hi, d, sign)
    )
