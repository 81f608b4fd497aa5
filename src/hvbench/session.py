"""A run's session: one object from the checks before a run to what is kept after it.

``RunSession.preflight`` checks a new run's study against this host, says what the user should
know before anything starts, and stores the run (or reopens a stored one to resume it); ``run``
claims the host's resources for the run, sizes its work (calibration) and has the runner measure
every repetition, adaptive ones included; ``finish`` hands the measured run to what the caller
makes of it (the CLI: the analysis and the report), timed, and keeps where its time went. The
run-level artifacts are written here, through ``_keep``; the CLI keeps its arguments and its
progress display.

The measuring reads nothing of the reading side: whether a cell needs more repetitions is the
analysis's judgement (``PrecisionJudge``), which the CLI gives the session as it makes it.
"""

from __future__ import annotations

import functools
import math
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Generic, Literal, NoReturn, Protocol, TypedDict, TypeVar, Unpack

from hvbench import __version__, doctor, plan
from hvbench.ascent import Ascents
from hvbench.drivers.native import NativeDriver, NativeSettings
from hvbench.errors import HvbenchError, InstanceError, StudyError
from hvbench.host import inventory
from hvbench.host.hold import Holder, HostHold
from hvbench.plan import START_TIMEOUT_S
from hvbench.runner import (
    Runner,
    RunScope,
    SampleProgress,
    Stopwatch,
    calibrate,
    needs_of,
    one_line,
)
from hvbench.store import (
    ADAPTIVE,
    FLEET,
    LABELS,
    TIME,
    AdaptiveRecord,
    RunRecord,
    Store,
    TimeRecord,
)
from hvbench.study import Adaptive, Study, parse_study

CALIBRATION = "calibration"
"""The artifact that holds the settings calibration chose, by workload index."""
GIT_TIMEOUT_S = 5.0
"""How long the commit lookup may take before the run goes on without it."""
QUICK_NOTE = (
    "--quick is a smoke run: every job shortened (a cpu program lasts a fraction of a second "
    "natively), one repetition; it shows that everything runs, its figures are not measurements"
)

Status = Literal["finished", "failed", "interrupted"]
"""How a run ended: every sample ok, some failed, or stopped (Ctrl-C, SIGTERM, an error)."""
R = TypeVar("R")


@dataclass(frozen=True)
class FleetPart:
    """This host's part of a fleet run (``hvbench fleet run``), kept with the run."""

    fleet: str
    host: str
    """The host's name in the fleet (its Ansible inventory name)."""


@dataclass(frozen=True)
class NewRun:
    """A run of a study not yet stored: what ``hvbench run [STUDY]`` asks for."""

    study: Study
    quick: bool = False
    """A smoke run: the study's quick form (``Study.quickened``), one repetition."""
    labels: dict[str, str] | None = None
    """Kept in the run's options (``--label``: the build under test) for ``history``."""
    fleet: FleetPart | None = None
    skip_unavailable: bool = False
    """Leave out, saying so, the platforms this host cannot run, rather than refuse the run
    (the default study's way: it names every platform hvbench has)."""


@dataclass(frozen=True)
class Resume:
    """A stored run to continue (``hvbench run --resume``): its study and options are stored."""

    run_id: str


class PrecisionJudge(Protocol):
    """The keys of a run's cells whose headline figures are not yet precise enough: fewer
    repetitions than a judgement needs, or an interval wider than ``ci_target``, among those
    with fewer than ``max_count`` repetitions (the analysis's statistics, which the CLI gives)."""

    def __call__(self, store: Store, run_id: str, ci_target: float, max_count: float) -> set[str]:
        """The cells to measure once more."""
        ...


@dataclass(frozen=True)
class AdaptivePlan:
    """A run's adaptive repetitions: the study's bounds, and who judges a cell's precision."""

    settings: Adaptive
    judge: PrecisionJudge


