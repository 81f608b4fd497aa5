"""The runner: order the cells, repeat them, persist each sample at once, resume.

Order is interleaved: repetition 1 of every platform, then repetition 2 of every platform, so
that drift of a noisy host spreads over all platforms instead of biasing one. Instances of a
platform are started once per (repetition, platform, instance count) and every workload of the
study runs in them before they are stopped.

An ascent (consolidation's ``sets: auto``) is planned as every other count, 1 to ``max_sets``
sets, its cells repeated once per climb; the runner drives it (``hvbench.ascent``): it measures
only the steps the ascent says a climb still climbs, and tells it each sample.

A run's session (``hvbench.session``) checks the study, claims the host's resources, sizes the
work and decides which repetitions to measure; the runner measures them.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from hvbench import plan
from hvbench.ascent import Ascents
from hvbench.drivers import driver_class
from hvbench.drivers.base import Driver, Instance, Needs, PlatformSettings
from hvbench.errors import HvbenchError, InstanceError, StartFailed
from hvbench.host.monitor import LOCAL, CpuMonitor, HostCpuSource
from hvbench.host.network import RunNetwork
from hvbench.host.profile import HostProfiler, Window
from hvbench.host.resources import Ledger
from hvbench.plan import start_allowance
from hvbench.store import (
    CellRecord,
    HostCpuReading,
    MetricRecord,
    PlatformState,
    ProfileRecord,
    RawRecord,
    SampleRecord,
    Store,
    TimeRecord,
    image_artifact,
)
from hvbench.study import Cell, Study
from hvbench.workloads.base import (
    ClientPace,
    Context,
    GroupStart,
    Outcome,
    W,
    Workload,
)

WORK_ROOT = Path(os.environ.get("HVBENCH_WORK_DIR", "/var/tmp/hvbench"))
"""Disk images and logs of a run; on disk, not tmpfs, so disk workloads measure a disk
(``HVBENCH_WORK_DIR``: a disk of one's choosing, the one under test)."""


@dataclass
class SampleProgress:
    """What the runner tells its caller after each sample (the CLI draws it)."""

    cell: Cell
    repetition: int
    done: int
    total: int
    status: str
    error: str | None
    eta_s: float


@dataclass
class Group:
    """Cells measured in the same started instances: one repetition of one platform at one
    instance count."""

    repetition: int
    platform: str
    count: int
    cells: list[Cell]


@dataclass
class GroupUp:
    """A group's instances, all ready: how they started (for the workloads, ``GroupStart``)."""

    instances: list[Instance]
    start: GroupStart
    retried: str | None = None
    """Why a first start failed, where this is the second: kept with the group's next sample."""


@dataclass
class CellSample:
    """One sample of a cell as the runner took it: its record, why it did not hold (its error,
    or the load its workload says it missed; None: held) and its clients' pace, for the cell's
    ascent (``Ascents.climbed``)."""

    cell: Cell
    record: SampleRecord
    missed: str | None
    pace: ClientPace | None


@dataclass(frozen=True)
class Measured:
    """What one ``Runner.measure`` did: how many of its samples failed, and whether every group
    fitted its deadline (False: it stopped before the first that would not)."""

    failed: int
    fitted: bool


@dataclass
class SampleRun:
    """What one sample of a workload gave, before it becomes a record."""

    started: datetime
    seconds: float
    outcomes: list[Outcome]
    """One per instance that finished, in the instances' order; all of them if ``error`` is None."""
    error: str | None
    """The first instance's failure, one line, named by the instance."""
    failure: BaseException | None
    """The exception behind ``error``, if an instance raised one."""
    host_cpu: HostCpuReading | None
    """The host CPU during the measured part (``CpuMonitor.stop``); None if it failed."""
    profile: ProfileRecord | None = None
    """The host's profile of the measured part, where the study asked for one."""


def needs_of(study: Study, platform: str | None = None) -> Needs:
    """What the study's workloads need of an instance: one guest for every platform (the tools,
    the userland, its packages), so that all boot the same; a data disk only where a workload
    that runs on ``platform`` writes one (the default study's qemu-emulated runs no disk
    workload, yet formatted a 3 GiB IDE disk at every boot)."""
    workloads = [study.workload(i) for i in range(len(study.workloads))]
    on = [
        w
        for w, settings in zip(workloads, study.workloads, strict=True)
        if platform is None or settings.runs_on(platform)
    ]
    return Needs(
        tools=frozenset(t for w in workloads for t in w.tools()),
        data_disk=any(w.needs_data_disk for w in on),
        userland=any(w.needs_userland for w in workloads),
        packages=frozenset(p for w in workloads for p in w.packages()),
    )


class Stopwatch:
    """Where the run's time goes (the artifact ``time``): each step's monotonic seconds, read
    before and after it, never inside a measured window, added to what the run's earlier
    sessions kept."""

    def __init__(self, earlier: TimeRecord, started: float) -> None:
        self.record = earlier
        self._started = started
        self._earlier_s = earlier.total_s

    @contextmanager
    def step(self, name: str, workload: bool = False) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            into = self.record.workloads if workload else self.record.steps
            into[name] = into.get(name, 0.0) + time.monotonic() - t0

    def add(self, name: str, seconds: float) -> None:
        """A step timed before the run's session was made (``doctor``: the host examined to
        choose the default study's platforms)."""
        self.record.steps[name] = self.record.steps.get(name, 0.0) + seconds

    def now(self) -> TimeRecord:
        """The record with its total up to this moment."""
        self.record.total_s = self._earlier_s + time.monotonic() - self._started
        return self.record


@dataclass
class RunScope:
    """What one run holds on the host: claimed when it starts, let go when it ends (Ctrl-C
    included), so that nothing of a run outlives it."""

    ledger: Ledger
    workdir: Path
    network: RunNetwork
    profiler: HostProfiler
    drivers: dict[str, Driver] = field(default_factory=dict)
    """One driver per platform, made at its first group (``driver``), closed at the end."""

    @classmethod
    def claim(cls, run_id: str, profile: bool, notice: Callable[[str], None]) -> RunScope:
        """The run's ledger, work directory, network and profiler (saying its failure through
        ``notice``); what was claimed let go again where claiming fails or is interrupted."""
        ledger = Ledger(run_id)
        try:
            ledger.claim()
            workdir = WORK_ROOT / run_id
            ledger.add("path", str(workdir))
            workdir.mkdir(parents=True, exist_ok=True)
            network = RunNetwork(run_id, ledger)
            profiler = HostProfiler(ledger, workdir, notice, enabled=profile)
        except BaseException:
            ledger.release_all()
            raise
        return cls(ledger, workdir, network, profiler)

    def driver(self, platform: str, settings: PlatformSettings, needs: Needs) -> Driver:
        """The platform's driver for the whole run, building what ``needs`` says its instances
        need: made at its first group."""
        if platform not in self.drivers:
            (self.workdir / platform).mkdir(exist_ok=True)
            self.drivers[platform] = driver_class(settings)(
                platform, settings, needs, self.ledger, self.network, self.workdir / platform
            )
        return self.drivers[platform]

    def close(self) -> None:
        """Close the drivers, then let go of everything the run claimed."""
        try:
            while self.drivers:
                self.drivers.popitem()[1].close()
        finally:
            self.ledger.release_all()


def plan_groups(
    study: Study,
    done: set[tuple[str, int]],
    ascents: Ascents,
    reps: range,
    wanted: set[str] | None = None,
) -> list[Group]:
    """The groups with cells still to measure (not ``done``: (cell key, repetition) stored), in
    interleaved order; ``wanted`` restricts to those cell keys. An ascent's cells are measured
    once per climb instead of in ``reps``."""
    cells = [c for c in study.cells() if wanted is None or c.key in wanted]
    climbs = {c.key: ascents.repetitions(c) for c in cells}
    last = max([reps.stop - 1, *(k for k in climbs.values() if k is not None)])
    groups = []
    for rep in range(reps.start, last + 1):
        for platform in study.platforms:
            for count in study.counts(platform):
                todo = [
                    c
                    for c in cells
                    if c.platform == platform
                    and c.instances == count
                    and (c.key, rep) not in done
                    and (rep in reps if (top := climbs[c.key]) is None else rep <= top)
                ]
                if todo:
                    groups.append(Group(rep, platform, count, todo))
    return groups


@dataclass(frozen=True)
class Runner:
    """Measures a run's cells into the store, in instances its drivers start on what the run
    holds on the host (``scope``). Its session makes it once the study's work is sized (the
    ``study`` calibrated), with everything it uses."""

    study: Study
    store: Store
    run_id: str
    quick: bool
    scope: RunScope
    stopwatch: Stopwatch
    ascents: Ascents
    on_progress: Callable[[SampleProgress], None]

    def measure(
        self, reps: range, wanted: set[str] | None = None, deadline: float = math.inf
    ) -> Measured:
        """Measure the groups with cells still to measure in ``reps`` (``plan_groups``), in
        order, each sample stored as it is taken; stop before a group that would not fit the
        ``deadline`` (a ``time.monotonic()`` value)."""
        done = self.store.done(self.run_id)
        groups = plan_groups(self.study, done, self.ascents, reps, wanted)
        total = sum(len(g.cells) for g in groups)
        kvm = plan.this_host().kvm
        estimates = {
            c.key: plan.sample_seconds(self.study, c, self.quick, kvm)
            for g in groups
            for c in g.cells
        }
        remaining = sum(estimates[c.key] for g in groups for c in g.cells)
        count = failed = 0
        for whole in groups:
            climbing = [c for c in whole.cells if self.ascents.reaches(c, whole.repetition)]
            group = replace(whole, cells=climbing)
            skipped = [estimates[c.key] for c in whole.cells if c not in group.cells]
            total, remaining = total - len(skipped), remaining - sum(skipped)
            if not group.cells:
                continue
            if time.monotonic() + sum(estimates[c.key] for c in group.cells) > deadline:
                return Measured(failed, fitted=False)
            settings = self.study.platforms[group.platform]
            driver = self.scope.driver(
                group.platform, settings, needs_of(self.study, group.platform)
            )
            for sample in self._start_sample_stop(driver, group):
                record = sample.record
                self.store.add_sample(self._store_cell(sample.cell, driver), record)
                self.ascents.climbed(sample.cell, record, sample.missed, sample.pace)
                failed += record.status != "ok"
                count += 1
                remaining -= estimates[sample.cell.key]
                self.on_progress(
                    SampleProgress(
                        sample.cell,
                        group.repetition,
                        count,
                        total,
                        record.status,
                        record.error,
                        remaining,
                    )
                )
        return Measured(failed, fitted=True)

    def _store_cell(self, cell: Cell, driver: Driver) -> int:
        """Store the cell's row, once a run (its platform as the driver describes it, its
        workload's settings, what ran), and return its id."""
        settings = self.study.workloads[cell.workload_index]
        return self.store.cell_id(
            self.run_id,
            CellRecord(
                key=cell.key,
                platform=cell.platform,
                driver=driver.name,
                workload=cell.workload,
                workload_name=settings.name,
                instances=cell.instances,
                platform_settings=self._manifests_apart(driver.describe()),
                workload_settings=settings.model_dump(mode="json"),
                ran=driver.what_ran(),
            ),
        )

    def _manifests_apart(self, described: dict) -> dict:
        """A guest image's manifest (its packages and every file's hash) is kept once per run,
        as the artifact ``image <key>``; the cells that booted it keep its key."""
        manifest = described.get("image")
        if isinstance(manifest, dict) and "key" in manifest:
            self.store.add_artifact(self.run_id, image_artifact(manifest["key"]), manifest)
            described = {**described, "image": {"key": manifest["key"]}}
        return described

    def _start_sample_stop(self, driver: Driver, group: Group) -> Iterator[CellSample]:
        """Start the group's instances once, sample every cell in them, stop them; each sample
        yielded with its instances still up. A cell whose sample killed an instance is followed
        by a fresh start; if starting fails, the group's remaining cells fail with that error
        rather than waiting for a start each."""
        rep, cells = group.repetition, group.cells
        up: GroupUp | None = None
        retried: str | None = None
        try:
            for i, cell in enumerate(cells):
                if up is None:
                    started, t0 = datetime.now(UTC), time.monotonic()
                    try:
                        up = self._start(driver, group.count)
                    except (InstanceError, HvbenchError) as e:
                        error = f"start: {one_line(e)}"
                        for rest in cells[i:]:
                            yield CellSample(rest, _failed(rep, started, t0, error), error, None)
                        return
                    retried = up.retried
                with (
                    self.stopwatch.step(cell.workload, workload=True),
                    self.scope.profiler.window() as profile,
                ):
                    sample = self._sample(cell, driver, up, rep, profile)
                if retried:
                    sample.record.platform_state = replace(
                        sample.record.platform_state, start_retried_after=retried
                    )
                    retried = None
                yield sample
                if not all(inst.alive() for inst in up.instances):
                    driver.stop(up.instances)
                    up = None
        finally:
            if up is not None:
                driver.stop(up.instances)

    def _start(self, driver: Driver, count: int) -> GroupUp:
        """Start the instances, timed; a guest that did not come up is no measurement, so a
        failed start is tried once more, the first error is kept with the next sample and the
        instances that failed in it are counted in the GroupStart."""
        try:
            return self._timed_start(driver, count, failed=0)
        except InstanceError as e:
            first = one_line(e)
            failed = e.failed if isinstance(e, StartFailed) else count
        try:
            return replace(self._timed_start(driver, count, failed), retried=first)
        except (InstanceError, HvbenchError) as e:
            raise InstanceError(f"{first}; tried again: {one_line(e)}") from e

    def _timed_start(self, driver: Driver, count: int, failed: int) -> GroupUp:
        """Start the instances; the driver opened first (its images built or found, once a
        run), so that the run's time tells image builds from boots."""
        deadline = time.monotonic() + start_allowance(driver.settings)
        with self.stopwatch.step("images"):
            driver.open()
        with self.stopwatch.step("boots"):
            started = driver.start(count, deadline)
        boots = {i.name: i.boot for i in started.instances}
        return GroupUp(started.instances, GroupStart(started.seconds, boots, failed))

    def _sample(
        self, cell: Cell, driver: Driver, up: GroupUp, rep: int, profile: Window
    ) -> CellSample:
        """One sample of the cell through ``run_sample``, as its record."""
        workload = self.study.workload(cell.workload_index)
        source = driver.host_cpu_source()
        run = run_sample(
            workload, up.instances, self.scope.network, self.quick, up.start, source, profile
        )
        record = _record(rep, run, up.instances, source.cores)
        missed = run.error or workload.missed(run.outcomes)
        return CellSample(cell, record, missed, workload.pace(run.outcomes))


def _failed(rep: int, started: datetime, t0: float, error: str) -> SampleRecord:
    """The record of a sample that could not be taken: its instances did not start."""
    return SampleRecord(
        repetition=rep,
        status="failed",
        error=error,
        started_at=started,
        seconds=time.monotonic() - t0,
        platform_state=PlatformState(),
        host_cpu=None,
        metrics=[],
        raw=[],
    )


def calibrate(workload: Workload[W], instance: Instance, network: RunNetwork) -> W:
    """The workload's settings with its work sized on a native ``instance``: prepare,
    calibrate, cleanup (the runner's path, which the workload tests call too)."""
    ctx = Context(network=network, quick=False, instance_count=1)
    workload.prepare(instance, ctx)
    try:
        return workload.calibrate(instance, ctx)
    finally:
        workload.cleanup(instance, ctx)


def run_sample(
    workload: Workload,
    instances: list[Instance],
    network: RunNetwork,
    quick: bool,
    start: GroupStart | None = None,
    source: HostCpuSource = LOCAL,
    profile: Window | None = None,
) -> SampleRun:
    """prepare on every instance, a barrier, measure on all at once, cleanup: one sample, as
    the runner takes it (and the workload tests, which call this rather than a copy of it)."""
    started = datetime.now(UTC)
    t0 = time.monotonic()
    monitor = CpuMonitor(
        [i.host_pids() for i in instances],
        [i.accounted_cpu_seconds for i in instances],
        source,
        clients=network.clients_cpu,
    )
    timeout = workload.timeout(quick)

    def window_opens() -> None:
        if profile is not None:
            profile.start()
        monitor.start()

    barrier = threading.Barrier(len(instances), action=window_opens, timeout=timeout)
    measured = threading.Barrier(len(instances), timeout=timeout)
    """Cleanup waits for every instance's measure: a server one instance runs may serve
    another's client to the end (consolidation's app queries its set's db)."""
    ctx = Context(
        network=network,
        quick=quick,
        instance_count=len(instances),
        barrier=barrier.wait,
        start=start,
    )

    def one(inst: Instance) -> Outcome:
        try:
            workload.prepare(inst, ctx)
            return workload.measure(inst, ctx)
        except BaseException:
            barrier.abort()  # the others must not wait for an instance that failed
            raise
        finally:
            with contextlib.suppress(threading.BrokenBarrierError):
                measured.wait()
            workload.cleanup(inst, ctx)

    pool = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix="instance")
    futures = [pool.submit(one, inst) for inst in instances]
    outcomes: list[Outcome] = []
    error = None
    failure: BaseException | None = None
    try:
        for inst, fut in zip(instances, futures, strict=True):
            left = max(1.0, timeout - (time.monotonic() - t0))
            try:
                outcomes.append(fut.result(timeout=left))
            except FutureTimeout:
                error = error or f"{inst.name}: no result after {timeout:.0f} s"
            except threading.BrokenBarrierError:
                continue  # another instance failed first; its error is the one reported
            except Exception as e:  # a failed cell is recorded, the run goes on
                text = one_line(e)
                prefix = "" if text.startswith(f"{inst.name}: ") else f"{inst.name}: "
                if error is None:
                    error, failure = prefix + text, e
    finally:
        # never wait here for a hung instance: stopping the group ends its commands
        pool.shutdown(wait=False, cancel_futures=True)
    if error is None and len(outcomes) != len(instances):
        error = "an instance did not reach the barrier"
    host_cpu = monitor.stop() if error is None else None
    functions = profile.stop() if profile is not None and error is None else None
    return SampleRun(started, time.monotonic() - t0, outcomes, error, failure, host_cpu, functions)


