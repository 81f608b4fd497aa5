"""Normalization to the baseline, respecting each metric's direction.

"% of native" always reads "how much of native performance is kept": value/native for a metric
where higher is better (throughput), native/value where lower is better (elapsed time), so that
100 is native and less is worse either way. "% loss" is 100 minus that (the paper's Table 1).
The plain ``ratio`` value/native is kept as well because for times it is what the seeds print
(kernbench's "elapsed time / native": 1.56 means 56% slower).

Each carries Fieller's 95% interval of the ratio of means (``ratios.fieller``), which holds both
series' noise; for lower-is-better metrics % of native is 100/ratio, so its interval is the
ratio's inverted, bounds swapped (Fieller's set is the same whichever mean is on top).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hvbench.analysis.intervals import RESOLUTION_UNKNOWN
from hvbench.analysis.ratios import Ratio, Resolutions, ratio
from hvbench.analysis.readings import Reading, reading
from hvbench.analysis.stats import PRACTICAL
from hvbench.metrics import DIFFERENCES
from hvbench.units import (
    IntervalText,
    interval_decimals,
    interval_strings,
    round_down,
    round_up,
)


def signed(name: str, *series: np.ndarray) -> bool:
    """Whether a figure is set against another by their difference, in its unit, rather than by
    their ratio: a difference by definition, or a figure measured below 0 somewhere."""
    return name in DIFFERENCES or any(bool((np.asarray(x) < 0).any()) for x in series)


@dataclass(frozen=True)
class Normalized:
    """A platform's figure against the baseline's, with intervals and repetition counts: their
    ratio, or, for a signed figure (``signed``), their difference in its unit."""

    ratio: float
    """mean(value) / mean(baseline), whatever the direction; NaN for a signed figure."""
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
    clipped: bool = False
    """Fieller's interval of the ratio reached below 0, which a ratio of figures that cannot be
    negative cannot: its lower bound is 0 (``Ratio.clipped``)."""
    signed: bool = False
    """A figure that can be below 0: set against the baseline by its difference."""
    difference: float = math.nan
    difference_low: float = math.nan
    difference_high: float = math.nan
    """mean(value) − mean(baseline) in the metric's unit, with its 95% interval (Welch's)."""
    scale: float = math.nan
    """|mean(baseline)|: what the practical threshold of a difference is relative to."""
    unit: str = ""
    higher_is_better: bool = True

    @property
    def pct_loss(self) -> float:
        return 100 - self.pct_of_native

    @property
    def tested(self) -> bool:
        return not self.reference and self.n >= 2 and self.n_baseline >= 2 and not self.unresolved

    @property
    def kept(self) -> tuple[float, float]:
        """The interval as a share of the baseline kept (1 = the baseline, less is worse): % of
        native / 100, or a signed figure's difference turned so, relative to |baseline|."""
        if not self.signed:
            return self.pct_low / 100, self.pct_high / 100
        if not self.scale > 0:
            return -math.inf, math.inf
        low, high = self.difference_low / self.scale, self.difference_high / self.scale
        return (1 + low, 1 + high) if self.higher_is_better else (1 - high, 1 - low)

    @property
    def significant(self) -> bool:
        """The interval excludes no difference (100%, or 0 in the unit)."""
        if self.signed:
            return self.tested and (self.difference_low > 0 or self.difference_high < 0)
        return self.tested and (self.pct_low > 100 or self.pct_high < 100)

    def reading(self, threshold: float = PRACTICAL) -> Reading:
        """loss, gain, no significant difference (within ±threshold), inconclusive, not tested,
        or baseline (``readings.reading`` on % of native, or on a signed figure's difference
        relative to the baseline's magnitude)."""
        if self.reference:
            return Reading.BASELINE
        return reading(*self.kept, self.tested, threshold)

    def describe(self, threshold: float = PRACTICAL) -> str:
        """What may be said of it, in words: "not tested (1 repetition)", "inconclusive: between
        −12% and +3%", "no significant difference (within ±5%)", "a real loss, smaller than
        5%"; "" for a loss or a gain, whose figure and interval say it all. Bounds are rounded
        outward (``rounded``)."""
        what = self.reading(threshold)
        if what == Reading.NOT_TESTED:
            n = min(self.n, self.n_baseline)
            if n >= 2 and self.unresolved:
                return f"{Reading.NOT_TESTED} ({RESOLUTION_UNKNOWN})"
            return f"{Reading.NOT_TESTED} ({n} repetition{'s' if n != 1 else ''})"
        margin = f"{100 * threshold:.0f}%"
        if self.signed:
            size = f"{threshold * self.scale:.3g} {self.unit}".rstrip()
            margin = f"{size}: {margin} of the baseline's"
        if what == Reading.EQUIVALENT:
            return f"{Reading.EQUIVALENT} (within ±{margin})"
        if what in SMALL:
            return f"{SMALL[what]}, smaller than {margin}"
        if what == Reading.INCONCLUSIVE:
            if self.signed:
                low, high = self.difference_low, self.difference_high
                _, lo, hi = rounded(self.difference, low, high, 0.0, sign=True)
                return f"inconclusive: between {lo} and {hi} {self.unit}".rstrip().replace("-", "−")
            if not (math.isfinite(self.pct_low) and math.isfinite(self.pct_high)):
                return "inconclusive: the interval is unbounded"
            # the change from 100%, at the digits the figure's own interval is printed with
            d = decimals(self.pct_of_native, self.pct_low, self.pct_high, 100.0)
            _, lo, hi = interval_strings(0.0, self.pct_low - 100, self.pct_high - 100, d, True)
            return f"inconclusive: between {lo}% and {hi}%".replace("-", "−")
        return ""