class SessionOptions(TypedDict, total=False):
    """What the caller gives a session as it is made."""

    on_progress: Callable[[SampleProgress], None]
    """Told after each sample (the CLI draws it)."""
    on_message: Callable[[str], None]
    """Where every line the run has to say goes, one line a call (the CLI shows it above its
    progress bar); stderr by default."""
    judge: PrecisionJudge
    """Needed by a study with adaptive repetitions."""
    started: float | None
    """When ``hvbench run`` started (``time.monotonic()``), where the run's time is counted
    from (default: now)."""
    wait: bool
    """Where another run measures on this host: wait for it to end (``--wait``) rather than
    refuse (``host.hold``)."""


@dataclass(frozen=True)
class RunResult:
    """How ``RunSession.run`` ended."""

    status: Status
    failed_samples: int


@dataclass(frozen=True)
class RunEnd(Generic[R]):
    """A run's end (``RunSession.finish``): how it ended, where its time went, and what the
    caller made of it (None where it made nothing)."""

    status: Status
    failed_samples: int
    time: TimeRecord
    made: R | None


@dataclass
class GitCommit:
    """The checkout's commit, for the run's provenance; None (unknown) where git cannot tell
    within GIT_TIMEOUT_S: provenance never stops a run (in the nested labs' slow L1, git once
    took longer)."""

    commit: str | None
    unsaid: str | None = None
    """Why the commit is unknown, until the first run of the process has said it."""


