"""The runner: order the cells, repeat them, persist each sample at once, resume.

Order is interleaved: repetition 1 of every platform, then repetition 2 of every platform, so
that drift of a noisy host spreads over all platforms instead of biasing one. Instances of a
platform are started once per (repetition, platform, instance count) and every workload of the
study runs in them before they are stopped.

An ascent (consolidation's ``sets: auto``) is planned as every other count, 1 to ``max_sets``
sets, its cells repeated once per climb; the runner drives it (``hvbench.ascent``): it measures
only the steps the ascent says a climb still climbs, and tells it each sample.
"""

from __future__ import annotations

import contextlib
import functools
import math
import secrets
import signal
import subprocess
import sys
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
from types import FrameType
from typing import Literal, NoReturn, TypedDict, Unpack

from hvbench import __version__, plan
from hvbench.analysis.run import headline_singles
from hvbench.analysis.stats import needs_more
from hvbench.ascent import Ascents
from hvbench.drivers import driver_class
from hvbench.drivers.base import Driver, Instance, Needs, PlatformSettings
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.errors import HvbenchError, InstanceError, StartFailed, StudyError
from hvbench.host import inventory
from hvbench.host.monitor import LOCAL, CpuMonitor, HostCpuSource
from hvbench.host.network import RunNetwork
from hvbench.host.profile import HostProfiler, Window
from hvbench.host.resources import Ledger
from hvbench.plan import START_TIMEOUT_S, start_allowance
from hvbench.store import (
    ADAPTIVE,
    LABELS,
    TIME,
    AdaptiveRecord,
    CellRecord,
    HostCpuReading,
    MetricRecord,
    PlatformState,
    ProfileRecord,
    RawRecord,
    RunRecord,
    SampleRecord,
    Store,
    TimeRecord,
    image_artifact,
)
from hvbench.study import Cell, Study, parse_study
from hvbench.workloads.base import (
    ClientPace,
    Context,
    GroupStart,
    Outcome,
    W,
    Workload,
)

CALIBRATION = "calibration"
"""The artifact that holds the settings calibration chose, by workload index."""
WORK_ROOT = Path("/var/tmp/hvbench")
"""Disk images and logs of a run; on disk, not tmpfs, so disk workloads measure a disk."""
GIT_TIMEOUT_S = 5.0
"""How long the commit lookup may take before the run goes on without it."""


@dataclass
class Progress:
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


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


@dataclass
class GitCommit:
    """The checkout's commit, for the run's provenance; None (unknown) where git cannot tell
    within GIT_TIMEOUT_S: provenance never stops a run (in the nested labs' slow L1, git once
    took longer)."""

    commit: str | None
    unsaid: str | None = None
    """Why the commit is unknown, until the first run of the process has said it."""


@functools.cache
def _git_commit() -> GitCommit:
    """The commit, looked up once a process."""
    argv = ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        why = f"git rev-parse took over {GIT_TIMEOUT_S:g} s"
    except OSError as e:
        why = f"git: {e.strerror}"
    else:
        if out.returncode == 0 and out.stdout.strip():
            return GitCommit(out.stdout.strip())
        why = (out.stderr.strip().splitlines() or [f"git exit status {out.returncode}"])[0]
    return GitCommit(None, why)


def _to_stderr(line: str) -> None:
    """Where a runner's messages go unless its caller says otherwise."""
    print(line, file=sys.stderr, flush=True)


