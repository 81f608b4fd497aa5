"""A study's claims (``expect:``) as a study writes them and as they are judged
(``analysis.claims``): a schema of their own, on pydantic and units alone, so that reading a
run's claims from the store loads nothing of the measuring side (no driver, no workload)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from hvbench.units import parse_quantity

ALL = "all"
"""A claim's platform when it is every platform's that ran its workload."""
NATIVE = "%"
"""The unit of a bound on the % of native."""


class ClaimModel(BaseModel):
    """One entry of a study's ``expect:`` as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    platform: str = ALL
    workload: str = Field(min_length=1)
    """A workload's name (boot) or its cells' label (disk fio ...)."""
    metric: str = Field(min_length=1)
    at_most: str | float | None = None
    at_least: str | float | None = None
    source: str = ""
    """A URL or a document's name: where the claim comes from."""
    instances: PositiveInt | None = None
    """The instance count it is about (default: the workload's smallest)."""

    @model_validator(mode="after")
    def _one_bound(self) -> ClaimModel:
        bounds = [b for b in (self.at_most, self.at_least) if b is not None]
        if len(bounds) != 1:
            raise ValueError("exactly one of at_most and at_least (such as at_most: 125ms)")
        parse_quantity(bounds[0])
        return self


@dataclass(frozen=True)
class Claim:
    """A claim, its bound parsed."""

    platform: str
    workload: str
    metric: str
    bound: float
    """As written: in ``unit``, or in % of native."""
    unit: str | None
    """The bound's unit as written; None: the metric's own; ``NATIVE``: % of native."""
    at_most: bool
    source: str = ""
    instances: int | None = None
    slo: bool = False
    """Made from the consolidation's SLO, not written in ``expect:``."""

    @property
    def of_native(self) -> bool:
        return self.unit == NATIVE

    @classmethod
    def of(cls, m: ClaimModel) -> Claim:
        bound, unit = parse_quantity(m.at_most if m.at_most is not None else m.at_least)
        return cls(
            m.platform,
            m.workload,
            m.metric,
            bound,
            unit,
            m.at_most is not None,
            m.source,
            m.instances,
        )

    @property
    def relation(self) -> str:
        return "at most" if self.at_most else "at least"

    @property
    def text(self) -> str:
        """ "boot.ready_s at most 60 s", "cpu.composite.score at least 95% of native"."""
        if self.of_native:
            return f"{self.metric} {self.relation} {self.bound:g}% of native"
        return f"{self.metric} {self.relation} {self.bound:g}{_space(self.unit)}".rstrip()


def _space(unit: str | None) -> str:
    return f" {unit}" if unit else ""