SMALL = {Reading.SMALL_LOSS: "a real loss", Reading.SMALL_GAIN: "a real gain"}
"""A small loss or gain in words (``Reading.SMALL_LOSS``): the interval shows it, within ±5%."""
CLIPPED = "°"
"""Marks a bound raised to 0 (``Normalized.clipped``)."""
KINDS = {"pct": 100.0, "loss": 0.0, "ratio": 1.0}
"""Each view of a figure against the baseline, and its value of no change."""


class FigureText(NamedTuple):
    """A figure as printed, and its interval (empty where it has none)."""

    estimate: str
    interval: str


def figure(v: Normalized, kind: str = "pct", unit: str = "") -> FigureText:
    """A figure against the baseline and its interval as text, to the digits its width supports
    (``rounded``): "84.2", "[79.0–90.3]" for % of native (kind pct; loss: 100 − that, "16
    [10–21]"; ratio: "1.19 [1.11–1.27]"), ``unit`` after the figure and the interval; a signed
    figure's difference in its own unit whatever the kind ("+3.0 MiB", "[+1.2–+4.8 MiB]").
    Bounds are rounded outward, with more digits where one would print on the boundary it
    does not reach; a bound raised to 0
    is marked ``CLIPPED``; no interval (""), where none was computed or a platform did no work
    at all (0 in every repetition, a ratio of exactly 0)."""
    if v.signed and v.reference:
        return FigureText(f"0 {v.unit}".rstrip(), "")
    if v.signed:
        est, lo, hi = rounded(v.difference, v.difference_low, v.difference_high, 0.0, True)
        unit, clipped_low, clipped_high = f" {v.unit}".rstrip(), False, False
    else:
        boundary = KINDS[kind]
        est_, low, high = {
            "pct": (v.pct_of_native, v.pct_low, v.pct_high),
            "loss": (v.pct_loss, 100 - v.pct_high, 100 - v.pct_low),
            "ratio": (v.ratio, v.ratio_low, v.ratio_high),
        }[kind]
        est, lo, hi = rounded(est_, low, high, boundary)
        # the raised bound is the ratio's low: % of native's low (↑) or loss's high (↑)
        up = v.higher_is_better  # ↓: % of native is 1/ratio, unbounded above instead
        clipped_low = v.clipped and (kind == "ratio" or (kind == "pct" and up)) and low == 0
        clipped_high = v.clipped and kind == "loss" and up and high == 100
    if v.reference or math.isnan(v.ratio_low if not v.signed else v.difference_low):
        return FigureText(est + unit, "")
    if not v.signed and v.ratio_high == 0:  # no work done: exactly 0, no interval to give
        return FigureText(est + unit, "")
    if "∞" in lo and "∞" in hi:
        return FigureText(est + unit, "[unbounded]")
    # a raised bound is the domain's edge itself, not a measured figure: no digits
    lo = f"0{CLIPPED}" if clipped_low else lo
    hi = f"100{CLIPPED}" if clipped_high else hi
    return FigureText(est + unit, f"[{lo}–{hi}{unit}]")


def apart(v: Normalized) -> tuple[str, str] | None:
    """A signed figure whose interval excludes 0 as its distance from the baseline and the side
    it lies on, so that the estimate reads inside its interval: ("25.0 MiB [24.0–26.0 MiB]",
    "below") rather than "25.0 MiB [-26.0–-24.0 MiB] below"; None for any other figure."""
    if not (v.signed and v.significant):
        return None
    k = 1.0 if v.difference_low > 0 else -1.0
    low, high = sorted((k * v.difference_low, k * v.difference_high))
    est, lo, hi = rounded(k * v.difference, low, high, 0.0)
    unit = f" {v.unit}".rstrip()
    return f"{est}{unit} [{lo}–{hi}{unit}]", "above" if k > 0 else "below"


