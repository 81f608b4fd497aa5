"""Single vs aggregate: per-instance figures, their sum, scaling and overcommit.

A cell with N instances gives, per repetition, N values of a metric. The **single** figure is
their mean, the **aggregate** their sum (for throughput metrics only: summing times or
percentages means nothing); scaling efficiency compares the aggregate with N times the
platform's per-instance aggregate at its smallest count.

Averaging over instances hides an instance that gets less than its share (one of four at 0.4×
is a CV of 0.2% over repetitions, but about a third across instances): the spread across the
instances within each repetition is kept beside the average, and an instance far behind its
peers in most repetitions is called starved.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from hvbench.analysis.model import Rotation, Starved
from hvbench.analysis.outliers import OUTLIER_LEVEL, behind_most, null_threshold
from hvbench.store import CellView, PlatformState

STARVED_RATIO = 0.7
"""An instance whose value is below this share of the median of the other instances of its
repetition (above 1/0.7 of it for lower-is-better metrics) is behind in that repetition; behind
in more than half of them, it is starved. Measured by simulation on clean cells (instances
spread normally): no false alarm at a CV of 5% across instances, ≤ 2% at 10% with one
repetition and ≤ 0.1% from three; one instance of four at 0.4× is found every time, and so is
a different one at 0.4× in each repetition (``CellValues.rotating``)."""


ROTATING_MIN_INSTANCES = 3
"""Instances before starvation can be said to rotate: with 2, neither has others whose spread
it could be measured against, and one below 0.7× the other is as much the other above it."""


def is_throughput(unit: str, higher_is_better: bool) -> bool:
    """Summable over instances: higher is better and not a share (%CPU cannot be added up)."""
    return higher_is_better and unit.strip() != "%"


@dataclass(frozen=True)
class Readings:
    """One metric's values in one cell as stored: one per repetition and instance that
    reported it, the four arrays row by row."""

    repetitions: np.ndarray
    instances: np.ndarray
    values: np.ndarray
    resolutions: np.ndarray
    """Of each value (``Metric.resolution``); NaN where unknown."""

    def __len__(self) -> int:
        return len(self.values)

    def of_resolutions(self) -> Readings:
        """The resolutions in place of the values, for ``cell_values`` to average and sum as it
        does the values: a mean's rounding error is within half the mean of its values'
        resolutions, a sum's within half their sum."""
        return replace(self, values=self.resolutions)


