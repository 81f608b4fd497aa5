"""What makes figures drift on a virtualization host, read as ``pyperf system show`` reads it.

Each condition is what this host shows, or "not exposed" when it shows nothing: a VM's cpufreq
and C-states belong to its hypervisor, and hvbench never guesses them. Benchmark-grade means
that the condition cannot move a figure between repetitions or between runs:

- the frequency governor ``performance`` and turbo off (pyperf's advice: both make the clock
  depend on load and heat);
- no enabled idle state slower than ``MAX_EXIT_LATENCY_US`` to leave (C1 and C1E at most, as
  tuned's latency-performance profile keeps);
- no two CPUs hvbench may use on one core, hvbench's CPUs on one NUMA node;
- KSM not merging, THP not ``always`` (``madvise`` is what QEMU asks for its guests' memory and
  what Debian ships; ``always`` lets khugepaged collapse every process's memory in the
  background and makes faults compact memory), irqbalance not running, no swap in use;
- the host under ``MAX_BUSY`` busy over a short sample before the run.

The rest is for the record (drivers, KVM modules, perf_event_paranoid, load average).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hvbench.host.monitor import read_proc_stat
from hvbench.host.process import processes

SYS = Path("/sys")
PROC = Path("/proc")
NOT_EXPOSED = "not exposed"
MAX_EXIT_LATENCY_US = 10
"""Deepest idle state a benchmark-grade host leaves enabled, by exit latency (C1E on Intel)."""
MAX_BUSY = 0.10
"""Share of the host's CPU that may be busy before a run (other work, steal included)."""
KVM_MODULES = ("kvm_intel", "kvm_amd", "kvm_pvm")
TUNE = "hvbench host tune"


@dataclass(frozen=True)
class Write:
    """A value ``hvbench host tune`` writes to a file to make its condition benchmark-grade."""

    path: str
    value: str


@dataclass(frozen=True)
class Condition:
    """One knob as it is on this host; ``value`` None when the host does not expose it."""

    name: str
    value: str | None
    source: str
    """Where it was read."""
    benchmark_grade: bool | None = None
    """None: for the record only, or not exposed."""
    effect: str = ""
    """What the condition does to the figures, when it is not benchmark-grade."""
    fix: str = ""
    tune: tuple[Write, ...] = ()
    """What ``hvbench host tune`` writes to make it benchmark-grade (empty: nothing to do)."""

    @property
    def status(self) -> str:
        if self.value is None:
            return NOT_EXPOSED
        if self.benchmark_grade is None:
            return "info"
        return "ok" if self.benchmark_grade else "not benchmark-grade"

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "status": self.status,
            "benchmark_grade": self.benchmark_grade,
            "source": self.source,
            "effect": self.effect,
            "fix": self.fix,
            "tune": [{"path": w.path, "value": w.value} for w in self.tune],
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def selected(text: str) -> str:
    """The chosen word of a sysfs selector: "always [madvise] never" -> "madvise"."""
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


def cpulist(cpus: Iterable[int]) -> str:
    """The kernel's form of a CPU set: {0, 1, 2, 5} -> "0-2,5"."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpulist(text: str) -> set[int]:
    """The kernel's CPU list ("0-2,5") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _per_cpu(values: dict[int, str]) -> str | None:
    """Values read per CPU, grouped: "performance (cpus 0-3), powersave (cpus 4-7)"."""
    if not values:
        return None
    groups: dict[str, list[int]] = {}
    for cpu, v in sorted(values.items()):
        groups.setdefault(v, []).append(cpu)
    return ", ".join(f"{v} (cpus {cpulist(cpus)})" for v, cpus in groups.items())


class _Host:
    """The files read, under a root that tests may point at a tree of their own."""

    def __init__(self, sys: Path, proc: Path) -> None:
        self.sys = sys
        self.proc = proc
        self.cpu_root = sys / "devices/system/cpu"
        self.cpus = sorted(
            int(d.name[3:]) for d in self.cpu_root.glob("cpu[0-9]*") if d.name[3:].isdigit()
        )

    def cpu(self, n: int) -> Path:
        return self.cpu_root / f"cpu{n}"

    def affinity(self) -> set[int]:
        """The CPUs hvbench may run on: what instances inherit unless a platform pins them."""
        return set(os.sched_getaffinity(0)) & set(self.cpus) or set(self.cpus)


