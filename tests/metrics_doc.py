"""docs/metrics.md, the one table of metric names, read as rows for the tests that check a
workload's metrics against it."""

from __future__ import annotations

import re
from pathlib import Path

METRICS_DOC = Path(__file__).parent.parent / "docs/metrics.md"
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+) \| (↑|↓|as above) \| (★)?", re.MULTILINE)


def doc_rows() -> list[tuple[re.Pattern, str, str, bool]]:
    """Each row: its name as a pattern (a ``<x>`` in it matches any value), unit, direction (↑, ↓ or
    "as above") and whether it is a headline (★)."""
    rows = []
    for name, unit, direction, star in ROW.findall(METRICS_DOC.read_text()):
        regex = re.sub(r"<[a-z]+>", "[a-z0-9_]+", re.escape(name))
        pattern = re.compile(f"^{regex}$")
        rows.append((pattern, unit.strip(), direction, bool(star)))
    return rows
