"""The result store: SQLite by default, any SQLAlchemy URL (PostgreSQL included) by ``--db``.

Every sample is committed in a transaction of its own the moment it is measured, so a run
killed at any point loses at most the sample in flight.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import platformdirs
from sqlalchemy import Table, create_engine, delete, event, func, insert, select
from sqlalchemy.engine import Connection, CursorResult, Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError, DatabaseError, SQLAlchemyError
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.sql import ColumnElement

from hvbench.errors import HvbenchError
from hvbench.store.records import (
    ADAPTIVE,
    TIME,
    UNNAMED_HOST,
    AdaptiveRecord,
    Inventory,
    PlatformState,
    Provenance,
    TimeRecord,
    WhatRan,
)
from hvbench.store.schema import (
    Artifact,
    Base,
    CellRow,
    Derived,
    MetricRow,
    ProfileFunctionRow,
    ProfileRow,
    RawOutputRow,
    Run,
    SampleRow,
)
from hvbench.store.upgrade import upgrade

__all__ = [
    "ADAPTIVE",
    "LABELS",
    "TIME",
    "UNNAMED_HOST",
    "AdaptiveRecord",
    "CellRecord",
    "CellView",
    "FunctionRecord",
    "FunctionView",
    "HostCpuReading",
    "Inventory",
    "MetricRecord",
    "MetricView",
    "PlatformState",
    "ProfileRecord",
    "Provenance",
    "RawRecord",
    "RawView",
    "RunRecord",
    "SampleRecord",
    "SampleView",
    "Store",
    "TimeRecord",
    "WhatRan",
    "default_url",
    "image_artifact",
]

FLEET = "fleet"
"""The artifact that tags a run as one host's part of a fleet run: ``{fleet, host}``."""
LABELS = "labels"
"""The run's option that holds what ``hvbench run --label KEY=VALUE`` said: ``{key: value}``."""


def image_artifact(key: str) -> str:
    """The artifact that holds the manifest of the guest image ``key``, kept once per run
    however many of its cells booted it (their platform settings keep only its key)."""
    return f"image {key}"


def default_url() -> str:
    """``$HVBENCH_DB``, else SQLite in the XDG data dir (~/.local/share/hvbench/results.db)."""
    if url := os.environ.get("HVBENCH_DB"):
        return url
    return f"sqlite:///{platformdirs.user_data_path('hvbench') / 'results.db'}"


def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")  # a committed sample survives power loss
    cur.close()


@dataclass
class RunRecord:
    """A run as stored: written once when it starts, read back by the analysis and the CLI."""

    id: str
    study_name: str
    study_text: str
    study_source: str
    status: str
    created_at: datetime
    hvbench_version: str
    git_commit: str | None
    options: dict
    inventory: Inventory
    finished_at: datetime | None = None

    @property
    def labels(self) -> dict[str, str]:
        """What ``--label`` said of the run (the build under test, say); {} where nothing."""
        return dict((self.options or {}).get(LABELS) or {})

    @classmethod
    def from_row(cls, row: Iterable[object]) -> RunRecord:
        """A run from its row's columns (``_RUN_COLUMNS``), the inventory read into its record."""
        values: dict[str, Any] = dict(zip((f.name for f in fields(cls)), row, strict=True))
        return cls(**{**values, "inventory": Inventory.from_json(values["inventory"])})


@dataclass
class CellRecord:
    """A cell of a run, ready to store: what ran (the driver's describe()) and what measured."""

    key: str
    """The study's key of the cell (platform|workload|count)."""
    platform: str
    driver: str
    workload: str
    workload_name: str
    instances: int
    platform_settings: dict
    """The driver's ``describe()``: the settings, and the provenance of what it resolved."""
    workload_settings: dict
    ran: WhatRan


@dataclass
class CellView(CellRecord):
    """A stored cell as read back."""

    id: int

    @property
    def accel(self) -> str | None:
        """The accelerator or mode its guests ran under."""
        return self.ran.mode

    @property
    def provenance(self) -> Provenance:
        """Its platform as the driver described it, read into its parts."""
        return Provenance.of(self.platform_settings)