class RunSession:
    """One run of a study into one run of the store: made by ``preflight``, measured by
    ``run``, ended by ``finish``."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        study: Study,
        quick: bool,
        adaptive: AdaptivePlan | None,
        options: SessionOptions,
        hold: HostHold,
        doctor_s: float = 0.0,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self._hold = hold
        """The run's hold on the host, from preflight to the end of ``run``."""
        self.study = study
        """The study as the run measures it (its quick form for a ``--quick`` run), before
        calibration sizes its work (``run``)."""
        self.quick = quick
        self.on_progress = options.get("on_progress", _ignore)
        self.on_message = options.get("on_message", _to_stderr)
        self._adaptive = adaptive
        self._ascents = Ascents(study, store, run_id)
        started = options.get("started")
        earlier = TimeRecord.from_json(store.artifacts(run_id).get(TIME))
        self.stopwatch = Stopwatch(earlier, time.monotonic() if started is None else started)
        if doctor_s:
            self.stopwatch.add("doctor", doctor_s)

    # before --------------------------------------------------------------------------------

    @classmethod
    def preflight(
        cls, store: Store, start: NewRun | Resume, **options: Unpack[SessionOptions]
    ) -> RunSession:
        """Every check before a run, then its session. A new run: refused before anything is
        stored where this host lacks the Debian packages its workloads need or its groups of
        instances cannot fit here, its warnings said, then stored with its study and the host's
        inventory. A resumed run: its stored study read again, its failed samples forgotten so
        that they are measured again."""
        if isinstance(start, Resume):
            return cls._reopened(store, start.run_id, options)
        return cls._created(store, start, options)

    @classmethod
    def _created(cls, store: Store, new: NewRun, options: SessionOptions) -> RunSession:
        say = options.get("on_message", _to_stderr)
        t0 = time.monotonic()
        study = _runnable(new.study, new.skip_unavailable, say)
        examined_s = time.monotonic() - t0
        if lacking := plan.missing_packages(study):
            raise HvbenchError(f"{study.source}: cannot run on this host: {'; '.join(lacking)}")
        if new.quick:
            say(f"hvbench: {QUICK_NOTE}")
        for line in study.ignored_counts() + ([] if new.quick else study.short_jobs(quick=False)):
            say(f"hvbench: warning: {line}")
        study = study.quickened() if new.quick else study
        if misfits := plan.misfits(study, plan.this_host()):
            raise StudyError(f"{study.source}: cannot run on this host: {'; '.join(misfits)}")
        adaptive = _adaptive_plan(study, new.quick, options)
        run_id = new_run_id()
        git = _git_commit()
        hold = _hold(run_id, study.name, options)
        with hold.released_on_error():
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
                    options={"quick": new.quick, **({LABELS: new.labels} if new.labels else {})},
                    inventory=inventory.collect(),
                )
            )
        session = cls(store, run_id, study, new.quick, adaptive, options, hold, examined_s)
        if git.unsaid is not None:  # once a process
            say(f"hvbench: the run's git commit is unknown ({git.unsaid})")
            git.unsaid = None
        if new.fleet is not None:
            session._keep(FLEET, {"fleet": new.fleet.fleet, "host": new.fleet.host})
        return session

    @classmethod
    def _reopened(cls, store: Store, run_id: str, options: SessionOptions) -> RunSession:
        run = store.run(run_id)
        study = parse_study(run.study_text, f"{run.study_source} (stored with run {run.id})")
        quick = bool(run.options.get("quick"))
        adaptive = _adaptive_plan(study, quick, options)
        hold = _hold(run.id, study.name, options)
        with hold.released_on_error():
            store.delete_failed(run.id)
            Ascents.resumed(store, run.id)
            store.set_run_status(run.id, "running")
        runs = study.quickened() if quick else study
        return cls(store, run.id, runs, quick, adaptive, options, hold)

    # during --------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Measure every sample not yet in the store, on what the run claims of the host and
        lets go of at its end (Ctrl-C and SIGTERM included); the run's status stored. The
        host's hold is let go last, once everything the run made is gone."""
        try:
            return self._run_held()
        finally:
            self._hold.release()

    def _run_held(self) -> RunResult:
        status: Status = "interrupted"
        failed = 0
        try:
            with _sigterm_as_interrupt():
                scope = RunScope.claim(self.run_id, self.study.profile, self._profile_notice)
                try:
                    failed = self._measure(scope)
                    status = "failed" if failed else "finished"
                finally:
                    scope.close()
        finally:
            self._keep_time()
            self.store.set_run_status(self.run_id, status, finished=status != "interrupted")
        return RunResult(status, failed)

    def _measure(self, scope: RunScope) -> int:
        """The study's repetitions (one with ``--quick``), then the adaptive ones; how many
        samples failed."""
        runner = Runner(
            self._calibrated(scope),
            self.store,
            self.run_id,
            self.quick,
            scope,
            self.stopwatch,
            self._ascents,
            self.on_progress,
        )
        reps = 1 if self.quick else self.study.repetitions
        failed = runner.measure(range(1, reps + 1)).failed
        if self._adaptive is not None:
            failed += self._repeat_imprecise(runner, self._adaptive)
        return failed

    def _repeat_imprecise(self, runner: Runner, adaptive: AdaptivePlan) -> int:
        """One more repetition of the cells still imprecise, until none is, the study's
        maximum or its time budget is reached; the outcome kept (the artifact ``adaptive``).
        How many samples failed."""
        bounds, judge = adaptive.settings, adaptive.judge
        t0 = time.monotonic()
        budget = bounds.budget_minutes * 60
        stopped_by: Literal["max_repetitions", "budget_minutes"] = "max_repetitions"
        failed = 0
        for rep in range(self.study.repetitions + 1, bounds.max_repetitions + 1):
            wanted = judge(self.store, self.run_id, bounds.ci_target, bounds.max_repetitions)
            if not wanted:
                break
            if time.monotonic() - t0 > budget:
                stopped_by = "budget_minutes"
                break
            measured = runner.measure(range(rep, rep + 1), wanted, deadline=t0 + budget)
            failed += measured.failed
            if not measured.fitted:
                stopped_by = "budget_minutes"
                break
        short = judge(self.store, self.run_id, bounds.ci_target, math.inf)
        record = AdaptiveRecord(**bounds.model_dump(), stopped_by=stopped_by, short=sorted(short))
        self._keep(ADAPTIVE, record.to_json())
        return failed

    def _calibrated(self, scope: RunScope) -> Study:
        """The study with the work of the workloads whose settings ask for it (``scale: auto``)
        sized natively on this host, once per run, before any sample: kept as the artifact
        ``calibration`` (and with each cell's workload settings), so that every platform, and
        the run when resumed, does the same work. A ``--quick`` run keeps its fixed smoke-run
        work."""
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
                    instances = driver.start(1, time.monotonic() + START_TIMEOUT_S).instances
                except (InstanceError, HvbenchError) as e:
                    raise HvbenchError(
                        f"calibration: no native instance ({one_line(e)}); {fix}"
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
                                f"sizing {label} natively: {one_line(e)}; {fix}"
                            ) from e
                        if chosen := settings.sized_text():
                            self.on_message(f"hvbench: {label} sized: {chosen}")
                        stored[str(i)] = settings.model_dump(mode="json")
                        self._keep(CALIBRATION, stored)
                finally:
                    driver.stop(instances)
                    driver.close()
        return self.study.calibrated({int(i): data for i, data in stored.items()})

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

    def _profile_notice(self, line: str) -> None:
        """Say why the run goes on without profiles and keep the line with the run, for its
        report."""
        self.on_message(line)
        self._keep("profile", {"notice": line})

    # after ---------------------------------------------------------------------------------

    def finish(self, result: RunResult, make: Callable[[Store, str], R] | None = None) -> RunEnd[R]:
        """The run's end: what the caller makes of the measured run (``make``: the CLI's
        analysis and report), timed as the step ``analysis``, then where the run's time went,
        kept."""
        made = None
        if make is not None:
            with self.stopwatch.step("analysis"):
                made = make(self.store, self.run_id)
        return RunEnd(result.status, result.failed_samples, self._keep_time(), made)

    def _keep_time(self) -> TimeRecord:
        """Store where the run's time went so far (the artifact ``time``) and return it."""
        record = self.stopwatch.now()
        self._keep(TIME, record.to_json())
        return record

    def _keep(self, name: str, content: dict) -> None:
        """Keep one of the run's artifacts, in place of what it held before."""
        self.store.add_artifact(self.run_id, name, content, replace=True)


