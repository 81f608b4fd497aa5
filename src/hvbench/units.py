"""Sizes as users write them in studies ("4G", "256K", "2GiB") and as tools want them."""

from __future__ import annotations

import re
from typing import Annotated

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


def unit_scale(unit: str) -> tuple[str, float] | None:
    """A unit's kind (time, bytes, bytes/s, %) and its factor to that kind's base (seconds,
    bytes, bytes a second, %): "ms" → ("time", 0.001), "Gbit/s" → ("bytes/s", 1.25e8); None for
    a unit of its own (requests/s, count, pixels/s), which a bound states as a bare number."""
    u = unit.strip()
    if u == "%":
        return "%", 1.0
    if u in _TIME:
        return "time", _TIME[u]
    low = u.lower()
    if low in _BITS_PER_S:
        return "bytes/s", _BITS_PER_S[low]
    per_s = low.endswith("/s")
    base = low.removesuffix("/s")
    factor = _BYTES.get(base) or _BITS.get(base)
    if factor is None:
        return None
    return ("bytes/s" if per_s else "bytes"), float(factor)


def parse_quantity(value: object) -> tuple[float, str | None]:
    """A bound as a study writes it: (number, unit) from "125ms", "5MiB", "95%", "14.5Gbit/s"
    or a bare number (unit None: the metric's own)."""
    if isinstance(value, bool):
        raise ValueError(f"a number, or one with a unit: {UNIT_KINDS}")
    if isinstance(value, int | float):
        return float(value), None
    m = _QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"a number, or one with a unit: {UNIT_KINDS}")
    number, unit = float(m.group(1)), m.group(2)
    if not unit:
        return number, None
    if unit_scale(unit) is None:
        raise ValueError(f"a known unit: {UNIT_KINDS}; or a bare number in the metric's unit")
    return number, unit