def _cpufreq(h: _Host) -> list[Condition]:
    src = str(h.cpu_root / "cpu*/cpufreq")
    drivers = {c: v for c in h.cpus if (v := _read(h.cpu(c) / "cpufreq/scaling_driver"))}
    governors = {c: v for c in h.cpus if (v := _read(h.cpu(c) / "cpufreq/scaling_governor"))}
    slow = [c for c, v in governors.items() if v != "performance"]
    return [
        Condition("cpufreq.driver", _per_cpu(drivers), f"{src}/scaling_driver"),
        Condition(
            "cpufreq.governor",
            _per_cpu(governors),
            f"{src}/scaling_governor",
            not slow if governors else None,
            "the clock follows the load: a short or light job runs at a lower frequency than a "
            "long or heavy one, and figures move with whatever else the host does",
            f"{TUNE} (sets performance on every CPU)",
            tuple(Write(str(h.cpu(c) / "cpufreq/scaling_governor"), "performance") for c in slow),
        ),
    ]


def _turbo(h: _Host) -> Condition:
    effect = (
        "the turbo frequency depends on temperature and on how many cores are busy: more "
        "instances run at a lower clock than one, and repetitions drift as the host warms"
    )
    no_turbo = h.cpu_root / "intel_pstate/no_turbo"
    boost = h.cpu_root / "cpufreq/boost"
    if (v := _read(no_turbo)) is not None:
        on = v == "0"
        write = Write(str(no_turbo), "1")
        src = str(no_turbo)
    elif (v := _read(boost)) is not None:
        on = v == "1"
        write = Write(str(boost), "0")
        src = str(boost)
    else:
        return Condition("turbo", None, f"{no_turbo}, {boost}")
    return Condition(
        "turbo",
        "on" if on else "off",
        src,
        not on,
        effect,
        f"{TUNE} (turns it off)",
        (write,) if on else (),
    )


def _cstates(h: _Host) -> list[Condition]:
    idle = h.cpu_root / "cpuidle"
    driver = _read(idle / "current_driver")
    governor = _read(idle / "current_governor_ro") or _read(idle / "current_governor")
    deepest: tuple[int, str] | None = None
    for c in h.cpus:
        for state in h.cpu(c).glob("cpuidle/state[0-9]*"):
            latency, name = _read(state / "latency"), _read(state / "name")
            if latency is None or name is None or _read(state / "disable") not in ("0", None):
                continue
            if deepest is None or int(latency) > deepest[0]:
                deepest = (int(latency), name)
    limits = {
        p.parent.parent.name: v
        for p in sorted(h.sys.glob("module/*/parameters/max_cstate"))
        if (v := _read(p)) is not None
    }
    return [
        Condition("cpuidle.driver", driver, str(idle / "current_driver")),
        Condition("cpuidle.governor", governor, str(idle / "current_governor_ro")),
        Condition(
            "cstate.deepest",
            None if deepest is None else f"{deepest[1]} (exit latency {deepest[0]} µs)",
            str(h.cpu_root / "cpu*/cpuidle/state*/{name,latency,disable}"),
            None if deepest is None else deepest[0] <= MAX_EXIT_LATENCY_US,
            "an idle core takes that long to wake: latencies (network round trips, disk "
            "waits, boot) include wake-ups whose cost depends on how idle the host was",
            f"cpupower idle-set -D {MAX_EXIT_LATENCY_US + 1} (disables the states that take "
            f"over {MAX_EXIT_LATENCY_US} µs to leave), or boot with intel_idle.max_cstate=1",
        ),
        Condition(
            "cstate.max",
            ", ".join(f"{m}.max_cstate={v}" for m, v in limits.items()) or None,
            str(h.sys / "module/*/parameters/max_cstate"),
        ),
    ]


def _smt(h: _Host) -> list[Condition]:
    control = h.cpu_root / "smt/control"
    mine = h.affinity()
    groups: set[frozenset[int]] = set()
    for c in sorted(mine):
        if (text := _read(h.cpu(c) / "topology/thread_siblings_list")) is not None:
            groups.add(frozenset(parse_cpulist(text) & mine))
    shared = sorted(cpulist(g) for g in groups if len(g) > 1)
    value = None
    if groups:
        value = f"{len(mine)} CPUs on {len(groups)} core{'s' * (len(groups) != 1)}" + (
            f" (siblings {' '.join(shared)})" if shared else ""
        )
    return [
        Condition("smt.control", _read(control), str(control)),
        Condition(
            "smt.siblings",
            value,
            str(h.cpu_root / "cpu*/topology/thread_siblings_list") + " of hvbench's CPUs",
            None if value is None else not shared,
            "two instances on the sibling threads of one core share its execution units and "
            "caches: a figure depends on where the scheduler put them, which changes between "
            "repetitions",
            f"echo off > {control} (halves the CPUs), or run hvbench on one thread of each "
            "core (taskset -c with one CPU per core)",
        ),
    ]


