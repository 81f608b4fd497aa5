"""A study against a host: whether its groups of instances fit there, how long it takes, and
which Debian packages it lacks there.

The host is explicit (``HostCapacity``) rather than probed where it is needed, so that a study
can be planned for a host other than this one: a made-up one in tests, one whose KVM runs stock
guests in ``hvbench study show``. ``this_host`` reads this one. What a platform's own settings
need of a host (a device, huge pages, a CPU model: ``PlatformSettings.host_misfits``) its driver
checks on this host, where the run will need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from hvbench.drivers import PlatformSettings, driver_class
from hvbench.drivers.qemu_devices import QEMU
from hvbench.guest.image import cache_root
from hvbench.host import packages
from hvbench.host.inventory import TOOLS, capacity
from hvbench.host.kvm import kvm_runs_guests
from hvbench.host.limits import KernelLimits, kernel_limits
from hvbench.host.network import ENGINE_HOSTS, INSTANCE_ADDRESSES
from hvbench.host.process import executable
from hvbench.study import Cell, Study
from hvbench.units import format_size

START_TIMEOUT_S = 300.0
"""Seconds a group of instances has to start (``start_allowance``)."""
BRIDGE_PORTS = 1023 - len(ENGINE_HOSTS)
"""Instances with an address a group can have: each is a port of a Linux bridge (the run's, or
an engine's), which takes 1023 (the 1024th fails "Exchange full", tried here), the engines'
hosts' among them. Bound before the start allowance once starts ran in parallel (issue 53: 0.08
core-seconds a runc container would let 7500 start on 2 cores)."""
SAMPLE_TASKS = 2
"""Host tasks each instance adds while a sample runs, beyond ``Footprint.tasks``: the runner's
thread for it and the command it runs (the start's own thread per instance is gone by then)."""


@dataclass(frozen=True)
class HostCapacity:
    """What a study's instances must fit on a host, and what sets their pace there."""

    memory: int
    """Bytes of memory."""
    cores: int
    """Logical cores."""
    kvm: bool
    """Whether its KVM runs stock guests: ``accel: auto`` takes KVM there, and goes at its
    pace (``PlatformSettings.pace``)."""
    limits: KernelLimits
    """The kernel's limits on tasks and namespaces, and what is in use of them."""


def this_host() -> HostCapacity:
    """This host, read now: what is in use of its limits changes as instances come and go."""
    memory, cores = capacity()
    kvm = kvm_runs_guests(executable(QEMU), cache_root())
    return HostCapacity(memory, cores, kvm, kernel_limits())


def start_allowance(settings: PlatformSettings) -> float:
    """Seconds a group of instances has to start: START_TIMEOUT_S, or the platform's own
    ``boot_timeout`` where that is longer (a user's allowance for slow boots, such as five
    nested Xen domains at once, is not cut short)."""
    return max(START_TIMEOUT_S, getattr(settings, "boot_timeout", 0.0))


def misfits(study: Study, host: HostCapacity) -> list[str]:
    """What the study's largest group of instances of each platform holds beyond ``host``
    (``misfits_at``). An ascent must fit its first step: the runner stops it at the first that
    does not."""
    out = []
    for name in study.platforms:
        count = max(study.counts(name, ascents=False))
        out += misfits_at(study, name, count, host, ascents=False)
    return out


def misfits_at(
    study: Study, name: str, count: int, host: HostCapacity, ascents: bool = True
) -> list[str]:
    """What a platform's group of ``count`` instances (started at once) holds beyond ``host``:
    the guests' memory together with what each holds on the host besides
    (``PlatformSettings.footprint``), their vCPUs where pinned, the kernel's limits on tasks and
    namespaces, the cores to start them all within the time a group has, the run network's
    addresses, and what the workloads that run at ``count`` or fewer need. Each is one line
    saying what it needs, what the host has and the fix."""
    out = []
    settings = study.platforms[name]
    kept = settings.holds()
    memory, cores = kept.memory, kept.cores
    footprint = settings.footprint()
    held = footprint.memory if footprint else 0
    each = memory + held
    if count * each > host.memory:
        out.append(
            f"platform {name}: {count} instances × {_each(memory, held)} need "
            f"{_gib(count * each)}, the host has {_gib(host.memory)}: at most "
            f"{host.memory // each} instances" + (", or less memory each" if memory else "")
        )
    if count * cores > host.cores:
        out.append(
            f"platform {name}: {count} instances × {cores} pinned vCPU(s) need "
            f"{count * cores} cores, the host has {host.cores}: at most "
            f"{host.cores // cores} instances, or pin: false"
        )
    if footprint:
        need = host.limits.misfits(
            count,
            footprint.tasks + SAMPLE_TASKS,
            footprint.net_namespaces,
            footprint.pid_namespaces,
        )
        out += [f"platform {name}: {line}" for line in need]
        if footprint.address and count > INSTANCE_ADDRESSES:
            out.append(
                f"platform {name}: {count} instances need as many addresses on the run's "
                f"network, which has {INSTANCE_ADDRESSES}: at most {INSTANCE_ADDRESSES} "
                "instances"
            )
        if footprint.address and count > BRIDGE_PORTS:
            out.append(
                f"platform {name}: {count} instances need as many ports of a Linux bridge, "
                f"which takes 1023 ({len(ENGINE_HOSTS)} kept for the engines' hosts): at most "
                f"{BRIDGE_PORTS} instances"
            )
    pace = settings.pace(host.kvm)
    allowance = start_allowance(settings)
    if count * pace.core_s / host.cores > allowance:
        out.append(
            f"platform {name}: starting {count} instances at once takes about "
            f"{count * pace.core_s / host.cores:.0f} s of the host's {host.cores} cores "
            f"({pace.core_s:g} core-seconds each), past the {allowance:.0f} s a group has "
            f"to start: at most {int(allowance * host.cores / pace.core_s)} instances"
        )
    out += [f"platform {name}: {line}" for line in settings.host_misfits(count)]
    kernel = driver_class(settings).kernel
    for index, workload in enumerate(study.workloads):
        for n in study.counts(name, workload, ascents):
            if n <= count:
                need = study.workload(index).misfits(n, memory, host.memory, kernel)
                out += [f"platform {name}: {line}" for line in need]
    return out


def sample_seconds(study: Study, cell: Cell, quick: bool, kvm: bool) -> float:
    """Expected wall time of one sample of ``cell`` on a host whose KVM runs stock guests or
    not (``kvm``, all of a host a sample's length depends on): its workload's fixed work slowed
    by the platform's pace (``Workload.seconds_at``), its fixed time not."""
    pace = study.platforms[cell.platform].pace(kvm)
    return study.workload(cell.workload_index).seconds_at(quick, pace)


def estimate_seconds(study: Study, quick: bool, host: HostCapacity) -> float:
    """Expected wall time of a run on ``host``: every sample (``sample_seconds``) and every
    group of instances started and stopped on its cores, over the repetitions a run makes (one
    with ``--quick``; adaptive ones not counted; an ascent's cells once per climb, every step
    counted)."""
    starts = sum(
        study.platforms[p].pace(host.kvm).group_seconds(n, host.cores)
        for p in study.platforms
        for n in study.counts(p)
    )
    reps = 1 if quick else study.repetitions
    work = sum(
        sample_seconds(study, c, quick, host.kvm) * _times(study, c, quick) for c in study.cells()
    )
    return reps * starts + work


def _times(study: Study, cell: Cell, quick: bool) -> int:
    """How many samples a run takes of the cell: one per repetition, or per climb of an ascent
    (``hvbench.ascent``), one with ``--quick``."""
    ascent = study.workloads[cell.workload_index].ascent()
    return 1 if quick else ascent.climb_count if ascent else study.repetitions


def _each(memory: int, held: int) -> str:
    """What one instance takes of the host's memory, in words: its own (a guest's, a cgroup's
    limit) and what the host holds for it besides."""
    if memory and held:
        return (
            f"{format_size(memory + held)} ({format_size(memory)} of memory + "
            f"{format_size(held)} the host holds besides)"
        )
    return f"{format_size(memory)} of memory" if memory else f"{format_size(held)} held on the host"


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.1f} GiB"


