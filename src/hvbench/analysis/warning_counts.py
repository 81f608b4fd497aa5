"""How many warnings of each kind a run's analysis has: one record, counted once, which the end
of ``hvbench run``, its ``--json`` summary and the reports (HTML, Markdown) all print, so that
they say the same number."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hvbench.analysis.model import RunAnalysis

WORDS = {
    "noisy_figures": ("noisy figure", "noisy figures"),
    "noisy_side_figures": ("noisy side figure", "noisy side figures"),
    "other": ("other warning", "other warnings"),
    "host_conditions": (
        "host condition not benchmark-grade",
        "host conditions not benchmark-grade",
    ),
}
"""Each kind of warning in the singular and the plural, in the order they are said."""


@dataclass(frozen=True)
class WarningCounts:
    """A run's warnings counted by kind (none by default)."""

    noisy_figures: int = 0
    """Noisy headline figures (the reports' noise table)."""
    noisy_side_figures: int = 0
    """Noisy side figures (counted, shown in the statistics tables)."""
    other: int = 0
    """Every other warning (failed repetitions, starved instances, composites left out)."""
    host_conditions: int = 0
    """The host's conditions before the run that were not benchmark-grade."""

    @classmethod
    def of(cls, a: RunAnalysis) -> WarningCounts:
        return cls(
            noisy_figures=len(a.noise),
            noisy_side_figures=a.noisy_side,
            other=len(a.warnings),
            host_conditions=sum(c.benchmark_grade is False for c in a.conditions),
        )

    def as_json(self) -> dict[str, int]:
        """The kinds with any, by name (``WORDS``'s keys)."""
        return {kind: n for kind, n in asdict(self).items() if n}

    def line(self) -> str | None:
        """ "16 noisy figures, 1 other warning, 3 host conditions not benchmark-grade"; None
        where there are none."""
        words = (f"{n} {WORDS[kind][n != 1]}" for kind, n in self.as_json().items())
        return ", ".join(words) or None