@dataclass
class CellValues:
    """One metric's values in one cell, per repetition and per instance, from its
    ``Readings``."""

    reps: np.ndarray
    single: np.ndarray
    """Per repetition, mean over the instances that reported."""
    aggregate_reps: np.ndarray
    aggregate: np.ndarray
    """Per repetition in which every instance reported, the sum over instances."""
    per_instance: np.ndarray
    """Per instance, mean over repetitions."""
    instances: np.ndarray
    """The instance numbers, in the order of ``per_instance`` and of ``table``'s columns."""
    table: np.ndarray
    """(repetition × instance) values; NaN where an instance did not report."""

    def instance_cv(self) -> float:
        """Mean over repetitions of the CV across the instances of each (those with at least
        two values); NaN with one instance."""
        counts = np.isfinite(self.table).sum(axis=1)
        rows = self.table[counts > 1]
        if len(rows) == 0:
            return math.nan
        mean = np.nanmean(rows, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cv = np.nanstd(rows, axis=1, ddof=1) / np.abs(mean)
        cv = cv[np.isfinite(cv)]
        return float(np.mean(cv)) if len(cv) else math.nan

    def _shares(self, higher_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
        """(repetition × instance) each value / the median of the other instances of its
        repetition (inverted for ↓ metrics), and where that is defined."""
        count = len(self.instances)
        others = self.table[:, [[k for k in range(count) if k != j] for j in range(count)]]
        if np.isfinite(others).all():
            peers = np.median(others, axis=2)  # (repetition × instance); nanmedian is slow
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # no others: NaN
                peers = np.nanmedian(others, axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = self.table / peers if higher_is_better else peers / self.table
        return share, np.isfinite(self.table) & np.isfinite(peers)

    def starved(self, higher_is_better: bool) -> dict[int, Starved]:
        """The instances behind the others (< ``STARVED_RATIO`` of their median) in more than
        half of the repetitions where they had others to compare with."""
        if len(self.instances) < 2:
            return {}
        share, valid = self._shares(higher_is_better)
        out = {}
        for j, inst in enumerate(self.instances):
            mine = share[:, j][valid[:, j]]
            behind = int(np.sum(mine < STARVED_RATIO))
            if len(mine) and behind > len(mine) / 2:
                out[int(inst)] = Starved(float(np.median(mine)), behind, len(mine))
        return out

    def rotating(self, higher_is_better: bool) -> Rotation | None:
        """(repetitions with an instance behind the others, repetitions compared) where that
        is more than half of them, from 2, but no one instance is behind in most (``starved``):
        a different instance starved in each repetition, as a scheduler that rotates its victim
        does, which neither the mean per instance nor ``starved`` shows. It must also be far
        from the others in their own spread (``outliers.behind_most``, beyond what clean normal
        instances reach in ``OUTLIER_LEVEL`` of cells, over the repetitions every instance
        reported): below 0.7× alone, clean cells at a CV of 15% across instances were flagged
        in 3.3% (4 instances × 3 repetitions) and 8.3% (8 × 3). None otherwise."""
        k = len(self.instances)
        if k < ROTATING_MIN_INSTANCES or self.starved(higher_is_better):
            return None
        share, valid = self._shares(higher_is_better)
        compared = valid.any(axis=1)
        behind = int(np.sum(((share < STARVED_RATIO) & valid).any(axis=1)))
        of = int(compared.sum())
        if of < 2 or behind <= of / 2:
            return None
        full = self.table[np.isfinite(self.table).all(axis=1)] * (1 if higher_is_better else -1)
        if len(full) < 2:
            return None
        far = float(behind_most(full)) > null_threshold("rotating", len(full), OUTLIER_LEVEL, k)
        return Rotation(behind, of) if far else None


def cell_values(readings: Readings, instances: int) -> CellValues:
    """Group a cell's readings by repetition and by instance; a repetition where an instance
    did not report has a single figure but no aggregate (a sum with a missing part would look
    like a loss)."""
    values = readings.values
    reps, rep_idx = np.unique(readings.repetitions, return_inverse=True)
    counts = np.bincount(rep_idx, minlength=len(reps))
    sums = np.bincount(rep_idx, weights=values, minlength=len(reps))
    full = counts >= instances
    labels, inst_idx = np.unique(readings.instances, return_inverse=True)
    per_instance = np.bincount(inst_idx, weights=values) / np.bincount(inst_idx)
    table = np.full((len(reps), len(labels)), np.nan)
    table[rep_idx, inst_idx] = values
    return CellValues(
        reps.astype(int),
        sums / counts,
        reps[full].astype(int),
        sums[full],
        per_instance,
        labels.astype(int),
        table,
    )


def overcommit(states: list[PlatformState]) -> bool | None:
    """Whether the cell ran more vCPUs than its host has cores, as the runner recorded with each
    sample; None where no sample says."""
    flags = [s.overcommit for s in states if s.overcommit is not None]
    return any(flags) if flags else None


def scaling(
    aggregates: Mapping[tuple[int, str], tuple[CellView, float]],
) -> dict[tuple[int, str], float]:
    """Each throughput figure's scaling efficiency against its platform's smallest count, by
    (cell id, metric); ``aggregates`` are the figures' cell and aggregate mean."""
    groups: dict[tuple[str, str, str], list[tuple[int, str]]] = defaultdict(list)
    for key, (cell, _) in aggregates.items():
        groups[(cell.platform, cell.workload, key[1])].append(key)
    out: dict[tuple[int, str], float] = {}
    for keys in groups.values():
        first_cell, first_mean = min((aggregates[k] for k in keys), key=lambda a: a[0].instances)
        if first_mean <= 0:
            continue
        per_first = first_mean / first_cell.instances
        for k in keys:
            cell, mean = aggregates[k]
            out[k] = mean / (cell.instances * per_first)
    return out


class InstancePercentile(NamedTuple):
    """A figure that is a percentile over a cell's instances: its level, and the figure of each
    instance it is taken over."""

    p: int
    of: str


INSTANCE_PERCENTILES = {
    "boot.storm.ready_p50_s": InstancePercentile(50, "boot.ready_s"),
    "boot.storm.ready_p99_s": InstancePercentile(99, "boot.ready_s"),
}
"""Figures that are a percentile over a cell's instances (its boot storm's ready times)."""


def percentile_need(p: int) -> int:
    """The instances a p-th percentile needs behind it to be one: 100/(100 − p), rounded up
    (2 for a median, 20 for a p95, 100 for a p99)."""
    return math.ceil(100 / (100 - p))


def percentile_shortfall(name: str, instances: int) -> str | None:
    """Why a percentile over a cell's instances is not one, where too few instances stand
    behind it: a p-th percentile needs 100/(100 − p) values (2 for a median, 100 for a p99);
    below that it is an interpolation between the slowest few, at 1 instance that instance's
    own figure. None where enough do, or for any other figure."""
    percentile = INSTANCE_PERCENTILES.get(name)
    if percentile is None:
        return None
    p = percentile.p
    need = percentile_need(p)
    if instances >= need:
        return None
    return f"a p{p} needs {need} instances behind it, the cell has {instances}"
