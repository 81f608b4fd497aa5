"""The contract every driver keeps, so that every workload and report works on every platform.

A driver makes instances of a platform. An instance reads as a lifecycle (after Firecracker's
test framework): the driver ``start``s N of them, workloads ``exec`` commands inside them through a
control channel that is never the device under test, and the driver ``stop``s them.
"""

from __future__ import annotations

import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hvbench.drivers.footprint import Footprint, Pace
from hvbench.errors import HvbenchError, InstanceError, StartFailed
from hvbench.host.monitor import LOCAL, HostCpuSource
from hvbench.host.process import ExecResult
from hvbench.store import WhatRan

if TYPE_CHECKING:
    from hvbench.host.network import RunNetwork
    from hvbench.host.resources import Ledger, Resource


@dataclass(frozen=True)
class Kept:
    """What one instance keeps of the host for itself (``PlatformSettings.holds``)."""

    memory: int
    """Its guest memory, in bytes."""
    cores: int
    """Its vCPUs where they are pinned, else 0."""


class PlatformSettings(BaseModel):
    """Settings common to every platform; each driver extends this with its own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    no_lifecycle: ClassVar[str] = "has no migration or snapshot operation"
    """Why the platform's instances cannot be migrated or snapshotted (``refuses``)."""
    copies_once: ClassVar[str | None] = None
    """How the platform migrates where it has neither post-copy nor auto-converge (it copies the
    guest in one way only), in the words of ``refuses_plan``'s refusal; None where it has both."""

    driver: str
    instances: list[PositiveInt] | None = Field(
        default=None, description="instance counts for this platform (default: the study's)"
    )

    def holds(self) -> Kept:
        """Host memory and host cores one instance keeps for itself (0 for what a driver has
        not: native has neither)."""
        memory = getattr(self, "memory", None) or 0
        pinned = getattr(self, "vcpus", 1) if getattr(self, "pin", False) else 0
        return Kept(int(memory), int(pinned))

    def host_misfits(self, count: int) -> list[str]:
        """What ``count`` instances need of this host beyond memory and cores that it lacks
        (a device, huge pages, a CPU model), one line each with the fix; checked before a run
        starts anything."""
        return []

    def footprint(self) -> Footprint | None:
        """What one instance holds on this host besides its guest's memory; None where nothing
        of it is on this host or it was not measured."""
        return None

    def pace(self, kvm: bool) -> Pace:
        """How fast this platform goes on a host whose KVM runs stock guests (``kvm``), or one
        whose does not (``accel: auto`` resolves by it)."""
        raise NotImplementedError(f"driver {self.driver} has no pace")

    def refuses(self, operation: Operation) -> str | None:
        """Why this platform's instances cannot do ``operation`` (one line, checked when the
        study is loaded), or None where ``Instance.lifecycle`` does it: the settings decide, so
        that a study is judged without a driver."""
        return f"the {self.driver} driver {self.no_lifecycle}"

    def refuses_plan(self, plan: MigrationPlan) -> str | None:
        """Why this platform cannot migrate the way ``plan`` asks (post-copy, auto-converge:
        not every VMM has them, ``copies_once``), one line checked when the study is loaded, or
        None."""
        if self.copies_once and (plan.postcopy or plan.auto_converge):
            return (
                f"{self.copies_once}: no post-copy or auto-converge "
                "(mode: precopy, auto_converge: false)"
            )
        return None


@dataclass
class DataDisk:
    """The disk that disk workloads measure, as seen from inside the instance."""

    device: str
    """Block device inside the instance (``/dev/vdb``, a loop device for native)."""
    mountpoint: str
    """Where the freshly formatted filesystem of that device is mounted inside the instance."""
    description: str
    """What backs it on the host (file, partition, LV), for the report's provenance."""


