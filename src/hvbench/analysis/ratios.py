"""Ratios and differences of two series' means, with their intervals.

A ratio of two means (% of native, ``compare``'s change) gets Fieller's interval with Welch's
degrees of freedom, which carries the noise of both series (dividing one series' interval by
the other's mean leaves the divisor's out: 86% coverage at n = 10 for a nominal 95%). Its
reading is three-way (``reading``): a loss or gain when it excludes 1, "no significant
difference" only when it lies within ±``PRACTICAL``, else inconclusive. Welch's t test, which
needs no equal variances and, unlike a permutation test, can reach p < 0.01 with the 3
repetitions studies usually have (3 against 3 permutations cannot go below p = 0.1), is the
test; Holm's step-down keeps a family of them (``compare``'s metrics) from crying wolf.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hvbench.analysis.stats import CONFIDENCE, identical, scipy_stats


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Welch's two-sided p-value for mean(A) = mean(B): no equal variances assumed. NaN with
    fewer than 2 values on a side (nothing was tested: never call that significant)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) < 2 or len(xb) < 2:
        return math.nan
    delta, variance, df = welch_difference(xa, xb)
    if variance == 0:
        return 1.0 if delta == 0 else 0.0
    return float(2 * scipy_stats().t.sf(abs(delta) / math.sqrt(variance), df))


class WelchDifference(NamedTuple):
    """A difference of two means, its variance and Welch–Satterthwaite's degrees of freedom."""

    delta: float
    variance: float
    df: float


def welch_difference(a: np.ndarray, b: np.ndarray) -> WelchDifference:
    """mean(B) − mean(A) of two series of at least 2 values, the variance of that difference
    (no equal variances assumed) and Welch–Satterthwaite's degrees of freedom for it (NaN where
    the variance is 0): what Welch's test (``welch``) and a change point's interval
    (``changes``) are made of."""
    na, nb = len(a), len(b)
    delta = float(np.mean(b) - np.mean(a))
    va, vb = float(np.var(a, ddof=1)) / na, float(np.var(b, ddof=1)) / nb
    if va + vb == 0:
        return WelchDifference(delta, 0.0, math.nan)
    return WelchDifference(delta, va + vb, (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)))


@dataclass(frozen=True)
class Ratio:
    """mean(B) / mean(A) of two independent series, with Fieller's interval; or, for a signed
    metric (``difference``), mean(B) − mean(A) in its unit, with Welch's.

    ``low``/``high`` are NaN when a side has fewer than 2 values (not tested), infinite when
    mean(A) is not significantly different from 0 (the ratio is then unbounded): ``high`` alone
    where Fieller's set is two rays and the ratio cannot be negative (``ratios``).
    """

    estimate: float
    low: float
    high: float
    p_value: float
    """Test of no change (a ratio of 1, a difference of 0) that the interval inverts: p < 1 −
    confidence exactly when the (bounded) interval excludes it."""
    se: float
    """Standard error of mean(B) − mean(A) relative to mean(A): what a change is measured
    against (``detectable``)."""
    df: float
    n_a: int
    n_b: int
    confidence: float
    unresolved: bool = False
    """A side's repetitions are identical and its resolution unknown: its noise cannot be
    told, so nothing was tested (``RESOLUTION_UNKNOWN``)."""
    clipped: bool = False
    """Fieller's set reached below 0, which a ratio of figures that cannot be negative cannot:
    ``low`` is 0 instead (the set within the ratio's possible values holds the truth as often)."""
    difference: bool = False
    """mean(B) − mean(A) rather than their ratio: a signed figure, whose ratio means nothing."""
    scale: float = math.nan
    """|mean(A)|: what a difference is relative to (``relative``)."""

    @property
    def tested(self) -> bool:
        return self.n_a >= 2 and self.n_b >= 2 and not self.unresolved

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def null(self) -> float:
        """The value of no change: a ratio of 1, a difference of 0."""
        return 0.0 if self.difference else 1.0

    def relative(self, x: float) -> float:
        """A value of the estimate as a ratio to mean(A): itself for a ratio, 1 + x/|mean(A)|
        for a difference (a change of 3 MiB from −5 MiB is 1.6)."""
        if not self.difference:
            return x
        return 1 + x / self.scale if self.scale > 0 else math.nan

    @property
    def significant(self) -> bool:
        """The interval excludes no change (the two means differ at 1 − confidence), bounded or
        not: [9.9, ∞) excludes 1 as surely as [9.9, 30] does."""
        return self.tested and (self.low > self.null or self.high < self.null)