def _record(rep: int, run: SampleRun, instances: list[Instance], cores: int) -> SampleRecord:
    """The store's record of a sample: its metrics and raw outputs numbered by instance, and
    the platform's state around it (overcommit of the ``cores`` of the host the instances run
    on, what backs each data disk: its provenance)."""
    vcpus = sum(i.vcpus for i in instances)
    state = PlatformState(
        instances=[i.name for i in instances],
        vcpus_total=vcpus,
        host_cores=cores,
        overcommit=vcpus > cores,  # the one place it is decided; analysis reads it
        data_disks={i.name: i.data_disk.description for i in instances if i.data_disk},
    )
    ok = run.error is None
    return SampleRecord(
        repetition=rep,
        status="ok" if ok else "failed",
        error=run.error,
        started_at=run.started,
        seconds=run.seconds,
        platform_state=state,
        host_cpu=run.host_cpu,
        metrics=[
            MetricRecord(idx, **asdict(m))  # the workload's Metric, field by field
            for idx, o in enumerate(run.outcomes if ok else [])
            for m in o.metrics
        ],
        raw=[
            RawRecord(idx, r.tool, list(r.command), r.content)
            for idx, o in enumerate(run.outcomes if ok else [])
            for r in o.raw
        ],
        profile=run.profile,
    )


def one_line(e: BaseException) -> str:
    """An error as one line for a sample's record or a message: where it is not one of ours, its
    type and the line that raised it."""
    text = str(e).strip().replace("\n", " | ") or type(e).__name__
    if not isinstance(e, (HvbenchError, InstanceError, ValueError)):
        where = traceback.extract_tb(e.__traceback__)[-1:]
        loc = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
        text = f"{type(e).__name__}: {text}{loc}"
    return text[:2000]