@dataclass(frozen=True)
class HostCpuReading:
    """The host's CPU during one sample's measured window, as the monitor read it
    (``host.monitor.CpuMonitor``) and the analysis reads it back (``analysis.cost``); stored
    as a JSON object of these fields."""

    wall_s: float
    cores: int
    """Of the host the instances run on."""
    states_s: dict[str, float]
    """Seconds per /proc/stat state, summed over the host's cores, the clients' taken out."""
    busy_s: float
    """All states but idle and iowait."""
    instances_s: list[float | None]
    """Per instance, its host processes' CPU seconds plus what its platform accounts for it
    apart from them; None where none of its processes lived through the window."""
    clients_s: dict[str, float] | None = None
    """The run's load generators' user and system seconds; None where none ran."""
    host: str | None = None
    """The other host's name, where the instances run elsewhere (remote libvirt)."""

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict | None) -> HostCpuReading | None:
        """The stored object back; None for a sample that has none (a failed one)."""
        if not data:
            return None
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class SampleView(NamedTuple):
    """A stored sample as read back, without its metrics and raw outputs."""

    cell_id: int
    repetition: int
    status: str
    error: str | None
    started_at: datetime
    seconds: float
    platform_state: PlatformState
    host_cpu: HostCpuReading | None


class RawView(NamedTuple):
    """A stored raw output as read back, with its sample's cell and repetition."""

    cell_id: int
    repetition: int
    instance: int
    tool: str
    command: list
    content: str


@dataclass
class MetricRecord:
    """A metric as measured by one instance, ready to store."""

    instance: int
    name: str
    value: float | None
    unit: str
    higher_is_better: bool
    text: str | None = None
    headline: bool | None = None
    """``Metric.headline``; None where nobody said (as in runs stored before the flag)."""
    composite: bool = False
    """``Metric.composite``."""
    direction: str | None = None
    """``Metric.direction``."""
    resolution: float | None = None
    """``Metric.resolution``: the smallest change of ``value`` the measurement can show."""


class MetricView(NamedTuple):
    """A stored metric as read back, with its sample's cell and repetition."""

    cell_id: int
    repetition: int
    instance: int
    name: str
    value: float | None
    text: str | None
    unit: str
    higher_is_better: bool
    headline: bool | None
    """None in runs stored before the flag existed."""
    composite: bool
    direction: str | None
    resolution: float | None
    """``Metric.resolution``; None where the tool did not say, and in runs stored before it."""


@dataclass
class RawRecord:
    instance: int
    tool: str
    command: list[str]
    content: str


@dataclass(frozen=True)
class FunctionRecord:
    """One of the functions a host profile saw most often."""

    rank: int
    samples: int
    percent: float
    """samples / the profile's samples, in %."""
    symbol: str
    dso: str


@dataclass
class ProfileRecord:
    """The host's profile of one sample's measured window, ready to store."""

    samples: int
    """Samples taken in all (every CPU), the functions left out included."""
    frequency_hz: int
    command: list[str]
    functions: list[FunctionRecord]


class FunctionView(NamedTuple):
    """A stored profile function as read back, with its sample's cell and repetition."""

    cell_id: int
    repetition: int
    rank: int
    samples: int
    percent: float
    symbol: str
    dso: str
    profile_samples: int
    """Samples of the whole profile the function is part of."""


@dataclass
class SampleRecord:
    """One repetition of a cell with everything it measured."""

    repetition: int
    status: str
    error: str | None
    started_at: datetime
    seconds: float
    platform_state: PlatformState
    host_cpu: HostCpuReading | None
    """None where the sample failed before its window closed."""
    metrics: list[MetricRecord]
    raw: list[RawRecord]
    profile: ProfileRecord | None = None
    """The host's profile of the measured window, where the study asked for one."""


_RUN_COLUMNS = [getattr(Run, f.name) for f in fields(RunRecord)]


def _columns(table: type[Base], names: Iterable[str]) -> list[InstrumentedAttribute[object]]:
    """The columns of ``table`` of these names (a named row's fields), in their order."""
    return [getattr(table, name) for name in names]


