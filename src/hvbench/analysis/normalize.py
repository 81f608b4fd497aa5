"""Normalization to the baseline, respecting each metric's direction.

"% of native" always reads "how much of native performance is kept": value/native for a metric
where higher is better (throughput), native/value where lower is better (elapsed time), so that
100 is native and less is worse either way. "% loss" is 100 minus that (the paper's Table 1).
The plain ``ratio`` value/native is kept as well because for times it is what the seeds print
(kernbench's "elapsed time / native": 1.56 means 56% slower).

Each carries Fieller's 95% interval of the ratio of means (``stats.fieller``), which holds both
series' noise; for lower-is-better metrics % of native is 100/ratio, so its interval is the
ratio's inverted, bounds swapped (Fieller's set is the same whichever mean is on top).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hvbench.analysis.stats import (
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_TESTED,
    PRACTICAL,
    RESOLUTION_UNKNOWN,
    Ratio,
    Resolutions,
    ratio,
    reading,
)

REFERENCE = "baseline"
"""The reading of the baseline against itself."""
DIFFERENCES = frozenset({"memory.overhead_mib"})
"""Figures that are a difference by definition (the memory workload's overhead: host PSS minus
guest memory), which can be below 0: their sign says which way, and a ratio of two means
nothing (−2 against −5 MiB is "250%", a gain, for the worse one)."""


def signed(name: str, *series: np.ndarray) -> bool:
    """Whether a figure is set against another by their difference, in its unit, rather than by
    their ratio: a difference by definition, or a figure measured below 0 somewhere."""
    return name in DIFFERENCES or any(bool((np.asarray(x) < 0).any()) for x in series)


@dataclass(frozen=True)
class Normalized:
    """A platform's figure against the baseline's, with intervals and repetition counts."""

    ratio: float
    """mean(value) / mean(baseline), whatever the direction."""
    ratio_low: float
    ratio_high: float
    pct_of_native: float
    pct_low: float
    pct_high: float
    """95% interval of pct_of_native: NaN when not tested (fewer than 2 repetitions on a side),
    infinite where unbounded."""
    p_value: float
    """Welch's test of the two means, at the interval's degrees of freedom: p < 0.05 exactly
    when the interval excludes 100%. NaN when not tested."""
    n: int
    """Repetitions of this figure."""
    n_baseline: int
    reference: bool = False
    """The baseline against itself: 100 by definition, nothing to test."""
    unresolved: bool = False
    """A side's repetitions are identical and its resolution unknown (``Ratio.unresolved``):
    not tested."""

    @property
    def pct_loss(self) -> float:
        return 100 - self.pct_of_native

    @property
    def tested(self) -> bool:
        return not self.reference and self.n >= 2 and self.n_baseline >= 2 and not self.unresolved

    @property
    def significant(self) -> bool:
        """The interval of % of native excludes 100."""
        return self.tested and (self.pct_low > 100 or self.pct_high < 100)

    def reading(self, threshold: float = PRACTICAL) -> str:
        """loss, gain, no significant difference (within ±threshold), inconclusive, not tested,
        or baseline (``stats.reading`` on % of native)."""
        if self.reference:
            return REFERENCE
        return reading(self.pct_low / 100, self.pct_high / 100, self.tested, threshold)

    def describe(self, threshold: float = PRACTICAL) -> str:
        """What may be said of it, in words: "not tested (1 repetition)", "inconclusive: between
        −12% and +3%", "no significant difference (within ±5%)"; "" for a loss or a gain, whose
        figure and interval say it all."""
        what = self.reading(threshold)
        if what == NOT_TESTED:
            n = min(self.n, self.n_baseline)
            if n >= 2 and self.unresolved:
                return f"{NOT_TESTED} ({RESOLUTION_UNKNOWN})"
            return f"{NOT_TESTED} ({n} repetition{'s' if n != 1 else ''})"
        if what == EQUIVALENT:
            return f"{EQUIVALENT} (within ±{100 * threshold:.0f}%)"
        if what == INCONCLUSIVE:
            if not (math.isfinite(self.pct_low) and math.isfinite(self.pct_high)):
                return "inconclusive: the interval is unbounded"
            return (
                f"inconclusive: between {self.pct_low - 100:+.0f}% and {self.pct_high - 100:+.0f}%"
            ).replace("-", "−")
        return ""


def outward(low: float, high: float, boundary: float, decimals: int = 0, most: int = 3) -> int:
    """The decimals to print an interval's bounds with, each rounded outward (low down, high up,
    so that the printed interval holds the computed one): ``decimals``, or more where a bound on
    one side of ``boundary`` (no change: 100%, 1×, 0) would print on it or past it (a
    significant loss's 99.7% as 100), up to ``most`` more. Rounded outward, an inconclusive
    interval's bounds never print as 0 either."""
    for d in range(decimals, decimals + most + 1):
        lo, hi = _down(low, d), _up(high, d)
        touches = (math.isfinite(low) and low > boundary >= lo) or (
            math.isfinite(high) and high < boundary <= hi
        )
        if not touches:
            return d
    return decimals + most


def _down(x: float, d: int) -> float:
    return math.floor(round(x * 10**d, 6)) / 10**d if math.isfinite(x) else x


def _up(x: float, d: int) -> float:
    return math.ceil(round(x * 10**d, 6)) / 10**d if math.isfinite(x) else x


def _text(x: float, d: int, sign: bool) -> str:
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "unbounded"
    text = f"{x:{'+' if sign else ''}.{d}f}"
    return f"{0.0:{'+' if sign else ''}.{d}f}" if float(text) == 0 else text


def rounded(
    estimate: float,
    low: float,
    high: float,
    boundary: float,
    decimals: int = 0,
    sign: bool = False,
) -> tuple[str, str, str]:
    """An estimate and its interval as text at one number of decimals (``outward``): the
    bounds rounded outward, the estimate to the nearest (so it prints within them);
    "unbounded" for an infinite bound, "n/a" for NaN; ``sign``: "+3"."""
    d = outward(low, high, boundary, decimals)
    return _text(estimate, d, sign), _text(_down(low, d), d, sign), _text(_up(high, d), d, sign)


def span(low: float, high: float, fmt: Callable[[float], str], unit: str = "") -> str:
    """An interval as "[79–90%]", "[79–unbounded]" or "[unbounded]"; "" where there is none."""
    if math.isnan(low) or math.isnan(high):
        return ""
    if not (math.isfinite(low) or math.isfinite(high)):
        return "[unbounded]"
    lo = fmt(low) if math.isfinite(low) else "unbounded"
    hi = fmt(high) + unit if math.isfinite(high) else "unbounded"
    return f"[{lo}–{hi}]"


def _inverse(low: float, high: float) -> tuple[float, float]:
    """1/θ over an interval of θ: the bounds swap; a lower bound at or below 0 leaves the
    inverse unbounded above (100/θ of a mean not significantly above 0)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return (low, high) if math.isnan(low) else (-math.inf, math.inf)
    if low <= 0:
        return (1 / high if high > 0 else -math.inf), math.inf
    return 1 / high, 1 / low


def from_ratio(r: Ratio, higher_is_better: bool) -> Normalized:
    """% of native from the ratio value/baseline (A = baseline, B = value)."""
    low, high = (r.low, r.high) if higher_is_better else _inverse(r.low, r.high)
    kept = r.estimate if higher_is_better else 1 / r.estimate if r.estimate else math.nan
    return Normalized(
        ratio=r.estimate,
        ratio_low=r.low,
        ratio_high=r.high,
        pct_of_native=100 * kept if math.isfinite(kept) and kept else math.nan,
        pct_low=100 * low,
        pct_high=100 * high,
        p_value=r.p_value,
        n=r.n_b,
        n_baseline=r.n_a,
        unresolved=r.unresolved,
    )


def normalize(
    values: np.ndarray,
    baseline: np.ndarray,
    higher_is_better: bool,
    resolutions: Resolutions = (None, None),
) -> Normalized:
    """Compare a series with the baseline's series: ratio of means, % of native, intervals;
    ``resolutions``: of the baseline's mean and of the series' (``stats.fieller``)."""
    return from_ratio(ratio(baseline, values, resolutions=resolutions), higher_is_better)


def reference(n: int) -> Normalized:
    """The baseline's own figure: 100% of itself, exactly, by definition: no interval (bounds
    of 100 would read as an interval of zero width, a precision nothing measured)."""
    nan = math.nan
    return Normalized(1.0, nan, nan, 100.0, nan, nan, nan, n, n, reference=True)
