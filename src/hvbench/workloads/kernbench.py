"""kernbench: compile a real source tree with ``make -jN`` as kernbench does.

Per run: elapsed, user and system time, %CPU, context switches and sleeps, the fields of
kernbench's own ``time -f "%e %U %S %P %c %w"`` (its "context switches" are the involuntary
ones, %c; its "sleeps" the voluntary ones, %w), measured by hvbench-clock rather than GNU time:
the same monotonic clock, to the nanosecond, as every other timed job (GNU time's elapsed time
is the wall clock's, printed to 10 ms). As the wiki did, there is one cold-cache run (``make
clean``, ``sync``, the page cache dropped) and then warm-cache runs (``make clean`` only);
the warm runs are also summarised as mean and standard deviation.

Trees, both from Debian's linux-source package (the tarball under /usr/src inside the instance,
or a tree unpacked from it there):

- ``linux``: the kernel with ``allnoconfig``, as in the seeds ("make clean && make allnoconfig
  && time make"); needs a full userland (compiler, make, bc, flex, bison).
- ``subcmd``: the kernel tree's tools/lib/subcmd, perf's small sub-command library with a plain
  Makefile: a real C project that builds in seconds, for ``--quick`` and tests.

The tree is unpacked and configured in ``prepare`` (untimed), under ``workdir`` on the
instance's root filesystem, which is what the seeds' compiles used.
"""

from __future__ import annotations

import re
import statistics
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import PositiveInt

from hvbench.errors import InstanceError
from hvbench.workloads.base import Context, Metric, Outcome, RawOutput, WorkloadSettings
from hvbench.workloads.clock import clock, parse_timing
from hvbench.workloads.common import SMALL_COMMAND_S, ScratchWorkload, combined, keep, run

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("elapsed_s", "s", False),
    ("user_s", "s", False),
    ("system_s", "s", False),
    ("cpu_pct", "%", True),
    ("context_switches", "count", False),
    ("sleeps", "count", False),
)
SOURCE_DIR = "/usr/src"
_SOURCE = re.compile(r"^linux-source-([0-9.]+)(\.tar\.(?:xz|bz2|gz))?$")
"""Debian's tarball, or a tree unpacked from it beforehand (an image builder may do that at
native speed: unpacking 140 MB of xz under TCG takes minutes)."""
QUICK_RUNS = 2
DROP_CACHES = ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"]
"""A fixed command line: nothing is interpolated into it."""


class KernbenchSettings(WorkloadSettings):
    name: Literal["kernbench"]
    tree: Literal["linux", "subcmd"] = "linux"
    """What to compile; --quick always compiles ``subcmd``."""
    jobs: PositiveInt | None = None
    """make -j; default 4 per vCPU, kernbench's "optimal" load (the wiki: -j 8 on 2 cores)."""
    runs: PositiveInt = 5
    """Warm-cache runs after the cold one (kernbench's default is 5)."""
    workdir: str = "/var/tmp"
    """Directory inside the instance where the tree is unpacked (not a tmpfs)."""

    def label(self) -> str:
        return "kernbench" if self.tree == "linux" else f"kernbench tree={self.tree}"


def parse_build(text: str) -> dict[str, float]:
    """kernbench's fields of a build, from the last hvbench-clock line in ``text``."""
    t = parse_timing(text, "kernbench")
    return {
        "elapsed_s": t.seconds,
        "user_s": t.user,
        "system_s": t.system,
        "cpu_pct": 100 * t.cpu_seconds / t.seconds,
        "context_switches": t.involuntary,
        "sleeps": t.voluntary,
    }


def summarise(cold: dict[str, float] | None, warm: list[dict[str, float]]) -> list[Metric]:
    """Cold run, each warm run, and the warm runs' mean and standard deviation."""
    metrics: list[Metric] = []
    for name, unit, better in FIELDS:
        headline = name == "elapsed_s"
        if cold is not None:
            metrics.append(
                Metric(f"kernbench.cold.{name}", cold[name], unit, better, headline=headline)
            )
        values = [r[name] for r in warm]
        metrics += [
            Metric(f"kernbench.warm.run{i}.{name}", v, unit, better)
            for i, v in enumerate(values, 1)
        ]
        if values:
            mean = statistics.fmean(values)
            metrics.append(Metric(f"kernbench.warm.{name}", mean, unit, better, headline=headline))
        if len(values) > 1:
            sd = statistics.stdev(values)
            metrics.append(Metric(f"kernbench.warm.{name}_sd", sd, unit, False))
    return metrics