class Store:
    """Opens (and creates or upgrades) a store; all writes are short transactions."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.engine = self._connect(self.url)

    @staticmethod
    def _connect(url: str) -> Engine:
        try:
            if url.startswith("sqlite:///"):
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url)
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _sqlite_pragmas)
            upgrade(engine)
        except ArgumentError:
            raise HvbenchError(
                f"--db {url!r} is not a database URL; use e.g. sqlite:///results.db or "
                "postgresql+psycopg://user@host/db"
            ) from None
        except ModuleNotFoundError as e:
            raise HvbenchError(
                f"--db {url!r} needs the Python module {e.name}; install hvbench[postgresql]"
            ) from None
        except DatabaseError as e:  # cannot be reached or opened, or is no database
            raise HvbenchError(f"cannot open the store {url!r}: {e.orig}") from None
        except OSError as e:  # its directory, made for a new SQLite store
            raise HvbenchError(
                f"cannot open the store {url!r}: {e.filename}: {e.strerror}; name one this user "
                "can write with --db URL or HVBENCH_DB"
            ) from None
        return engine

    # writing -----------------------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        with Session(self.engine) as s, s.begin():
            s.add(Run(**{**vars(run), "inventory": run.inventory.to_json()}))

    def set_run_status(self, run_id: str, status: str, finished: bool = False) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is None:
                raise HvbenchError(f"no run {run_id!r} in {self.url}")
            run.status = status
            run.finished_at = datetime.now(UTC) if finished else None

    def add_artifact(self, run_id: str, name: str, content: dict, replace: bool = False) -> None:
        """Keep a document once per run: a second call with the same name is a no-op, or, with
        ``replace``, takes the place of the first (a resumed run's newer account)."""
        with Session(self.engine) as s, s.begin():
            found = s.scalar(select(Artifact).filter_by(run_id=run_id, name=name))
            if found is None:
                s.add(Artifact(run_id=run_id, name=name, content=content))
            elif replace:
                found.content = content

    def keep_derived(self, run_id: str, name: str, key: str, content: dict) -> None:
        """Keep what was worked out of a run under ``name``, in place of what was before."""
        with Session(self.engine) as s, s.begin():
            found = s.scalar(select(Derived).filter_by(run_id=run_id, name=name))
            if found is None:
                s.add(Derived(run_id=run_id, name=name, key=key, content=content))
            else:
                found.key, found.content = key, content

    def cell_id(self, run_id: str, cell: CellRecord) -> int:
        """The id of a run's cell, made on first use (so a resumed run finds its cells)."""
        with Session(self.engine) as s, s.begin():
            found = s.scalar(select(CellRow.id).filter_by(run_id=run_id, key=cell.key))
            if found is not None:
                return found
            row = CellRow(run_id=run_id, **{**vars(cell), "ran": cell.ran.to_json()})
            s.add(row)
            s.flush()
            return row.id

    def add_sample(self, cell_id: int, sample: SampleRecord) -> None:
        """Commit one sample with its metrics and raw outputs in a single transaction."""
        try:
            with Session(self.engine) as s, s.begin():
                row = SampleRow(
                    cell_id=cell_id,
                    repetition=sample.repetition,
                    status=sample.status,
                    error=sample.error,
                    started_at=sample.started_at,
                    seconds=sample.seconds,
                    platform_state=sample.platform_state.to_json(),
                    host_cpu=sample.host_cpu.to_json() if sample.host_cpu else {},
                )
                s.add(row)
                s.flush()
                s.add_all(MetricRow(sample_id=row.id, **vars(m)) for m in sample.metrics)
                s.add_all(RawOutputRow(sample_id=row.id, **vars(r)) for r in sample.raw)
                if (p := sample.profile) is not None:
                    profile = ProfileRow(
                        sample_id=row.id,
                        samples=p.samples,
                        frequency_hz=p.frequency_hz,
                        command=p.command,
                    )
                    s.add(profile)
                    s.flush()
                    s.add_all(
                        ProfileFunctionRow(profile_id=profile.id, **vars(f)) for f in p.functions
                    )
        except SQLAlchemyError as e:
            raise HvbenchError(
                f"cannot store a sample in {self.url}: {getattr(e, 'orig', e)} "
                "(is the disk full? what was measured before is kept)"
            ) from None

    def delete_failed(self, run_id: str) -> int:
        """Forget a run's failed samples so that a resume measures them again."""
        with Session(self.engine) as s, s.begin():
            cells = select(CellRow.id).filter_by(run_id=run_id)
            result = s.execute(
                delete(SampleRow).where(SampleRow.cell_id.in_(cells), SampleRow.status == "failed")
            )
            assert isinstance(result, CursorResult), "a DELETE's result counts its rows"
            return result.rowcount

    # reading -----------------------------------------------------------------------------

    def run(self, run_id: str) -> RunRecord:
        """A run by id, or the newest one for ``latest``."""
        q = select(*_RUN_COLUMNS)
        if run_id == "latest":
            q = q.order_by(Run.created_at.desc()).limit(1)
        else:
            q = q.where(Run.id == run_id)
        with Session(self.engine) as s:
            found = s.execute(q).first()
        if found is not None:
            return RunRecord.from_row(found)
        if run_id == "latest":
            raise HvbenchError(f"no runs in {self.url} yet; start one with 'hvbench run'")
        raise HvbenchError(f"no run {run_id!r} in {self.url}; 'hvbench runs' lists them")

    def runs(self) -> list[RunRecord]:
        with Session(self.engine) as s:
            q = select(*_RUN_COLUMNS).order_by(Run.created_at)
            return [RunRecord.from_row(r) for r in s.execute(q)]

    def done(self, run_id: str) -> set[tuple[str, int]]:
        """(cell key, repetition) of every sample already committed for the run."""
        with Session(self.engine) as s:
            q = (
                select(CellRow.key, SampleRow.repetition)
                .join(SampleRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id)
            )
            return {(k, r) for k, r in s.execute(q)}

    def cells(self, run_id: str) -> list[CellView]:
        with Session(self.engine) as s:
            columns = [getattr(CellRow, f.name) for f in fields(CellView)]
            q = select(*columns).filter_by(run_id=run_id).order_by(CellRow.id)
            return [
                CellView(**{**r._mapping, "ran": WhatRan.from_json(r.ran)}) for r in s.execute(q)
            ]

    def samples(self, run_id: str) -> list[SampleView]:
        """Every sample of a run in the order they were stored (plain rows, not ORM objects,
        which cost a third of the analysis of a large run)."""
        with Session(self.engine) as s:
            q = (
                select(*_columns(SampleRow, SampleView._fields))
                .join(CellRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id)
                .order_by(SampleRow.id)
            )
            return [
                SampleView(
                    **{
                        **r._mapping,
                        "platform_state": PlatformState.from_json(r.platform_state),
                        "host_cpu": HostCpuReading.from_json(r.host_cpu),
                    }
                )
                for r in s.execute(q)
            ]

    def metric_rows(self, run_id: str) -> list[MetricView]:
        """Every metric of the ok samples of a run, as named tuples (fast for 100,000s of
        rows: no ORM objects)."""
        with Session(self.engine) as s:
            q = (
                select(
                    SampleRow.cell_id,
                    SampleRow.repetition,
                    MetricRow.instance,
                    MetricRow.name,
                    MetricRow.value,
                    MetricRow.text,
                    MetricRow.unit,
                    MetricRow.higher_is_better,
                    MetricRow.headline,
                    MetricRow.composite,
                    MetricRow.direction,
                    MetricRow.resolution,
                )
                .join(SampleRow, MetricRow.sample_id == SampleRow.id)
                .join(CellRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id, SampleRow.status == "ok")
            )
            return [MetricView._make(r) for r in s.execute(q)]

    def profile_functions(self, run_id: str) -> list[FunctionView]:
        """The profiled functions of the ok samples of a run, as named tuples."""
        with Session(self.engine) as s:
            q = (
                select(
                    SampleRow.cell_id,
                    SampleRow.repetition,
                    ProfileFunctionRow.rank,
                    ProfileFunctionRow.samples,
                    ProfileFunctionRow.percent,
                    ProfileFunctionRow.symbol,
                    ProfileFunctionRow.dso,
                    ProfileRow.samples,
                )
                .join(ProfileRow, ProfileFunctionRow.profile_id == ProfileRow.id)
                .join(SampleRow, ProfileRow.sample_id == SampleRow.id)
                .join(CellRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id, SampleRow.status == "ok")
                .order_by(SampleRow.id, ProfileFunctionRow.rank)
            )
            return [FunctionView(*r) for r in s.execute(q)]

    def raw_outputs(self, run_id: str) -> list[RawView]:
        with Session(self.engine) as s:
            q = (
                select(
                    SampleRow.cell_id,
                    SampleRow.repetition,
                    *(getattr(RawOutputRow, f) for f in RawView._fields[2:]),
                )
                .join(SampleRow, RawOutputRow.sample_id == SampleRow.id)
                .join(CellRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id)
                .order_by(RawOutputRow.id)
            )
            return [RawView(*r) for r in s.execute(q)]

    def commands(self, run_id: str) -> list[tuple[str, list]]:
        """(tool, argv) of each raw output of a run, in order; reads only those two columns,
        since the raw outputs themselves can be megabytes per sample."""
        with Session(self.engine) as s:
            q = (
                select(RawOutputRow.tool, RawOutputRow.command)
                .join(SampleRow, RawOutputRow.sample_id == SampleRow.id)
                .join(CellRow, SampleRow.cell_id == CellRow.id)
                .where(CellRow.run_id == run_id)
                .order_by(RawOutputRow.id)
            )
            return [(tool, list(command or [])) for tool, command in s.execute(q)]

    def artifacts(self, run_id: str) -> dict[str, dict]:
        with Session(self.engine) as s:
            q = select(Artifact.name, Artifact.content).filter_by(run_id=run_id)
            return {name: content for name, content in s.execute(q)}

    def artifact_of_runs(self, name: str) -> dict[str, dict]:
        """Every run's artifact ``name``, by run id (runs without one left out)."""
        with Session(self.engine) as s:
            q = select(Artifact.run_id, Artifact.content).filter_by(name=name)
            return {run_id: content for run_id, content in s.execute(q)}

    def derived(self, name: str) -> dict[str, tuple[str, dict]]:
        """Every run's ``name`` kept by ``keep_derived``: {run id: (key, content)}."""
        with Session(self.engine) as s:
            q = select(Derived.run_id, Derived.key, Derived.content).filter_by(name=name)
            return {run_id: (key, content) for run_id, key, content in s.execute(q)}

    def fleet_runs(self, fleet: str) -> dict[str, RunRecord]:
        """The runs of a fleet run, by the host (its inventory name) that made each."""
        q = select(Artifact.content, *_RUN_COLUMNS).join(Run, Run.id == Artifact.run_id)
        with Session(self.engine) as s:
            rows = s.execute(q.where(Artifact.name == FLEET)).all()
        found = {}
        for row in rows:
            tag, *_ = row
            if tag.get("fleet") == fleet:
                found[tag["host"]] = RunRecord.from_row(row[1:])
        return found

    # merging -----------------------------------------------------------------------------

    def import_runs(self, source: Store) -> dict[str, str]:
        """Copy every run of another store into this one under its own run id, with its
        inventory, provenance and artifacts; returns ``{run id: added | replaced | present}``.

        A run already here is replaced when the source holds a different account of it (a
        host's resumed run has more samples, a later status), so importing a host's store again
        after a resumed fleet run brings the rest. Two different runs with one id (made on two
        hosts in the same second) are refused rather than mixed.
        """
        outcome: dict[str, str] = {}
        with source.engine.connect() as src, self.engine.begin() as dst:
            for run in src.execute(select(Run.__table__).order_by(Run.created_at)).mappings():
                same_id = select(Run.__table__).where(Run.id == run["id"])
                mine = dst.execute(same_id).mappings().first()
                if mine is not None:
                    if _utc(mine["created_at"]) != _utc(run["created_at"]):
                        raise HvbenchError(
                            f"run {run['id']} of {source.url} is not the run of that id in "
                            f"{self.url} (made at another time); import it into another store"
                        )
                    if mine["status"] == run["status"] and _samples(dst, run["id"]) == _samples(
                        src, run["id"]
                    ):
                        outcome[run["id"]] = "present"
                        continue
                    dst.execute(delete(Run).where(Run.id == run["id"]))
                dst.execute(insert(Run.__table__), [dict(run)])
                _copy_run(src, dst, run["id"])
                outcome[run["id"]] = "added" if mine is None else "replaced"
        return outcome


def _utc(moment: datetime) -> datetime:
    """SQLite gives back naive UTC, PostgreSQL aware: one form to compare them."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _samples(conn: Connection, run_id: str) -> int:
    cells = select(CellRow.id).where(CellRow.run_id == run_id)
    return conn.execute(
        select(func.count(SampleRow.id)).where(SampleRow.cell_id.in_(cells))
    ).scalar_one()


def _copy_run(src: Connection, dst: Connection, run_id: str) -> None:
    """Copy a run's rows below the run itself; new row ids, foreign keys mapped to them."""
    cells = select(CellRow.id).where(CellRow.run_id == run_id)
    samples = select(SampleRow.id).where(SampleRow.cell_id.in_(cells))
    _copy_rows(src, dst, Artifact.__table__, Artifact.run_id == run_id, {})
    cell_ids = _copy_rows(src, dst, CellRow.__table__, CellRow.run_id == run_id, {})
    sample_ids = _copy_rows(
        src, dst, SampleRow.__table__, SampleRow.cell_id.in_(cells), {"cell_id": cell_ids}
    )
    for table in (MetricRow.__table__, RawOutputRow.__table__):
        _copy_rows(src, dst, table, table.c.sample_id.in_(samples), {"sample_id": sample_ids})


def _copy_rows(
    src: Connection,
    dst: Connection,
    table: Table,
    where: ColumnElement[bool],
    remap: dict[str, dict[int, int]],
) -> dict[int, int]:
    """Insert the selected rows of ``table`` into ``dst``; returns {old id: new id}."""
    rows = [
        dict(r) for r in src.execute(select(table).where(where).order_by(table.c.id)).mappings()
    ]
    if not rows:
        return {}
    old = [r.pop("id") for r in rows]
    for r in rows:
        for column, ids in remap.items():
            r[column] = ids[r[column]]
    stmt = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return dict(zip(old, dst.execute(stmt, rows).scalars(), strict=True))
