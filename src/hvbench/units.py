"""Sizes as users write them in studies ("4G", "256K", "2GiB") and as tools want them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

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


Size = Annotated[int, BeforeValidator(parse_size), PlainSerializer(format_size, return_type=str)]
"""A byte count that studies write as 4G; serialized back the same way."""