def _ksm(h: _Host) -> list[Condition]:
    ksm = h.sys / "kernel/mm/ksm"
    run = _read(ksm / "run")
    return [
        Condition(
            "ksm.run",
            run,
            str(ksm / "run"),
            None if run is None else run != "1",
            "ksmd scans and merges identical pages of the guests in the background: it takes "
            "CPU, and a guest's write to a merged page faults to copy it, so memory figures "
            "and density depend on what the guests happen to share",
            f"{TUNE} (echo 0 > {ksm / 'run'})",
            (Write(str(ksm / "run"), "0"),) if run == "1" else (),
        ),
        Condition("ksm.pages_sharing", _read(ksm / "pages_sharing"), str(ksm / "pages_sharing")),
    ]


def _thp(h: _Host) -> list[Condition]:
    """THP's policy, and for ``enabled`` the sizes of multi-size THP (kernel 6.8 on:
    hugepages-<size>kB/enabled, "inherit" taking the policy above) that are ``always`` apart
    from it."""
    thp = h.sys / "kernel/mm/transparent_hugepage"
    enabled = defrag = None
    if (text := _read(thp / "enabled")) is not None:
        enabled = selected(text)
    if (text := _read(thp / "defrag")) is not None:
        defrag = selected(text)
    sizes = {}
    for d in thp.glob("hugepages-*kB"):
        if (text := _read(d / "enabled")) is not None and selected(text) == "always":
            sizes[int(d.name[10:-2])] = str(d / "enabled")
    value = enabled
    if enabled is not None and sizes:
        value = f"{enabled}; always for {', '.join(f'{k}kB' for k in sorted(sizes))}"
    fix = f"{TUNE} (madvise: only memory that asks, as QEMU's guest memory does)"
    return [
        Condition(
            "thp.enabled",
            value,
            str(thp / "enabled") + (", hugepages-*kB/enabled" if sizes else ""),
            None if enabled is None else enabled != "always" and not sizes,
            "every process's memory gets huge pages where memory is unfragmented, and "
            "khugepaged collapses pages in the background: figures depend on the host's "
            "fragmentation and on khugepaged's timing",
            fix,
            ((Write(str(thp / "enabled"), "madvise"),) if enabled == "always" else ())
            + tuple(Write(sizes[k], "madvise") for k in sorted(sizes)),
        ),
        Condition(
            "thp.defrag",
            defrag,
            str(thp / "defrag"),
            None if defrag is None else defrag != "always",
            "every page fault that wants a huge page compacts memory first: faults stall for "
            "as long as compaction takes, which depends on the host's fragmentation",
            fix,
            (Write(str(thp / "defrag"), "madvise"),) if defrag == "always" else (),
        ),
    ]


def _numa(h: _Host) -> list[Condition]:
    nodes = {
        int(d.name[4:]): parse_cpulist(_read(d / "cpulist") or "")
        for d in (h.sys / "devices/system/node").glob("node[0-9]*")
    }
    src = str(h.sys / "devices/system/node/node*/cpulist")
    if not nodes:
        return [Condition("numa.nodes", None, src), Condition("numa.placement", None, src)]
    mine = h.affinity()
    spanned = sorted(n for n, cpus in nodes.items() if cpus & mine)
    listed = ", ".join(
        f"node{n}: cpus {cpulist(cpus) or 'none'}" for n, cpus in sorted(nodes.items())
    )
    return [
        Condition("numa.nodes", f"{len(nodes)} ({listed})", src),
        Condition(
            "numa.placement",
            f"hvbench's CPUs {cpulist(mine)}, on node{'s' * (len(spanned) > 1)} "
            + ", ".join(str(n) for n in spanned)
            + " (instances inherit them unless a platform pins its vCPUs)",
            "sched_getaffinity of hvbench, " + src,
            len(spanned) <= 1,
            "an instance's vCPUs and memory may sit on different nodes, and the scheduler "
            "moves them: remote memory is slower, so figures change with where they landed",
            "run on one node: numactl --cpunodebind=0 --membind=0 hvbench run ...",
        ),
    ]