def _variances(
    ma: np.ndarray,
    var_a: np.ndarray,
    na: np.ndarray,
    ra: np.ndarray,
    mb: np.ndarray,
    var_b: np.ndarray,
    nb: np.ndarray,
    rb: np.ndarray,
    allowance: float | np.ndarray,
) -> dict[str, np.ndarray]:
    """The variance of each side's mean, as Fieller's interval and the difference's use it: the
    estimated part (sample variance / n; 0 where the resolution's floor binds), the known part
    (the floor resolution²/12 where it binds, the run-to-run allowance), and which pairs can be
    tested at all (2 values a side, neither identical with no resolution known). A side of
    zeros alone is not unresolved: a throughput of 0 is no work done, exactly, whatever the
    tool's resolution, and against a baseline that did work it is a loss of 100%."""
    with np.errstate(invalid="ignore"):
        sa, sb = np.sqrt(var_a), np.sqrt(var_b)
    unresolved = ((na >= 2) & np.isnan(ra) & identical(sa, ma) & (ma != 0)) | (
        (nb >= 2) & np.isnan(rb) & identical(sb, mb) & (mb != 0)
    )
    tested = (na >= 2) & (nb >= 2) & ~unresolved
    with np.errstate(divide="ignore", invalid="ignore"):
        qa = np.where(tested, var_a / na, 0.0)
        qb = np.where(tested, var_b / nb, 0.0)
        fa, fb = np.nan_to_num(ra**2 / 12), np.nan_to_num(rb**2 / 12)
        qa, qb = np.where(qa >= fa, qa, 0.0), np.where(qb >= fb, qb, 0.0)  # estimated parts
        aa, ab = (allowance * ma) ** 2, (allowance * mb) ** 2
    return {
        "va": np.maximum(qa, fa) + aa,
        "vb": np.maximum(qb, fb) + ab,
        "qa": qa,
        "qb": qb,
        "aa": aa,
        "ab": ab,
        "tested": tested,
        "unresolved": unresolved,
    }


def _welch_df(
    v: dict[str, np.ndarray],
    na: np.ndarray,
    nb: np.ndarray,
    theta: np.ndarray,
    allowance_df: float | np.ndarray,
) -> np.ndarray:
    """Welch–Satterthwaite's degrees of freedom of V_B + θ²·V_A: each estimated part has n − 1,
    the allowance its own (infinite where it is given rather than measured), the floors none."""
    with np.errstate(divide="ignore", invalid="ignore"):
        estimated = (
            v["qb"] ** 2 / np.maximum(nb - 1, 1)
            + theta**4 * v["qa"] ** 2 / np.maximum(na - 1, 1)
            + np.where(np.isfinite(allowance_df), (v["ab"] + theta**2 * v["aa"]) ** 2, 0.0)
            / allowance_df
        )
        total = v["vb"] + theta**2 * v["va"]
        return np.where(estimated > 0, total**2 / estimated, np.inf)


