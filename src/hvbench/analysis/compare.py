"""Two runs side by side: is B faster or slower than A, and is that more than noise?

A change is called only when Welch's test gives p < ``alpha`` (0.01 by default: a CI gate must
not cry wolf) AND it is larger than the noise threshold (5% by default). A regression is such a
change in the worse direction for the metric (lower throughput, longer time).
"""

from __future__ import annotations

from dataclasses import dataclass

from hvbench.analysis.run import MetricResult, RunAnalysis
from hvbench.analysis.stats import Difference, welch

ALPHA = 0.01
THRESHOLD = 0.05


@dataclass
class Change:
    """One metric of one (platform, workload, instance count) in both runs."""

    platform: str
    workload: str
    instances: int
    name: str
    unit: str
    higher_is_better: bool
    a: MetricResult
    b: MetricResult
    diff: Difference
    verdict: str
    """regression, improvement, below threshold (significant but small), or no significant
    change."""

    @property
    def better(self) -> float:
        """The change in the metric's good direction (+0.10 = 10% better)."""
        return self.diff.change if self.higher_is_better else -self.diff.change


@dataclass
class Comparison:
    a: RunAnalysis
    b: RunAnalysis
    alpha: float
    threshold: float
    changes: list[Change]
    only_a: list[str]
    only_b: list[str]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == "regression"]


def judge(
    diff: Difference, higher_is_better: bool, alpha: float = ALPHA, threshold: float = THRESHOLD
) -> str:
    """regression, improvement, below threshold or no significant change."""
    if not diff.significant(alpha):
        return "no significant change"
    if abs(diff.change) <= threshold:
        return "below threshold"
    worse = diff.change < 0 if higher_is_better else diff.change > 0
    return "regression" if worse else "improvement"


def compare(
    a: RunAnalysis, b: RunAnalysis, threshold: float = THRESHOLD, alpha: float = ALPHA
) -> Comparison:
    """Compare every metric the two runs share, per-instance figures repetition by repetition."""

    def key(r: MetricResult) -> tuple[str, str, int, str]:
        return r.cell.platform, r.cell.workload, r.cell.instances, r.name

    in_a = {key(r): r for r in a.results}
    in_b = {key(r): r for r in b.results}
    changes = []
    for k, ra in in_a.items():
        rb = in_b.get(k)
        if rb is None:
            continue
        diff = welch(ra.single_values, rb.single_values, confidence=1 - alpha)
        changes.append(
            Change(
                platform=k[0],
                workload=k[1],
                instances=k[2],
                name=k[3],
                unit=ra.unit,
                higher_is_better=ra.higher_is_better,
                a=ra,
                b=rb,
                diff=diff,
                verdict=judge(diff, ra.higher_is_better, alpha, threshold),
            )
        )

    def label(run: RunAnalysis, k: tuple) -> str:
        return f"{run.label(k[0])} / {k[1]} / {k[2]} inst. / {k[3]}"

    return Comparison(
        a=a,
        b=b,
        alpha=alpha,
        threshold=threshold,
        changes=changes,
        only_a=[label(a, k) for k in in_a if k not in in_b],
        only_b=[label(b, k) for k in in_b if k not in in_a],
    )