@dataclass(frozen=True, kw_only=True)
class BootPhases:
    """How an instance booted: seconds, to the millisecond, from its start (its VMM's process,
    the runtime's or engine's call) until each phase its platform shows; what the boot workload
    makes its metrics of, and a boot storm its ready times."""

    kernel: float | None = None
    """The kernel's first message (a guest's serial console)."""
    init: float | None = None
    """The guest's init started."""
    ready: float
    """The control channel answered: every started instance has it."""
    api: float | None = None
    """A microVM VMM's API answered."""
    start_to_init: float | None = None
    """From the API call that started the guest to its init (Firecracker's boot time)."""

    @classmethod
    def ready_since(cls, t0: float) -> BootPhases:
        """Ready now, started at ``t0`` (``time.monotonic``): the boot of an instance that shows
        no other phase (a container, a Xen domain)."""
        return cls(ready=round(time.monotonic() - t0, 3))

    def as_dict(self) -> dict[str, float]:
        """The phases shown, in boot order (as the boot workload's raw output prints them)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Instance(ABC):
    """One running guest, or the host itself for ``native``."""

    platform: str
    index: int
    vcpus: int
    memory_mib: int
    address: str | None = None
    """IPv4 address in the run's network namespace, or None without a NIC."""
    data_disk: DataDisk | None = None
    boot: BootPhases | None = None
    """How it booted; None where it never did (``native``: the host itself)."""
    scratch_root: str = "/tmp"
    """Where workloads make their scratch directories inside the instance: its own /tmp, or
    for one that shares the host's files (native), a directory that goes with the run."""
    resources: list[Resource] = field(default_factory=list)
    """What the instance holds on the host (its process, disks, taps, namespaces) in the order
    made: ``Driver.stop`` releases it, last made first."""
    driver: Driver | None = None
    """The driver that started it (``Driver.start``), for the platform's operations that make
    the instance anew in its run (a migration's second VMM, a restore)."""

    guest_is_host_processes: ClassVar[bool] = False
    """True where ``host_pids()`` are the guest's own processes (a container's, native's
    commands) rather than a VMM or a user-space kernel holding the guest's memory: all their
    memory is then the guest's own, and what the instance costs beyond it is kernel memory in
    no process (``kernel_memory``)."""
    ends_its_processes: ClassVar[bool] = True
    """False where a daemon started in the instance outlives it (native: the host's own
    processes), so that a workload puts its servers in the run's ledger itself; a guest or a
    container ends everything in it when it stops."""

    @property
    def name(self) -> str:
        return f"{self.platform}-{self.index}"

    @abstractmethod
    def exec(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
        """Run argv inside the instance (no shell); raise CommandTimeout past timeout."""

    @abstractmethod
    def host_pids(self) -> list[int]:
        """Host processes that make up this instance, for its share of host CPU."""

    def platform_pids(self) -> list[int]:
        """Those of ``host_pids()`` that are the platform's own beside the guest's where the
        guest's are host processes too (a container engine's daemon, monitor, user-space
        network): none of their memory is the guest's, all of it the platform's cost."""
        return []

    def kill(self) -> None:  # noqa: B027 (a hook: most instances end with what they hold)
        """Stop the instance now, before ``Driver.stop`` releases what it holds (by default
        nothing: releasing its resources ends it)."""

    def guest_ram(self, path: str, size: int) -> bool:
        """Whether a mapping (its file, or "[anon]" for anonymous memory, and its size in bytes)
        of ``host_pids()`` holds the guest's RAM: all of them where those processes are the
        guest's own, else by default the one of exactly the guest's memory size (QEMU's RAM
        block)."""
        return self.guest_is_host_processes or size == self.memory_mib << 20

    def kernel_memory(self) -> int | None:
        """Bytes of kernel memory the host charges to this instance apart from its processes'
        pages (a cgroup of its own: namespaces, mounts, page tables, kernel stacks, sockets), or
        None where nothing sets it apart (a VMM runs in hvbench's cgroup: KVM's page tables or a
        tap's buffers are in no figure)."""
        return None

    def accounted_cpu_seconds(self) -> float | None:
        """CPU seconds its platform charges to the instance apart from ``host_pids()`` (a Xen
        domain's vCPUs, a domain on a remote host), or None where those processes say it all."""
        return None

    @abstractmethod
    def alive(self) -> bool:
        """False once the instance crashed or was killed."""

    def spawn(self, command: str, timeout: float) -> ExecResult:
        """Run a shell command line that leaves processes in the background (``... &``) which
        must outlive the platform's operations on the instance (a gVisor restore ends what
        ``runsc exec`` started); its output, as ``exec``'s."""
        return self.exec(["sh", "-c", command], timeout)

    def lifecycle(self) -> Lifecycle | None:
        """The platform's operations on this running instance (live migration, snapshot and
        restore), or None where its driver has none (``PlatformSettings.refuses`` says why,
        before a run starts)."""
        return None


Operation = Literal["migrate", "snapshot"]
"""Platform operations a workload may need of an instance beyond ``exec``."""


_operations = itertools.count(1)


def operation_path(directory: Path, inst: Instance, kind: str) -> Path:
    """Where one operation on ``inst`` keeps its files (``kind``: ``in`` for the instance made
    anew, a migration's destination or a restore; ``save``, ``checkpoint``), in ``directory``
    (which the run's instances share): numbered in this process, for an instance may be moved
    or saved again and again. No dot in its name: ``with_suffix`` derives the files from it."""
    return directory / f"{inst.name}-{kind}{next(_operations)}"


@dataclass(frozen=True)
class MigrationPlan:
    """How to migrate: pre-copy, optionally switching to post-copy, optionally auto-converge."""

    postcopy: bool = False
    auto_converge: bool = False


@dataclass
class OperationReport:
    """What one platform operation took, by the platform's own account: figures by metric name
    (without the workload's prefix, in the unit the workload's metric has), and the raw record
    for provenance."""

    figures: dict[str, float]
    raw: str


class Lifecycle(ABC):
    """Migration and snapshot/restore of one running instance. Afterwards the instance is the
    one that continues (the destination, the restored one): the run measures and stops that,
    and everything the operation made is in the run's ledger."""

    @abstractmethod
    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Live-migrate the instance to a second VMM on this host; return once it runs there
        (figures: total_s, downtime_ms, transferred_mib, ...)."""

    @abstractmethod
    def snapshot(self, deadline: float) -> OperationReport:
        """Save the running instance to a file, and restore it from there until its control
        channel answers again (figures: save_s, size_mib, restore_s)."""


@dataclass(frozen=True)
class Needs:
    """What the study's workloads need from every instance, so a driver builds no more."""

    tools: frozenset[str] = frozenset()
    """Programs that must be runnable inside the instance."""
    data_disk: bool = False
    """A separate disk, formatted and mounted, for the disk workloads that run on the platform."""
    userland: bool = False
    """A full root filesystem (compiler, make) rather than a small initramfs."""
    packages: frozenset[str] = frozenset()
    """Debian packages the root filesystem must hold besides its base (servers, compilers)."""


Kernel = Literal["guest", "host", "sentry"]
"""Whose kernel instances run on: each its own guest's (a VM), the host's (native, runc), or
gVisor's Sentry (Linux's system calls served in Go: no modules, no kernel servers like nfsd)."""


I = TypeVar("I", bound=Instance)  # noqa: E741 (the usual name of a type variable)


@dataclass
class Started(Generic[I]):
    """What ``Driver.start`` started: the instances, all ready, and the seconds from starting
    them at once until the last was (what a boot storm measures: without the driver's
    preparation before it, such as finding or building the guest image)."""

    instances: list[I]
    seconds: float


S = TypeVar("S", bound=PlatformSettings)


R = TypeVar("R")
"""What a driver resolves once per run (``open``): a frozen dataclass of its own."""


class DriverNotOpen(RuntimeError):
    """A driver asked for what ``open`` resolves before it was opened, or after ``close``: a
    caller's mistake, named with the platform and the driver."""

    def __init__(self, platform: str, driver: str) -> None:
        super().__init__(f"platform {platform}: the {driver} driver is not open")
        self.platform = platform
        self.driver = driver


class Driver(ABC, Generic[S, I, R]):
    """Makes instances (``I``) of one platform, from that platform's own settings (``S``). The
    runner keeps one driver per platform for the run: what the platform resolves is resolved
    once (``open``, which returns it: ``R``, then ``opened``), every group of instances is
    started and stopped (``start``, ``stop``), and the driver is closed at the run's end
    (``close``). A template, after QEMUMachine's: the public methods call the private hooks in
    a fixed order."""

    name: ClassVar[str]
    settings_model: ClassVar[type[PlatformSettings]]
    default_instances: ClassVar[Sequence[int] | None] = None
    """Counts to use when the platform sets none; None means the study's list."""
    packages: ClassVar[tuple[str, ...]] = ()
    """Debian packages (of ``debian-packages.txt``) the driver runs besides the default set-up's,
    so that a study using it where one is missing is refused naming setup.sh's option."""
    kernel: ClassVar[Kernel] = "guest"
    """Whose kernel the instances run on: what a workload needing one of each (the nfs role's
    NFS server) checks before the run (``Workload.misfits``)."""

    def __init__(
        self,
        platform: str,
        settings: S,
        needs: Needs,
        ledger: Ledger,
        network: RunNetwork,
        workdir: Path,
    ) -> None:
        self.platform = platform
        self.settings = settings
        self.needs = needs
        self.ledger = ledger
        self.network = network
        self.workdir = workdir
        """A directory of this run's own for files the driver makes (removed with the run)."""
        self.resources: list[Resource] = []
        """What the driver holds on the host for the platform's whole run (a mounted root
        filesystem, the runtime's state directory, images uploaded to a remote host), in the
        order made: ``close`` releases it, last made first."""
        self._open = False
        """Whether ``_opened`` is set: from ``open`` until ``close``."""

    _opened: R
    """What ``open`` resolved; read through ``opened``, which names the mistake of reading it
    unset."""

    @classmethod
    @abstractmethod
    def check(cls) -> Availability:
        """Whether this host can run the driver at all (for doctor and the default study)."""

    @classmethod
    def check_for(cls, settings: S) -> Availability:
        """Whether this host can run a platform of these settings, before a run's first sample:
        the driver's ``check``, unless the settings name what it checks (a binary, a
        connection)."""
        return cls.check()

    def open(self) -> R:
        """Resolve what the platform's instances share for the whole run (``_resolve``: its
        image, root filesystem, connection, accelerator), once, and return it: ``start`` opens
        the driver, and a resolve that failed is tried again at the next start."""
        if not self._open:
            self._opened = self._resolve()
            self._open = True
        return self._opened

    @property
    def is_open(self) -> bool:
        """Whether ``open`` resolved the platform (and ``close`` has not let it go since)."""
        return self._open

    @property
    def opened(self) -> R:
        """What ``open`` resolved; DriverNotOpen before it or after ``close``."""
        if not self._open:
            raise DriverNotOpen(self.platform, self.name)
        return self._opened

    def close(self) -> None:
        """At the run's end, Ctrl-C included: release what the driver held for the platform,
        last made first, then what is not in the ledger (``_closed``). After a SIGKILL the
        ledger's cleanup releases the former."""
        while self.resources:
            self.ledger.release(self.resources.pop())
        self._closed()
        if self._open:
            del self._opened
            self._open = False

    def start(self, count: int, deadline: float) -> Started[I]:
        """Start ``count`` instances in parallel and return them once all are ready; raise
        InstanceError past ``deadline`` (a ``time.monotonic()`` value). A template (after
        QEMUMachine's ``launch``): the driver is opened (``open``), what every instance of the
        group shares is made (``_prepare``), then every instance starts at once
        (``_start_one``), a failure stopping them all (``start_parallel``), and what needs them
        all running follows (``_started``)."""
        self.open()
        self._prepare(count)
        instances = [self._instance(index) for index in range(count)]
        for inst in instances:
            inst.driver = self
        seconds = self.start_parallel(instances, self._start_one, deadline)
        self._started(instances)
        return Started(instances, seconds)

    @abstractmethod
    def _resolve(self) -> R:
        """Resolve once per run what every instance of the platform shares, recording in
        ``resources`` what it makes on the host as soon as it is made (``close`` releases it,
        even after a resolve that failed), and return it (``opened``)."""

    def _prepare(self, count: int) -> None:
        """Make what a group of ``count`` instances shares (the run's network, huge pages),
        before any of them starts."""

    @abstractmethod
    def _instance(self, index: int) -> I:
        """The not yet started instance ``index``."""

    @abstractmethod
    def _start_one(self, inst: I, deadline: float) -> None:
        """Start one instance and wait until it is ready, recording in ``inst.resources`` what
        it holds as soon as that is made, so that ``stop`` removes it even after a failure."""

    def _started(self, instances: list[I]) -> None:
        """What needs every instance running (pinning their vCPUs), once all are ready."""

    def stop(self, instances: list[I]) -> None:
        """Stop the instances and release everything they held, all at once (one after another,
        a storm of N would stop in N times one's time): each one ended (``_end``), then what it
        holds released, last made first (``_release``); then what the driver holds for the
        group (``_stopped``). One that fails to stop keeps none of the others from stopping:
        its error is raised once all are done."""
        failed = at_once(instances, self._stop_one)
        self._stopped(instances)
        if failed:
            raise failed[0]

    def _stop_one(self, inst: I) -> None:
        """End one instance and release what it holds, even where ending it failed."""
        try:
            self._end(inst)
        finally:
            while inst.resources:
                self._release(inst, inst.resources.pop())

    def _end(self, inst: I) -> None:
        """End the instance before what it holds is released: by default ``kill`` it."""
        inst.kill()

    def _release(self, inst: I, res: Resource) -> None:
        """Release one resource of the instance's."""
        self.ledger.release(res)

    def _stopped(self, instances: list[I]) -> None:
        """Release what the driver held for this group of instances, after they are gone (by
        default nothing)."""

    def _closed(self) -> None:
        """Let go of what the driver held for the platform outside the ledger (a connection),
        once ``close`` released its resources, while ``opened`` still holds what was resolved
        if it was (by default nothing)."""

    def host_cpu_source(self) -> HostCpuSource:
        """Where the CPU of the host the instances run on is read: this machine, unless the
        driver runs them elsewhere."""
        return LOCAL

    def describe(self) -> dict:
        """Full settings and what was resolved from them (accel chosen, image hash, ...): the
        provenance a reader looks up; what the analysis reads is ``what_ran``."""
        return self.settings.model_dump(mode="json")

    def what_ran(self) -> WhatRan:
        """What ran, in the typed fields a report reads (the accelerator or mode, the disk
        path's caching), as far as the driver has decided it: its settings alone until it
        resolves more. Each driver says it here, so that no report guesses it from its name."""
        return self.ran_by_settings(self.settings)

    @classmethod
    @abstractmethod
    def ran_by_settings(cls, settings: S) -> WhatRan:
        """What ran as far as a platform's settings say, before the driver decides anything.
        Every driver says it, even where that is nothing to choose and direct I/O reaching
        the medium (``WhatRan()``): a guess here would mislabel its figures in every report."""

    def start_parallel(
        self, instances: list[I], start_one: Callable[[I, float], None], deadline: float
    ) -> float:
        """Run ``start_one`` for every instance at once (N guests boot together, as they will
        run) and return the seconds until all were ready; if any fails, let the others finish,
        stop them all and raise StartFailed with how many failed and the first error."""
        t0 = time.monotonic()
        failed = at_once(instances, lambda inst: start_one(inst, deadline))
        seconds = time.monotonic() - t0
        if failed:
            self.stop(list(instances))
            first = failed[0]
            if isinstance(first, HvbenchError):
                raise first  # bad settings, not a boot that failed
            text = str(first) if isinstance(first, InstanceError) else f"start failed: {first}"
            if len(instances) > 1:
                text = f"{len(failed)} of {len(instances)} instances failed to start; first: {text}"
            elif not isinstance(first, InstanceError):
                text = f"{self.platform}: {text}"
            raise StartFailed(text, len(failed)) from first
        return seconds


T = TypeVar("T")


def at_once(items: Sequence[T], work: Callable[[T], object]) -> list[BaseException]:
    """Run ``work`` on every item at once, each in a thread of its own (a storm's instances
    wait on their platform together, not in turn), and wait for all; the errors raised, in the
    items' order. Interrupted (Ctrl-C, SIGTERM), it raises only once every thread has ended:
    the run's cleanup that follows must not release what a thread has recorded and is about
    to make (it would be made after, and left). The threads begin their work once all are
    started, so that an interrupt while they start (where a thread may not be known yet) has
    none begin it. A second interrupt stops the wait."""
    started, cancelled = threading.Event(), threading.Event()

    def once_all_are_started(item: T) -> object:
        started.wait()
        return None if cancelled.is_set() else work(item)

    pool = ThreadPoolExecutor(max_workers=max(1, len(items)))
    futures: list[Future] = []
    try:
        futures.extend(pool.submit(once_all_are_started, item) for item in items)
        started.set()
        wait(futures)
    except BaseException:
        if not started.is_set():
            cancelled.set()
            started.set()
        wait(futures)  # not Thread.join: interrupted once, it takes a running thread for ended
        raise
    finally:
        pool.shutdown(wait=False)
    return [e for e in (f.exception() for f in futures) if e is not None]


@dataclass
class Availability:
    """Doctor's verdict on a driver or tool."""

    ok: bool
    detail: str
    fix: str = ""