def fieller(
    mean_a: np.ndarray,
    var_a: np.ndarray,
    n_a: np.ndarray,
    mean_b: np.ndarray,
    var_b: np.ndarray,
    n_b: np.ndarray,
    confidence: float = CONFIDENCE,
    allowance: float | np.ndarray = 0.0,
    resolution_a: np.ndarray | None = None,
    resolution_b: np.ndarray | None = None,
    allowance_df: float | np.ndarray = math.inf,
    difference: bool | np.ndarray = False,
) -> dict[str, np.ndarray]:
    """Fieller's interval of mean(B)/mean(A), vectorised over arrays of series' statistics;
    where ``difference``, Welch's interval of mean(B) − mean(A) instead (a signed figure).

    ``var_*`` are the series' sample variances (n − 1). The interval is every θ for which
    (mean(B) − θ·mean(A))² ≤ t²·(V_B + θ²·V_A), V being the variance of each mean, t Student's
    quantile at Welch–Satterthwaite's degrees of freedom for that variance at the estimated
    ratio: unlike dividing B's interval by mean(A), it carries both series' noise. It is
    unbounded when mean(A)² ≤ t²·V_A (the denominator is not significantly non-zero): then the
    whole line, or two rays, θ ≤ ``below`` or θ ≥ ``above`` (NaN where not two rays).
    ``allowance`` adds a relative standard deviation of each mean (run-to-run variation,
    ``compare``) to V_A and V_B: known where ``allowance_df`` is infinite, else estimated with
    that many degrees of freedom (measured from earlier runs), which enter Welch's. A
    difference's variance is V_B + V_A, its allowance relative to each side's mean too.
    ``resolution_*`` (of each mean; NaN where unknown) floor V at resolution²/12, known too
    where it binds; a side whose values are identical with no resolution is not tested
    (``unresolved``). Returns arrays estimate, low, high, p_value, se, df, unresolved, below and
    above; NaN where a side has fewer than 2 values or is unresolved.
    """
    ma, mb = np.asarray(mean_a, dtype=float), np.asarray(mean_b, dtype=float)
    na, nb = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    unknown = np.full(np.shape(ma), np.nan)
    ra = unknown if resolution_a is None else np.asarray(resolution_a, dtype=float)
    rb = unknown if resolution_b is None else np.asarray(resolution_b, dtype=float)
    v = _variances(
        ma,
        np.asarray(var_a, dtype=float),
        na,
        ra,
        mb,
        np.asarray(var_b, dtype=float),
        nb,
        rb,
        np.asarray(allowance, dtype=float),
    )
    va, vb, tested = v["va"], v["vb"], v["tested"]
    diff = np.broadcast_to(np.asarray(difference, dtype=bool), np.shape(ma))
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(ma != 0, mb / ma, np.nan)
        th = np.where(diff, 1.0, np.nan_to_num(theta, nan=1.0))
        df = _welch_df(v, na, nb, th, np.asarray(allowance_df, dtype=float))
        t = scipy_stats().t.ppf((1 + confidence) / 2, df)
        quad = ma**2 - t**2 * va  # > 0: mean(A) is significantly non-zero, the set is bounded
        root = np.sqrt(np.maximum(t**2 * (vb * quad + mb**2 * va), 0.0))
        spread = np.sqrt(va + vb)
        low = np.where(
            diff, mb - ma - t * spread, np.where(quad > 0, (ma * mb - root) / quad, -np.inf)
        )
        high = np.where(
            diff, mb - ma + t * spread, np.where(quad > 0, (ma * mb + root) / quad, np.inf)
        )
        stat = np.where(spread > 0, np.abs(mb - ma) / spread, np.where(mb == ma, 0.0, np.inf))
        p = 2 * scipy_stats().t.sf(stat, df)
        se = np.abs(spread / ma)
        # quad < 0 with real roots: the set is two rays, θ ≤ the smaller root or θ ≥ the larger
        rays = tested & ~diff & (quad < 0) & (root > 0)
        roots = ((ma * mb - root) / quad, (ma * mb + root) / quad)
        below = np.where(rays, np.minimum(*roots), np.nan)
        above = np.where(rays, np.maximum(*roots), np.nan)
    nan = np.full(np.shape(ma), np.nan)
    return {
        "estimate": np.where(diff, mb - ma, theta),
        "low": np.where(tested, low, nan),
        "high": np.where(tested, high, nan),
        "p_value": np.where(tested, p, nan),
        "se": np.where(tested, se, nan),
        "df": np.where(tested, df, nan),
        "unresolved": v["unresolved"],
        "below": below,
        "above": above,
    }


Resolutions = tuple[float | None, float | None]
"""The resolution of each side's mean (A, B); None where unknown."""


