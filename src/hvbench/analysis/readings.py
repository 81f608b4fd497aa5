"""What a figure against the baseline reads as: one type for every reading the analysis gives
(``reading`` of an interval, a baseline's own figure, a mixed workload, the matrix's cells
with no figure), which reports, exports and comparisons show as its value."""

from __future__ import annotations

from enum import StrEnum

from hvbench.analysis.stats import PRACTICAL


class Reading(StrEnum):
    """A figure's reading, in the order a legend names them; its value is the word printed and
    exported."""

    LOSS = "loss"
    SMALL_LOSS = "small loss"
    """A difference the interval shows that lies wholly within ±``stats.PRACTICAL``: real,
    smaller than the change that matters (``compare``'s "below threshold" by the same rule)."""
    GAIN = "gain"
    SMALL_GAIN = "small gain"
    MIXED = "mixed"
    """A workload whose headline metrics read in opposite directions, a loss in one and a gain
    in another: no one figure of them (their geometric mean would let the two cancel)."""
    EQUIVALENT = "no significant difference"
    INCONCLUSIVE = "inconclusive"
    NOT_TESTED = "not tested"
    LEFT_OUT = "left out"
    """A matrix cell with no figure: its samples failed, or no repetition measured all of its
    metrics."""
    NOT_A_WIN = "not a win"
    """A matrix cell whose every headline figure is above the baseline where that cannot be a
    win (the host's page cache under a guest's disk, ``MetricResult.suspect``): not judged."""
    BASELINE = "baseline"
    """The baseline's own figure, set against itself."""


def reading(low: float, high: float, tested: bool, threshold: float = PRACTICAL) -> Reading:
    """What an interval of a ratio (1 = no change, above 1 = better) lets one say.

    Within 1 ± ``threshold`` (an equivalence test read off the interval, like TOST): a small
    loss or gain where it excludes 1 (real, but smaller than a change that matters: the rule
    of ``compare``'s "below threshold"), else no significant difference. Beyond it: a loss or a
    gain when it excludes 1, bounded or not ([3, ∞) is a gain); otherwise it still admits a
    change that matters and is inconclusive. Fewer than 2 values a side: nothing was tested.
    """
    if not tested:
        return Reading.NOT_TESTED
    if within(low, high, threshold):  # first, as compare's judge: a small change is no loss
        return (
            Reading.SMALL_LOSS
            if high < 1
            else Reading.SMALL_GAIN
            if low > 1
            else Reading.EQUIVALENT
        )
    if high < 1:
        return Reading.LOSS
    if low > 1:
        return Reading.GAIN
    return Reading.INCONCLUSIVE


def within(low: float, high: float, threshold: float) -> bool:
    """The interval of a ratio lies within 1 ± threshold: any change it admits is negligible."""
    return 1 - threshold <= low and high <= 1 + threshold
