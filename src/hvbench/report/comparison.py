"""Tables of a comparison of two runs, for every format."""

from __future__ import annotations

import math

from hvbench.analysis.compare import Comparison
from hvbench.report.tables import Table, with_ci


def _signed(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}%"


def platform_label(c: Comparison, platform: str) -> str:
    """The platform's label, or, where A and B ran it under different accelerators or modes,
    both (``qemu-virtio [kvm → tcg]``): its change then measures that too."""
    ran_a, ran_b = c.a.ran.get(platform), c.b.ran.get(platform)
    if ran_a == ran_b:
        return c.b.label(platform)
    return f"{platform} [{ran_a or 'n/a'} → {ran_b or 'n/a'}]"


def _ran_apart(c: Comparison) -> list[str]:
    """The shared platforms that ran under different accelerators or modes in A and B."""
    shared = dict.fromkeys(ch.platform for ch in c.changes)
    return [p for p in shared if c.a.ran.get(p) != c.b.ran.get(p)]


def changes_table(c: Comparison) -> Table:
    level = round(100 * (1 - c.alpha))
    t = Table(
        f"{c.b.run_id} against {c.a.run_id}",
        [
            "platform",
            "workload",
            "instances",
            "metric",
            f"A ({c.a.run_id})",
            f"B ({c.b.run_id})",
            "change",
            f"{level}% CI of change",
            "p (Welch)",
            "verdict",
        ],
        kind="compare",
        notes=[
            f"per-instance mean ±95% CI; change = B/A − 1; a change is called when p < {c.alpha} "
            f"and it exceeds the noise threshold of {100 * c.threshold:.0f}%; a regression is a "
            "change in the metric's worse direction"
        ],
    )
    order = {"regression": 0, "improvement": 1, "below threshold": 2, "no significant change": 3}
    for ch in sorted(c.changes, key=lambda ch: order[ch.verdict]):
        d = ch.diff
        t.rows.append(
            [
                platform_label(c, ch.platform),
                ch.workload,
                str(ch.instances),
                f"{ch.name} ({ch.unit}) {'↑' if ch.higher_is_better else '↓'}",
                with_ci(ch.a.single),
                with_ci(ch.b.single),
                _signed(d.change),
                f"{_signed(d.ci_low)} … {_signed(d.ci_high)}",
                f"{d.p_value:.2g}" if math.isfinite(d.p_value) else "n/a",
                ch.verdict,
            ]
        )
    return t


def summary_lines(c: Comparison) -> list[str]:
    """Plain-words outcome: platforms that ran differently in A and B, then the regressions
    or that there are none."""
    out = [
        f"{platform_label(c, p)}: ran differently in A and B, so its changes measure that too"
        for p in _ran_apart(c)
    ]
    for ch in c.regressions:
        out.append(
            f"regression: {platform_label(c, ch.platform)} / {ch.workload} / "
            f"{ch.instances} inst. / {ch.name}: "
            f"{100 * abs(ch.diff.change):.1f}% {'lower' if ch.diff.change < 0 else 'higher'} "
            f"(p = {ch.diff.p_value:.2g})"
        )
    if not c.regressions:
        out.append(
            f"no significant regression among {len(c.changes)} shared metrics "
            f"(p < {c.alpha}, threshold {100 * c.threshold:.0f}%)"
        )
    improvements = sum(ch.verdict == "improvement" for ch in c.changes)
    if improvements:
        out.append(f"{improvements} significant improvement(s)")
    if c.only_a or c.only_b:
        out.append(f"not compared: {len(c.only_a)} metric(s) only in A, {len(c.only_b)} only in B")
    return out