def _irqbalance() -> Condition:
    pids = [p.pid for p in processes(["name"]) if p.info.get("name") == "irqbalance"]
    return Condition(
        "irqbalance",
        f"running (pid {pids[0]})" if pids else "not running",
        "the host's processes",
        not pids,
        "it moves interrupts between CPUs every 10 s: network and disk figures change when "
        "a device's interrupts move to or from the CPU an instance runs on",
        "systemctl stop irqbalance for the run (pyperf system tune does the same), and start "
        "it again afterwards",
    )


def _swap(h: _Host) -> Condition:
    meminfo = {}
    for line in (_read(h.proc / "meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            meminfo[key] = int(rest.split()[0]) << 10
    swappiness = _read(h.proc / "sys/vm/swappiness")
    src = f"{h.proc / 'meminfo'}, {h.proc / 'sys/vm/swappiness'}"
    if "SwapTotal" not in meminfo:
        return Condition("swap", None, src)
    total, used = meminfo["SwapTotal"], meminfo["SwapTotal"] - meminfo.get("SwapFree", 0)
    value = "none" if total == 0 else f"{used >> 20} MiB of {total >> 20} MiB used"
    return Condition(
        "swap",
        f"{value}, swappiness {swappiness}",
        src,
        used == 0,
        "pages of instances or of the host are swapped out and back in during samples: "
        "figures include disk IO and faults the workload did not ask for",
        "swapoff -a && swapon -a (brings the pages back), and give the instances less memory",
    )


def _load(h: _Host, sample: float) -> list[Condition]:
    avg = _read(h.proc / "loadavg")
    stat = str(h.proc / "stat")
    before = read_proc_stat(stat)
    time.sleep(sample)
    after = read_proc_stat(stat)
    delta = {k: after[k] - before[k] for k in after}
    total = sum(delta.values())
    busy = 0.0 if total <= 0 else 1 - (delta["idle"] + delta["iowait"]) / total
    steal = 0.0 if total <= 0 else delta["steal"] / total
    return [
        Condition(
            "load.average",
            None if avg is None else " ".join(avg.split()[:3]),
            str(h.proc / "loadavg"),
        ),
        Condition(
            "load.busy",
            f"{100 * busy:.0f}% busy (steal {100 * steal:.0f}%) over {sample:g} s",
            stat,
            busy <= MAX_BUSY,
            "other work takes CPU, memory bandwidth and caches from the instances: figures "
            "vary with it",
            "wait for the host to be idle, or stop what runs on it",
        ),
    ]


def _kvm(h: _Host) -> list[Condition]:
    loaded = [m for m in KVM_MODULES if (h.sys / "module" / m).is_dir()]
    nested = {
        m: v for m in loaded if (v := _read(h.sys / "module" / m / "parameters/nested")) is not None
    }
    return [
        Condition("kvm.module", ", ".join(loaded) or "none loaded", str(h.sys / "module")),
        Condition(
            "kvm.nested",
            ", ".join(f"{m}: {v}" for m, v in nested.items()) or None,
            str(h.sys / "module/kvm_*/parameters/nested"),
        ),
    ]


def tunable(sys: Path = SYS) -> list[Condition]:
    """The conditions whose files ``hvbench host tune`` writes (``Condition.tune``)."""
    h = _Host(sys, PROC)
    return [*_cpufreq(h), _turbo(h), *_ksm(h), *_thp(h)]


def check(sample: float = 0.5, sys: Path = SYS, proc: Path = PROC) -> list[Condition]:
    """Every condition: CPU, memory, interrupts and swap, then the load, sampled over
    ``sample`` seconds, and KVM."""
    h = _Host(sys, proc)
    paranoid = proc / "sys/kernel/perf_event_paranoid"
    return [
        *_cpufreq(h),
        _turbo(h),
        *_cstates(h),
        *_smt(h),
        *_ksm(h),
        *_thp(h),
        *_numa(h),
        _irqbalance(),
        _swap(h),
        Condition("perf_event_paranoid", _read(paranoid), str(paranoid)),
        *_load(h, sample),
        *_kvm(h),
    ]
