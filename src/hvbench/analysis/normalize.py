"""Normalization to the baseline, respecting each metric's direction.

"% of native" always reads "how much of native performance is kept": value/native for a metric
where higher is better (throughput), native/value where lower is better (elapsed time), so that
100 is native and less is worse either way. "% loss" is 100 minus that (the paper's Table 1).
The plain ``ratio`` value/native is kept as well because for times it is what the seeds print
(kernbench's "elapsed time / native": 1.56 means 56% slower).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hvbench.analysis.stats import ALPHA, Difference, welch


@dataclass(frozen=True)
class Normalized:
    """A platform's figure against the baseline's."""

    ratio: float
    """mean(value) / mean(baseline), whatever the direction."""
    pct_of_native: float
    pct_loss: float
    p_value: float
    """Welch's test of the two series; NaN when either has fewer than 2 values."""

    @property
    def significant(self) -> bool:
        return math.isfinite(self.p_value) and self.p_value < ALPHA


def pct_of_native(value: float, baseline: float, higher_is_better: bool) -> float:
    """Percentage of the baseline's performance that ``value`` keeps (100 = same)."""
    if not baseline or not value:
        return math.nan
    return 100 * (value / baseline if higher_is_better else baseline / value)


def normalize(values: np.ndarray, baseline: np.ndarray, higher_is_better: bool) -> Normalized:
    """Compare a series with the baseline's series (means, and Welch's test between them)."""
    diff: Difference = welch(baseline, values)
    mean, base = float(np.mean(values)), float(np.mean(baseline))
    pct = pct_of_native(mean, base, higher_is_better)
    return Normalized(
        ratio=mean / base if base else math.nan,
        pct_of_native=pct,
        pct_loss=100 - pct,
        p_value=diff.p_value,
    )