def needs_of(study: Study) -> Needs:
    workloads = [study.workload(i) for i in range(len(study.workloads))]
    return Needs(
        tools=frozenset(t for w in workloads for t in w.tools()),
        data_disk=any(w.needs_data_disk for w in workloads),
        userland=any(w.needs_userland for w in workloads),
        packages=frozenset(p for w in workloads for p in w.packages()),
    )


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a run as Ctrl-C does: through ``finally`` blocks that clean up."""

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        """A step timed before the runner was made (``doctor``: the host examined to choose the
        default study's platforms)."""
        self.record.steps[name] = self.record.steps.get(name, 0.0) + seconds

    def now(self) -> TimeRecord:
        """The record with its total up to this moment."""
        self.record.total_s = self._earlier_s + time.monotonic() - self._started
        return self.record


class RunnerOptions(TypedDict, total=False):
    """What ``Runner.create`` and ``Runner.resume`` pass on to the runner as they make it."""

    on_progress: Callable[[Progress], None]
    on_message: Callable[[str], None]
    started: float | None


@dataclass
class RunScope:
    """What one ``Runner.run`` holds on the host: claimed when it starts, let go when it ends
    (Ctrl-C included), so that nothing of a run outlives it."""

    needs: Needs
    """What the study's workloads need of every platform's instances."""
    ledger: Ledger
    workdir: Path
    network: RunNetwork
    profiler: HostProfiler
    drivers: dict[str, Driver] = field(default_factory=dict)
    """One driver per platform, made at its first group (``driver``), closed at the end."""

    @classmethod
    def claim(
        cls, run_id: str, needs: Needs, profile: bool, notice: Callable[[str], None]
    ) -> RunScope:
        """The run's ledger, work directory, network and profiler (saying its failure through
        ``notice``)."""
        ledger = Ledger(run_id)
        ledger.claim()
        workdir = WORK_ROOT / run_id
        ledger.add("path", str(workdir))
        workdir.mkdir(parents=True, exist_ok=True)
        network = RunNetwork(run_id, ledger)
        profiler = HostProfiler(ledger, workdir, notice, enabled=profile)
        return cls(needs, ledger, workdir, network, profiler)

    def driver(self, platform: str, settings: PlatformSettings) -> Driver:
        """The platform's driver for the whole run: made at its first group."""
        if platform not in self.drivers:
            (self.workdir / platform).mkdir(exist_ok=True)
            self.drivers[platform] = driver_class(settings)(
                platform, settings, self.needs, self.ledger, self.network, self.workdir / platform
            )
        return self.drivers[platform]

    def close(self) -> None:
        """Close the drivers, then let go of everything the run claimed."""
        try:
            while self.drivers:
                self.drivers.popitem()[1].close()
        finally:
            self.ledger.release_all()


class Runner:
    """Runs one study into one run of the store."""

    def __init__(
        self,
        study: Study,
        store: Store,
        run_id: str,
        quick: bool,
        on_progress: Callable[[Progress], None] = lambda p: None,
        on_message: Callable[[str], None] = _to_stderr,
        started: float | None = None,
    ) -> None:
        """``on_message``: where every line the runner has to say goes, one line a call (the
        CLI shows it above its progress bar). ``started``: when ``hvbench run`` started
        (``time.monotonic()``), where the run's time is counted from (default: now)."""
        self.study = study
        self.store = store
        self.run_id = run_id
        self.quick = quick
        self.on_progress = on_progress
        self.on_message = on_message
        self.failed_samples = 0
        self._ascents = Ascents(study, store, run_id)
        earlier = TimeRecord.from_json(store.artifacts(run_id).get(TIME))
        self.stopwatch = Stopwatch(earlier, time.monotonic() if started is None else started)

    # entry points ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        study: Study,
        store: Store,
        quick: bool,
        labels: dict[str, str] | None = None,
        **kw: Unpack[RunnerOptions],
    ) -> Runner:
        """A new run: stored with its study and the host inventory before anything starts; a
        study whose instances cannot fit this host is refused before that. A ``--quick`` run
        measures the study's quick form (``Study.quickened``). ``labels`` (``--label``: the
        build under test, say) are kept in its options for ``history`` to order and explain by."""
        study = study.quickened() if quick else study
        misfits = plan.misfits(study, plan.this_host())
        if misfits:
            raise StudyError(f"{study.source}: cannot run on this host: {'; '.join(misfits)}")
        run_id = new_run_id()
        git = _git_commit()
        store.create_run(
            RunRecord(
                id=run_id,
                study_name=study.name,
                study_text=study.text,
                study_source=study.source,
                status="running",
                created_at=datetime.now(UTC),
                hvbench_version=__version__,
                git_commit=git.commit,
                options={"quick": quick, **({LABELS: labels} if labels else {})},
                inventory=inventory.collect(),
            )
        )
        runner = cls(study, store, run_id, quick, **kw)
        if git.unsaid is not None:  # once a process
            runner.on_message(f"hvbench: the run's git commit is unknown ({git.unsaid})")
            git.unsaid = None
        return runner

    @classmethod
    def resume(cls, store: Store, run_id: str, **kw: Unpack[RunnerOptions]) -> Runner:
        """Continue a run: its study and options come from the store, not from a file.
        Failed samples are forgotten so that they are measured again."""
        run = store.run(run_id)
        study = parse_study(run.study_text, f"{run.study_source} (stored with run {run.id})")
        quick = bool(run.options.get("quick"))
        store.delete_failed(run.id)
        Ascents.resumed(store, run.id)
        store.set_run_status(run.id, "running")
        return cls(study.quickened() if quick else study, store, run.id, quick, **kw)

    def run(self) -> str:
        """Measure every sample not yet in the store; return the run's final status."""
        notice = self._profile_notice
        scope = RunScope.claim(self.run_id, needs_of(self.study), self.study.profile, notice)
        status = "interrupted"
        try:
            with _sigterm_as_interrupt():
                self._run_all(scope)
            status = "failed" if self.failed_samples else "finished"
        finally:
            try:
                scope.close()
            finally:
                self.keep_time()
                self.store.set_run_status(self.run_id, status, finished=status != "interrupted")
        return status

    def keep_time(self) -> TimeRecord:
        """Store where the run's time went so far (the artifact ``time``) and return it."""
        record = self.stopwatch.now()
        self.store.add_artifact(self.run_id, TIME, record.to_json(), replace=True)
        return record

    # the plan --------------------------------------------------------------------------

    def _groups(self, reps: range, wanted: set[str] | None = None) -> list[Group]:
        """The groups with cells still to measure, in interleaved order; ``wanted`` restricts
        to those cell keys. An ascent's cells are measured once per climb instead of in
        ``reps``."""
        done = self.store.done(self.run_id)
        cells = [c for c in self.study.cells() if wanted is None or c.key in wanted]
        climbs = {c.key: self._ascents.repetitions(c) for c in cells}
        last = max([reps.stop - 1, *(k for k in climbs.values() if k is not None)])
        groups = []
        for rep in range(reps.start, last + 1):
            for platform in self.study.platforms:
                for count in self.study.counts(platform):
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

    def _run_all(self, scope: RunScope) -> None:
        # --quick is a smoke run: shortened workloads, one repetition, no adaptive ones
        self._calibrate(scope)
        reps = 1 if self.quick else self.study.repetitions
        self._run_groups(self._groups(range(1, reps + 1)), scope)
        adaptive = self.study.adaptive
        if adaptive is None or self.quick:
            return
        t0 = time.monotonic()
        budget = adaptive.budget_minutes * 60
        stopped_by: Literal["max_repetitions", "budget_minutes"] = "max_repetitions"
        for rep in range(self.study.repetitions + 1, adaptive.max_repetitions + 1):
            wanted = self._imprecise_cells(adaptive.ci_target, adaptive.max_repetitions)
            if not wanted:
                break
            groups = self._groups(range(rep, rep + 1), wanted)
            if time.monotonic() - t0 > budget or not self._run_groups(
                groups, scope, deadline=t0 + budget
            ):
                stopped_by = "budget_minutes"
                break
        short = self._imprecise_cells(adaptive.ci_target, math.inf)
        record = AdaptiveRecord(**adaptive.model_dump(), stopped_by=stopped_by, short=sorted(short))
        self.store.add_artifact(self.run_id, ADAPTIVE, record.to_json(), replace=True)

    def _calibrate(self, scope: RunScope) -> None:
        """Size the work of the workloads whose settings ask for it (``scale: auto``) natively
        on this host, once per run, before any sample: kept as the artifact ``calibration``
        (and with each cell's workload settings), so that every platform, and the run when
        resumed, does the same work. A ``--quick`` run keeps its fixed smoke-run work."""
        stored: dict[str, dict] = self.store.artifacts(self.run_id).get(CALIBRATION) or {}
        todo = [
            i
            for i, settings in enumerate(self.study.workloads)
            if settings.calibrates() and str(i) not in stored and not self.quick
        ]
        if todo:
            with self.stopwatch.step("calibration"):
                needs = needs_of(
                    replace(self.study, workloads=[self.study.workloads[i] for i in todo])
                )
                driver = NativeDriver(
                    CALIBRATION, self._native_platform(), needs, scope.ledger, scope.network,
                    scope.workdir / CALIBRATION,
                )  # fmt: skip
                (scope.workdir / CALIBRATION).mkdir(exist_ok=True)
                fix = "pin the work instead (cpu apps: a scale, or work per program; dd: a size)"
                try:
                    instances = driver.start(1, time.monotonic() + START_TIMEOUT_S)
                except (InstanceError, HvbenchError) as e:
                    raise HvbenchError(
                        f"calibration: no native instance ({_one_line(e)}); {fix}"
                    ) from e
                try:
                    for i in todo:
                        workload = self.study.workload(i)
                        label = workload.settings.label()
                        self.on_message(f"hvbench: sizing the jobs of {label} natively")
                        try:
                            settings = calibrate(workload, instances[0], scope.network)
                        except (InstanceError, ValueError) as e:
                            raise HvbenchError(
                                f"sizing {label} natively: {_one_line(e)}; {fix}"
                            ) from e
                        stored[str(i)] = settings.model_dump(mode="json")
                        self.store.add_artifact(self.run_id, CALIBRATION, stored, replace=True)
                finally:
                    driver.stop(instances)
                    driver.close()
        self.study = self.study.calibrated({int(i): data for i, data in stored.items()})

    def _native_platform(self) -> NativeSettings:
        """Where calibration sizes the jobs: the study's native platform (the baseline first),
        whose data disk (a block device, say) is the one dd's bytes are sized on; else the
        host with native's defaults."""
        natives = {
            name: settings
            for name, settings in self.study.platforms.items()
            if isinstance(settings, NativeSettings)
        }
        first = next(iter(natives.values()), NativeSettings(driver="native"))
        return natives.get(self.study.baseline or "", first)

    def _imprecise_cells(self, ci_target: float, max_count: float) -> set[str]:
        """Keys of cells with fewer than ``ADAPTIVE_MIN_N`` repetitions or a headline metric
        whose CI (over repetitions, instances averaged) is still wider than the target, among
        those with fewer than ``max_count``. Side figures (a retransmits count) do not keep a
        cell going."""
        cells = {c.id: c for c in self.store.cells(self.run_id)}
        singles = headline_singles(self.store.metric_rows(self.run_id), cells)
        return {
            cells[cell_id].key
            for (cell_id, _), single in singles.items()
            if needs_more(list(single), ci_target, max_count=max_count)
        }

    def _run_groups(
        self,
        groups: list[Group],
        scope: RunScope,
        deadline: float = float("inf"),
    ) -> bool:
        """Measure the groups in order; False if one would not fit the ``deadline``."""
        total = sum(len(g.cells) for g in groups)
        kvm = plan.this_host().kvm
        estimates = {
            c.key: plan.sample_seconds(self.study, c, self.quick, kvm)
            for g in groups
            for c in g.cells
        }
        remaining = sum(estimates[c.key] for g in groups for c in g.cells)
        done = 0
        for whole in groups:
            climbing = [c for c in whole.cells if self._ascents.reaches(c, whole.repetition)]
            group = replace(whole, cells=climbing)
            skipped = [estimates[c.key] for c in whole.cells if c not in group.cells]
            total, remaining = total - len(skipped), remaining - sum(skipped)
            if not group.cells:
                continue
            if time.monotonic() + sum(estimates[c.key] for c in group.cells) > deadline:
                return False  # the next group would not fit the time budget
            driver = scope.driver(group.platform, self.study.platforms[group.platform])
            for cell, record, missed, pace in self._group(scope, driver, group):
                self.store.add_sample(self._cell_id(cell, driver), record)
                self._ascents.climbed(cell, record, missed, pace)
                if record.status != "ok":
                    self.failed_samples += 1
                done += 1
                remaining -= estimates[cell.key]
                self.on_progress(
                    Progress(
                        cell, group.repetition, done, total, record.status, record.error, remaining
                    )
                )
        return True

    def _cell_id(self, cell: Cell, driver: Driver) -> int:
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

    def _group(
        self, scope: RunScope, driver: Driver, group: Group
    ) -> Iterator[tuple[Cell, SampleRecord, str | None, ClientPace | None]]:
        """Start the instances once, sample every cell in them, stop them; each sample with
        why it did not hold and its clients' pace (``_sample``), its instances still up. A
        cell whose sample killed an instance is followed by a fresh start; if starting fails,
        the group's remaining cells fail with that error rather than waiting for a start
        each."""
        rep, cells = group.repetition, group.cells
        instances: list[Instance] | None = None
        retried: str | None = None
        try:
            for i, cell in enumerate(cells):
                if instances is None:
                    started, t0 = datetime.now(UTC), time.monotonic()
                    try:
                        instances, start, retried = self._start(driver, group.count)
                    except (InstanceError, HvbenchError) as e:
                        for rest in cells[i:]:
                            error = f"start: {_one_line(e)}"
                            yield rest, self._failed(rep, started, t0, error), error, None
                        return
                with (
                    self.stopwatch.step(cell.workload, workload=True),
                    scope.profiler.window() as profile,
                ):
                    record, missed, pace = self._sample(
                        self.study.workload(cell.workload_index),
                        driver,
                        instances,
                        scope.network,
                        rep,
                        start,
                        profile,
                    )
                if retried:
                    record.platform_state = replace(
                        record.platform_state, start_retried_after=retried
                    )
                    retried = None
                yield cell, record, missed, pace
                if not all(inst.alive() for inst in instances):
                    driver.stop(instances)
                    instances = None
        finally:
            if instances is not None:
                driver.stop(instances)

    def _start(self, driver: Driver, count: int) -> tuple[list[Instance], GroupStart, str | None]:
        """Start the instances, timed; a guest that did not come up is no measurement, so a
        failed start is tried once more, the first error is kept with the next sample and the
        instances that failed in it are counted in the GroupStart."""
        try:
            return (*self._timed_start(driver, count, failed=0), None)
        except InstanceError as e:
            first = _one_line(e)
            failed = e.failed if isinstance(e, StartFailed) else count
        try:
            return (*self._timed_start(driver, count, failed), first)
        except (InstanceError, HvbenchError) as e:
            raise InstanceError(f"{first}; tried again: {_one_line(e)}") from e

    def _timed_start(
        self, driver: Driver, count: int, failed: int
    ) -> tuple[list[Instance], GroupStart]:
        """Start the instances; the driver opened first (its images built or found, once a
        run), so that the run's time tells image builds from boots."""
        deadline = time.monotonic() + start_allowance(driver.settings)
        with self.stopwatch.step("images"):
            driver.open()
        with self.stopwatch.step("boots"):
            instances = driver.start(count, deadline)
        seconds = driver.parallel_start_s
        assert seconds is not None, f"{driver.name}: start did not go through start_parallel"
        return instances, GroupStart(seconds, {i.name: dict(i.boot) for i in instances}, failed)

    @staticmethod
    def _failed(rep: int, started: datetime, t0: float, error: str) -> SampleRecord:
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

    def _profile_notice(self, line: str) -> None:
        """Say why the run goes on without profiles and keep the line with the run, for its
        report."""
        self.on_message(line)
        self.store.add_artifact(self.run_id, "profile", {"notice": line}, replace=True)

    # one sample ------------------------------------------------------------------------

    def _sample(
        self,
        workload: Workload,
        driver: Driver,
        instances: list[Instance],
        network: RunNetwork,
        rep: int,
        start: GroupStart,
        profile: Window,
    ) -> tuple[SampleRecord, str | None, ClientPace | None]:
        """One sample through ``run_sample``, as its record, with why it did not hold (its
        error, or the load its workload says it missed; None: held) and its clients' pace."""
        source = driver.host_cpu_source()
        run = run_sample(workload, instances, network, self.quick, start, source, profile)
        record = _record(rep, run, instances, source.cores)
        return record, run.error or workload.missed(run.outcomes), workload.pace(run.outcomes)


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
                text = _one_line(e)
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


def _one_line(e: BaseException) -> str:
    text = str(e).strip().replace("\n", " | ") or type(e).__name__
    if not isinstance(e, (HvbenchError, InstanceError, ValueError)):
        where = traceback.extract_tb(e.__traceback__)[-1:]
        loc = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
        text = f"{type(e).__name__}: {text}{loc}"
    return text[:2000]