def ratios(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    confidence: float = CONFIDENCE,
    allowance: float | Sequence[float] = 0.0,
    resolutions: Sequence[Resolutions] | None = None,
    allowance_df: float | Sequence[float] = math.inf,
    difference: bool | Sequence[bool] = False,
) -> list[Ratio]:
    """``Ratio`` of mean(B)/mean(A) for each (A, B) pair of series, in one vectorised call
    (``difference``: mean(B) − mean(A), for the signed ones). A ratio of series that cannot be
    negative (no value below 0 on either side) is never below 0: Fieller's set is cut there, to
    its upper ray where it is two rays and the lower lies below 0 ("[9.9–∞×]", not "[0–∞×]"),
    else its lower bound is clipped to 0 and said to be (``Ratio.clipped``); either holds the
    truth as often as the whole set does."""
    if not pairs:
        return []
    arrays = [(np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for a, b in pairs]
    (mean_a, var_a, n_a), (mean_b, var_b, n_b) = (
        moments([pair[side] for pair in arrays]) for side in (0, 1)
    )
    res = np.array(
        [(math.nan, math.nan)] * len(pairs) if resolutions is None else resolutions,
        dtype=float,  # None becomes NaN: unknown
    ).reshape(len(pairs), 2)
    diff = np.broadcast_to(np.asarray(difference, dtype=bool), (len(pairs),))
    out = fieller(
        mean_a,
        var_a,
        n_a,
        mean_b,
        var_b,
        n_b,
        confidence,
        np.broadcast_to(np.asarray(allowance, dtype=float), (len(pairs),)),
        res[:, 0],
        res[:, 1],
        np.broadcast_to(np.asarray(allowance_df, dtype=float), (len(pairs),)),
        diff,
    )
    clipped = ~diff & (out["low"] < 0)
    for i in np.flatnonzero(clipped):  # rare: only where Fieller's set reaches below 0
        clipped[i] = not any((x < 0).any() for x in arrays[i])
    # two rays, the lower wholly below 0: what is left of the set is the upper one, [above, ∞)
    ray = clipped & (out["below"] < 0) & (out["above"] > 0)
    out["low"] = np.where(ray, out["above"], np.where(clipped, 0.0, out["low"]))
    clipped &= ~ray
    keys = ("estimate", "low", "high", "p_value", "se", "df", "unresolved")
    columns = [out[k].tolist() for k in keys]
    extra = zip(
        n_a.tolist(),
        n_b.tolist(),
        clipped.tolist(),
        diff.tolist(),
        np.abs(mean_a).tolist(),
        strict=True,
    )
    return [
        Ratio(
            estimate,
            low,
            high,
            p,
            se,
            df,
            n_a=int(na),
            n_b=int(nb),
            confidence=confidence,
            unresolved=unresolved,
            clipped=clip,
            difference=d,
            scale=scale,
        )
        for (estimate, low, high, p, se, df, unresolved), (na, nb, clip, d, scale) in zip(
            zip(*columns, strict=True), extra, strict=True
        )
    ]


class Moments(NamedTuple):
    """Per series: mean, sample variance and length."""

    mean: np.ndarray
    var: np.ndarray
    n: np.ndarray


def moments(series: list[np.ndarray]) -> Moments:
    """Mean, sample variance (NaN below 2 values) and length of each series, computed at once
    on a NaN-padded matrix (``compare`` and its simulations judge hundreds at a time)."""
    n = np.array([len(x) for x in series])
    table = np.full((len(series), max(1, int(n.max()))), np.nan)
    for i, x in enumerate(series):
        table[i, : len(x)] = x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # empty or single-value rows: NaN
        mean = np.nanmean(table, axis=1)
        var = np.where(n > 1, np.nanvar(table, axis=1, ddof=1), np.nan)
    return Moments(mean, var, n)


def ratio(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    allowance: float = 0.0,
    resolutions: Resolutions = (None, None),
    difference: bool = False,
) -> Ratio:
    """mean(B)/mean(A) with Fieller's interval, or mean(B) − mean(A) with Welch's where
    ``difference`` (see ``fieller``)."""
    pair = (np.asarray(a), np.asarray(b))
    return ratios([pair], confidence, allowance, [resolutions], difference=difference)[0]