def _runnable(study: Study, skip: bool, say: Callable[[str], None]) -> Study:
    """The study, its platforms checked as ``hvbench doctor`` checks them: one this host
    cannot run refuses the run in one line with doctor's fix, or, with ``skip``, is left out,
    said in one line (never the baseline)."""
    missing = doctor.unavailable(study.platforms)
    if not missing:
        return study
    why = "; ".join(
        f"platform {name}: {f.detail}" + (f" (fix: {f.fix})" if f.fix else "")
        for name, f in missing.items()
    )
    if study.baseline in missing:
        raise HvbenchError(f"{study.source}: the baseline cannot run on this host: {why}")
    if not skip:
        raise HvbenchError(
            f"{study.source}: cannot run on this host: {why}; or leave "
            f"{'it' if len(missing) == 1 else 'them'} out: hvbench run --skip-unavailable"
        )
    say(f"hvbench: leaving out what this host cannot run: {why}")
    return study.without(missing)


def _hold(run_id: str, study: str, options: SessionOptions) -> HostHold:
    """The host held for the run: refused in one line where another run measures here, or,
    with the option ``wait``, once it has ended (said while waiting)."""
    say = options.get("on_message", _to_stderr)

    def waiting(holder: Holder | None) -> None:
        say(f"hvbench: waiting for {holder or 'another run'} to end: it measures on this host")

    return HostHold.take(run_id, study, options.get("wait", False), waiting)


def _adaptive_plan(study: Study, quick: bool, options: SessionOptions) -> AdaptivePlan | None:
    """The run's adaptive repetitions, where its study asks for them and it is no smoke run;
    refused before the run is stored where no judge of precision was given."""
    if study.adaptive is None or quick:
        return None
    judge = options.get("judge")
    if judge is None:
        raise ValueError(f"{study.source}: adaptive repetitions need a PrecisionJudge")
    return AdaptivePlan(study.adaptive, judge)


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


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


def _ignore(progress: SampleProgress) -> None:
    """Where a session's progress goes unless its caller draws it."""


def _to_stderr(line: str) -> None:
    """Where a session's messages go unless its caller says otherwise."""
    print(line, file=sys.stderr, flush=True)


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