class Kernbench(ScratchWorkload[KernbenchSettings]):
    name: ClassVar[str] = "kernbench"
    settings_model = KernbenchSettings
    needs_userland: ClassVar[bool] = True

    def __init__(self, settings: KernbenchSettings) -> None:
        super().__init__(settings)
        self._trees: dict[str, str] = {}

    def tools(self) -> list[str]:
        return ["make", "gcc", str(clock()), "tar", "xz", "bc", "flex", "bison", "perl"]

    def packages(self) -> list[str]:
        """The compiler and what a kernel build runs, and the source tree it compiles."""
        return ["build-essential", "bc", "flex", "bison", "libelf-dev", "libssl-dev", "perl",
                "xz-utils", "linux-source"]  # fmt: skip

    def scratch_parent(self, instance: Instance) -> str:
        return self.settings.workdir

    def _tree(self, quick: bool) -> str:
        return "subcmd" if quick else self.settings.tree

    def _make(self, instance: Instance, tree: str, *args: str) -> list[str]:
        top = self._trees[instance.name]
        target = ["-C", f"{top}/tools/lib/subcmd"] if tree == "subcmd" else ["-C", top]
        return ["make", "-s", *target, *args]

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        source, top = _newest_source(instance)
        tree = self._tree(ctx.quick)
        dest = f"{self.scratch(instance)}/{top}"
        if source == top:  # an unpacked tree: copy what is built
            part = "/tools" if tree == "subcmd" else ""
            if part:
                run(instance, ["mkdir", "-p", dest], timeout=SMALL_COMMAND_S)
            run(instance, ["cp", "-a", f"{SOURCE_DIR}/{top}{part}", f"{dest}{part}"], 3600)
        else:
            members = [f"{top}/tools"] if tree == "subcmd" else []
            run(instance, ["tar", "-xf", f"{SOURCE_DIR}/{source}", "-C", self.scratch(instance),
                           *members], timeout=3600)  # fmt: skip
        self._trees[instance.name] = dest
        if tree == "linux":
            run(instance, self._make(instance, tree, "allnoconfig"), timeout=600)

    def _timed_build(
        self, instance: Instance, ctx: Context, cold: bool
    ) -> tuple[dict[str, float], RawOutput]:
        tree = self._tree(ctx.quick)
        run(instance, self._make(instance, tree, "clean"), timeout=600)
        if cold:
            run(instance, DROP_CACHES, timeout=600)
        jobs = self.settings.jobs or 4 * instance.vcpus
        argv = [str(clock()), "-", *self._make(instance, tree, f"-j{jobs}")]
        ctx.barrier()
        result = run(instance, argv, timeout=self.timeout(ctx.quick))
        raw = keep("kernbench", argv, combined(result))
        return parse_build(result.stderr.decode("utf-8", errors="replace")), raw

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        outcome = Outcome()
        cold, raw = self._timed_build(instance, ctx, cold=True)
        outcome.raw.append(raw)
        warm = []
        for _ in range(QUICK_RUNS if ctx.quick else self.settings.runs):
            fields, raw = self._timed_build(instance, ctx, cold=False)
            outcome.raw.append(raw)
            warm.append(fields)
        outcome.metrics = summarise(cold, warm)
        return outcome

    def cleanup(self, instance: Instance, ctx: Context) -> None:
        self._trees.pop(instance.name, None)
        super().cleanup(instance, ctx)

    def estimate_seconds(self, quick: bool) -> float:
        if self._tree(quick) == "subcmd":
            return 15 + (1 + (QUICK_RUNS if quick else self.settings.runs)) * 5
        return 60 + (1 + self.settings.runs) * 240


def _newest_source(instance: Instance) -> tuple[str, str]:
    """(name in /usr/src, top directory) of the newest kernel source in the instance: an
    unpacked tree before a tarball of the same version (Debian's linux-source)."""
    names = run(instance, ["ls", SOURCE_DIR], timeout=SMALL_COMMAND_S).text().split()
    found = sorted(
        (tuple(int(p) for p in m.group(1).split(".") if p), m.group(2) is None, name)
        for name in names
        if (m := _SOURCE.match(name))
    )
    if not found:
        raise InstanceError(
            f"{instance.name}: no linux-source-*.tar.xz in {SOURCE_DIR}; kernbench needs "
            "Debian's linux-source package in the instance"
        )
    name = found[-1][2]
    return name, name.split(".tar.")[0]
