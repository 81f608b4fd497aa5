"""Tables of the result store; one schema for SQLite and PostgreSQL.

Changing a table means a new migration under ``migrations/versions`` (alembic), so that a store
made by an older hvbench is upgraded in place rather than lost.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    if TYPE_CHECKING:
        # every model here maps a plain table (DeclarativeBase allows any FromClause), which
        # the store inserts into and copies rows of
        __table__: ClassVar[Table]


class Run(Base):
    """One execution of a study, with everything needed to trust its numbers later."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    study_name: Mapped[str] = mapped_column(String(100))
    study_text: Mapped[str] = mapped_column(Text)
    study_source: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))
    """running, finished (all cells ok), failed (some cells failed), interrupted."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    hvbench_version: Mapped[str] = mapped_column(String(40))
    git_commit: Mapped[str | None] = mapped_column(String(40))
    options: Mapped[dict] = mapped_column(JSON)
    inventory: Mapped[dict] = mapped_column(JSON)


class Artifact(Base):
    """A document a run used and must keep: guest image manifests, resolved platforms."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    content: Mapped[dict] = mapped_column(JSON)


class Derived(Base):
    """What hvbench worked out of a run and keeps to save working it out again, valid while
    ``key`` (the code and the run's state it came from) is: a cache, never a record."""

    __tablename__ = "derived"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100), index=True)
    key: Mapped[str] = mapped_column(String(200))
    content: Mapped[dict] = mapped_column(JSON)


class CellRow(Base):
    """One (platform, workload, instance count) point of a run's matrix."""

    __tablename__ = "cells"
    __table_args__ = (UniqueConstraint("run_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(400))
    platform: Mapped[str] = mapped_column(String(40))
    driver: Mapped[str] = mapped_column(String(40))
    workload: Mapped[str] = mapped_column(String(200))
    workload_name: Mapped[str] = mapped_column(String(40))
    instances: Mapped[int] = mapped_column(Integer)
    platform_settings: Mapped[dict] = mapped_column(JSON)
    workload_settings: Mapped[dict] = mapped_column(JSON)
    ran: Mapped[dict] = mapped_column(JSON)
    """What the driver ran (``store.WhatRan``), as the analysis reads it."""


class SampleRow(Base):
    """One repetition of a cell, committed in its own transaction the moment it is measured."""

    __tablename__ = "samples"
    __table_args__ = (UniqueConstraint("cell_id", "repetition"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), index=True)
    repetition: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(10))
    """ok or failed."""
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    seconds: Mapped[float] = mapped_column(Float)
    platform_state: Mapped[dict] = mapped_column(JSON)
    """The platform around the sample (``store.PlatformState``): its instances, overcommit."""
    host_cpu: Mapped[dict] = mapped_column(JSON)
    """Host CPU seconds by state (/proc/stat) and per instance (psutil) during the sample."""


class MetricRow(Base):
    """One metric of one instance in one sample; ``value`` is NULL where the tool gave text."""

    __tablename__ = "metrics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_id: Mapped[int] = mapped_column(ForeignKey("samples.id", ondelete="CASCADE"), index=True)
    instance: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(120))
    value: Mapped[float | None] = mapped_column(Float)
    text: Mapped[str | None] = mapped_column(String(200))
    unit: Mapped[str] = mapped_column(String(20))
    higher_is_better: Mapped[bool] = mapped_column(Boolean)
    headline: Mapped[bool | None] = mapped_column(Boolean)
    """Whether the workload called it its answer (``Metric.headline``); NULL in runs stored
    before schema 0002, which the analysis judges by the older rule."""
    composite: Mapped[bool] = mapped_column(Boolean, default=False)
    """A sub-score of the workload's composite (``Metric.composite``)."""
    direction: Mapped[str | None] = mapped_column(String(8))
    """``inbound``, ``outbound`` or NULL (``Metric.direction``)."""
    resolution: Mapped[float | None] = mapped_column(Float)
    """The smallest change of ``value`` its measurement can show (``Metric.resolution``); NULL
    where the tool does not say, and in runs stored before schema 0005."""


class RawOutputRow(Base):
    """A tool's raw output and exact command, for provenance and re-parsing."""

    __tablename__ = "raw_outputs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_id: Mapped[int] = mapped_column(ForeignKey("samples.id", ondelete="CASCADE"), index=True)
    instance: Mapped[int] = mapped_column(Integer)
    tool: Mapped[str] = mapped_column(String(40))
    command: Mapped[list] = mapped_column(JSON)
    content: Mapped[str] = mapped_column(Text)


class ProfileRow(Base):
    """A host-wide profile of one sample's measured window (perf sampling cpu-clock)."""

    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_id: Mapped[int] = mapped_column(
        ForeignKey("samples.id", ondelete="CASCADE"), unique=True
    )
    samples: Mapped[int] = mapped_column(Integer)
    """Samples the profile took in all, on every CPU: what a function's share is a share of."""
    frequency_hz: Mapped[int] = mapped_column(Integer)
    command: Mapped[list] = mapped_column(JSON)
    """perf's exact command line, for provenance."""


class ProfileFunctionRow(Base):
    """One of the functions a profile saw most often, with its samples."""

    __tablename__ = "profile_functions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("profiles.id", ondelete="CASCADE"), index=True
    )
    rank: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    percent: Mapped[float] = mapped_column(Float)
    """samples / the profile's samples, in %."""
    symbol: Mapped[str] = mapped_column(Text)
    dso: Mapped[str] = mapped_column(Text)
    """The shared object (executable, library, ``[kernel.kallsyms]``) the function is in."""