def needed_packages(study: Study) -> dict[str, tuple[str, set[str]]]:
    """By workload (its label): its name, and the listed packages it needs on the host: those
    of the tools it runs (natively, or copied from the host into guest images), its own
    (``packages``), and debootstrap where its guests need a userland; and by platform, those its
    driver runs (``Driver.packages``: a container engine)."""
    tools = {PurePath(tool).name: spec.package for tool, spec in TOOLS.items()}
    known = set(packages.listed())
    out: dict[str, tuple[str, set[str]]] = {}
    for i in range(len(study.workloads)):
        workload = study.workload(i)
        names = {tools[t] for t in (PurePath(t).name for t in workload.tools()) if t in tools}
        names |= set(workload.packages())
        names |= {packages.DEBOOTSTRAP} if workload.needs_userland else set()
        name, label = workload.settings.name, workload.settings.label()
        out[label] = (name, out.get(label, (name, set()))[1] | (names & known))
    for platform, settings in study.platforms.items():
        if engine := set(driver_class(settings).packages) & known:
            out[f"platform {platform}"] = (settings.driver, engine)
    return out


def missing_packages(study: Study) -> list[str]:
    """One line per workload of the study that needs packages not installed here, naming the
    setup.sh option that installs them."""
    wanted = needed_packages(study)
    have = packages.installed(set().union(*(names for _, names in wanted.values())))
    return packages.refusals(wanted, have)