def outward(low: float, high: float, boundary: float, decimals: int, most: int = 3) -> int:
    """The decimals to print an interval's bounds with, each rounded outward (low down, high up,
    so that the printed interval holds the computed one): ``decimals``, or more where a bound on
    one side of ``boundary`` (no change: 100%, 1×, 0) would print on it or past it (a
    significant loss's 99.7% as 100), up to ``most`` more. Rounded outward, an inconclusive
    interval's bounds never print as 0 either."""
    for d in range(decimals, decimals + most + 1):
        lo, hi = round_down(low, d), round_up(high, d)
        touches = (math.isfinite(low) and low > boundary >= lo) or (
            math.isfinite(high) and high < boundary <= hi
        )
        if not touches:
            return d
    return decimals + most


def decimals(estimate: float, low: float, high: float, boundary: float) -> int:
    """The decimals ``rounded`` prints an estimate and its interval with."""
    return outward(low, high, boundary, interval_decimals(estimate, low, high))


def rounded(
    estimate: float, low: float, high: float, boundary: float, sign: bool = False
) -> IntervalText:
    """An estimate and its interval as text by the one rule (``units.interval_strings``: the
    digits its width supports, bounds outward, the estimate within them), with more digits
    where a bound would print on ``boundary`` (``outward``); "∞" for an infinite bound, "n/a"
    for NaN; ``sign``: "+3"."""
    return interval_strings(estimate, low, high, decimals(estimate, low, high, boundary), sign)


def _inverse(low: float, high: float) -> tuple[float, float]:
    """1/θ over an interval of θ: the bounds swap; a lower bound at or below 0 leaves the
    inverse unbounded above (100/θ of a mean not significantly above 0), an upper ray [r, ∞)
    of positive θ becomes (0, 1/r]."""
    if math.isnan(low) or math.isnan(high):
        return low, high
    if low <= 0:
        return (1 / high if 0 < high < math.inf else -math.inf), math.inf
    return 1 / high, 1 / low


def from_ratio(r: Ratio, higher_is_better: bool, unit: str = "") -> Normalized:
    """% of native from the ratio value/baseline (A = baseline, B = value); a signed figure's
    difference (``Ratio.difference``) as it is, in ``unit``."""
    if r.difference:
        nan = math.nan
        return Normalized(
            ratio=nan,
            ratio_low=nan,
            ratio_high=nan,
            pct_of_native=nan,
            pct_low=nan,
            pct_high=nan,
            p_value=r.p_value,
            n=r.n_b,
            n_baseline=r.n_a,
            unresolved=r.unresolved,
            signed=True,
            difference=r.estimate,
            difference_low=r.low,
            difference_high=r.high,
            scale=r.scale,
            unit=unit,
            higher_is_better=higher_is_better,
        )
    low, high = (r.low, r.high) if higher_is_better else _inverse(r.low, r.high)
    kept = r.estimate if higher_is_better else 1 / r.estimate if r.estimate else math.nan
    return Normalized(
        ratio=r.estimate,
        ratio_low=r.low,
        ratio_high=r.high,
        pct_of_native=100 * kept if math.isfinite(kept) else math.nan,
        pct_low=100 * low,
        pct_high=100 * high,
        p_value=r.p_value,
        n=r.n_b,
        n_baseline=r.n_a,
        unresolved=r.unresolved,
        clipped=r.clipped,
        unit=unit,
        higher_is_better=higher_is_better,
    )


def normalize(
    values: np.ndarray,
    baseline: np.ndarray,
    higher_is_better: bool,
    resolutions: Resolutions = (None, None),
    difference: bool = False,
    unit: str = "",
) -> Normalized:
    """Compare a series with the baseline's series: ratio of means, % of native, intervals;
    ``resolutions``: of the baseline's mean and of the series' (``ratios.fieller``);
    ``difference``: a signed figure, set against the baseline by mean(value) − mean(baseline)."""
    r = ratio(baseline, values, resolutions=resolutions, difference=difference)
    return from_ratio(r, higher_is_better, unit)


def reference(n: int, signed: bool = False, unit: str = "") -> Normalized:
    """The baseline's own figure: 100% of itself (a signed figure: 0 from itself), exactly, by
    definition: no interval (bounds of 100 would read as an interval of zero width, a precision
    nothing measured)."""
    nan = math.nan
    return Normalized(
        1.0, nan, nan, 100.0, nan, nan, nan, n, n, reference=True, signed=signed, unit=unit
    )
