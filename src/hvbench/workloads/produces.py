"""What a workload's settings produce, by name and unit (``metrics.PRODUCES``): a study's claims
(``expect:``) are checked against it when the study loads, before anything runs. ``<x>`` stands
for a value its settings choose (a fio profile, a role, a direction); a unit of None varies with
``<field>``."""

from __future__ import annotations

import re

from hvbench.metrics import COMPOSITE_SCORE, PRODUCES
from hvbench.workloads import selector
from hvbench.workloads.base import WorkloadSettings


def produced(settings: WorkloadSettings) -> dict[str, str | None]:
    """The metric names (patterns) a workload's settings produce, with their units."""
    key = (settings.name, getattr(settings, selector(settings.name), None))
    extra = (COMPOSITE_SCORE,) if settings.name == "cpu" else ()
    return {f.name: f.unit for f in (*PRODUCES[key], *extra)}


def match(name: str, patterns: dict[str, str | None]) -> str | None:
    """The pattern a metric name matches (``<x>``: letters, digits and '_'), else None."""
    for pattern in patterns:
        if re.fullmatch(re.sub(r"<[a-z]+>", "[a-z0-9_]+", re.escape(pattern)), name):
            return pattern
    return None
