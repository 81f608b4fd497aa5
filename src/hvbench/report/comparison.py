"""Tables of a comparison of two runs (or two sets of runs), for every format."""

from __future__ import annotations

import math

from hvbench.analysis.compare import (
    IMPROVEMENT,
    NOT_TESTED,
    REGRESSION,
    VERDICTS,
    Change,
    Comparison,
)
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.stats import RESOLUTION_UNKNOWN
from hvbench.report.tables import Table, with_ci


def _signed(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return "unbounded" if math.isinf(x) else f"{100 * x:+.1f}%"


def _level(c: Comparison) -> int:
    return round(100 * (1 - c.alpha))


def _where(c: Comparison, ch: Change) -> str:
    return f"{platform_label(c, ch.platform)} / {ch.workload} / {ch.instances} inst. / {ch.name}"


def observations(c: Comparison) -> str:
    """What one observation is, and the allowance for the variation between runs."""
    if c.by_run:
        spread = (
            f"; the runs' spread, median over metrics: {100 * c.run_spread:.1f}% (at most the "
            "run-to-run allowance of single-run comparisons on this host)"
            if c.run_spread is not None
            else ""
        )
        return f"observations: runs, {len(c.a)} against {len(c.b)}, each run's mean{spread}"
    return (
        f"observations: repetitions, with a run-to-run allowance of {100 * c.allowance:.1f}% "
        "per run (--allowance); A and B interleaved as two platforms of one study need none"
    )


def ran_on(runs: list[RunAnalysis], platform: str) -> str | None:
    """What a platform ran under (accelerator, mode) in a side's runs; "kvm/tcg" where they
    disagree."""
    seen = list(dict.fromkeys(r.ran.get(platform) for r in runs))
    return seen[0] if len(seen) == 1 else "/".join(s or "n/a" for s in seen)


def platform_label(c: Comparison, platform: str) -> str:
    """The platform's label, or, where A and B ran it under different accelerators or modes,
    both (``qemu-virtio [kvm → tcg]``): its change then measures that too."""
    ran_a, ran_b = ran_on(c.a, platform), ran_on(c.b, platform)
    if ran_a == ran_b:
        return c.b[-1].label(platform)
    return f"{platform} [{ran_a or 'n/a'} → {ran_b or 'n/a'}]"


def _ran_apart(c: Comparison) -> list[str]:
    """The shared platforms that ran under different accelerators or modes in A and B."""
    shared = dict.fromkeys(ch.platform for ch in c.changes)
    return [p for p in shared if ran_on(c.a, p) != ran_on(c.b, p)]


def changes_table(c: Comparison) -> Table:
    level = _level(c)
    t = Table(
        f"{Comparison.label(c.b)} against {Comparison.label(c.a)}",
        [
            "platform",
            "workload",
            "instances",
            "metric",
            f"A ({Comparison.label(c.a)})",
            f"B ({Comparison.label(c.b)})",
            "change",
            f"{level}% CI of change",
            "p (Holm)",
            "could detect",
            "headline",
            "verdict",
        ],
        kind="compare",
        notes=[
            "A, B: mean ±95% CI of the per-instance figure's observations; change = mean(B) / "
            f"mean(A) − 1 with Fieller's {level}% interval; " + observations(c),
            f"regression / improvement: Welch's test passes Holm's step-down at {c.alpha} within "
            "its family (the headline metrics, which decide the exit code; the other metrics, "
            f"reported only) and the change exceeds {100 * c.threshold:.0f}%; no significant "
            f"change: the interval lies within ±{100 * c.threshold:.0f}% (below threshold: and "
            "the test passed); inconclusive: the interval reaches beyond that; not tested: fewer "
            f"than 2 observations on a side, or a side's {RESOLUTION_UNKNOWN}",
            "could detect: the smallest change that would be called a regression about 80% of "
            "the time, were it the only one in its family (from this data's spread)",
        ],
    )
    order = {v: i for i, v in enumerate(VERDICTS)}
    for ch in sorted(c.changes, key=lambda ch: (not ch.headline, order[ch.verdict])):
        j = ch.judged
        t.rows.append(
            [
                platform_label(c, ch.platform),
                ch.workload,
                str(ch.instances),
                f"{ch.name} ({ch.unit}) {'↑' if ch.higher_is_better else '↓'}",
                with_ci(ch.a),
                with_ci(ch.b),
                _signed(ch.change),
                f"{_signed(ch.ci_low)} … {_signed(ch.ci_high)}",
                f"{j.p_holm:.2g}" if math.isfinite(j.p_holm) else "n/a",
                f"{100 * j.detectable:.1f}%" if math.isfinite(j.detectable) else "n/a",
                "yes" if ch.headline else "",
                ch.verdict,
            ]
        )
    return t


def summary_lines(c: Comparison) -> list[str]:
    """Plain-words outcome: platforms that ran differently in A and B, then headline
    regressions or that there are none; then what is inconclusive, the other metrics, and what
    one observation was."""
    heads, others = c.family(True), c.family(False)
    level = _level(c)
    out = [
        f"{platform_label(c, p)}: ran differently in A and B, so its changes measure that too"
        for p in _ran_apart(c)
    ]
    out += [
        f"{workload}: A and B did different work ({what}), so its changes measure that too"
        for workload, what in c.work_apart.items()
    ]
    for ch in c.regressions:
        out.append(
            f"regression: {_where(c, ch)}: {100 * abs(ch.change):.1f}% "
            f"{'lower' if ch.change < 0 else 'higher'} ({level}% CI {_signed(ch.ci_low)} … "
            f"{_signed(ch.ci_high)}, Holm p = {ch.judged.p_holm:.2g})"
        )
    if not c.regressions:
        out.append(
            f"no significant regression among {len(heads)} headline metrics (Holm's step-down "
            f"over them: family-wise error ≤ {c.alpha}; threshold {100 * c.threshold:.0f}%)"
        )
    for ch in c.unsettled:
        if ch.verdict == NOT_TESTED:
            why = (
                RESOLUTION_UNKNOWN
                if min(ch.judged.ratio.n_a, ch.judged.ratio.n_b) >= 2
                else "fewer than 2 observations on a side"
            )
            out.append(f"not tested: {_where(c, ch)}: {why}")
        else:
            out.append(
                f"inconclusive: {_where(c, ch)}: between {_signed(ch.ci_low)} and "
                f"{_signed(ch.ci_high)}; could detect {100 * ch.judged.detectable:.1f}%"
            )
    worse = [ch for ch in others if ch.verdict == REGRESSION]
    if others:
        out.append(
            f"{len(worse)} of {len(others)} other metrics significantly worse (not gating; "
            "Holm's step-down over them)"
            + (": " + ", ".join(_where(c, ch) for ch in worse) if worse else "")
        )
    improvements = sum(ch.verdict == IMPROVEMENT for ch in c.changes)
    if improvements:
        out.append(f"{improvements} significant improvement(s)")
    out.append(observations(c))
    if c.only_a or c.only_b:
        out.append(f"not compared: {len(c.only_a)} metric(s) only in A, {len(c.only_b)} only in B")
    return out
