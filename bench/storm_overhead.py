"""hvbench's own cost in a boot storm: per driver and instance count, the seconds per instance
hvbench spends outside the platform's own work, beside what the platform's own tool takes for
the same.

Not a test: it prints figures. For each count N, ``--repeat`` times, in turn:

- hvbench: a group of N instances started (``Driver.start``: set-up, start, readiness) and
  stopped (``Driver.stop``: stop, release, bookkeeping), as a run does for each group;
- by hand: N of the same started at once with the platform's own tool and removed with it:
  runc (``driver: container``) ``runc run --detach`` of the same bundle (the same root, mounts
  and limits; a network namespace of runc's own instead of the run's), then
  ``runc delete --force``; an engine (docker, podman) its ``run --detach`` of the same image
  with the same limits, then its removal (``rm --force``; Podman's with ``--time 0``). Each
  step is the wall time from the first command's start until the last returned.

Per instance: hvbench's wall time (start + stop) over N; the tool's; hvbench's own, the first
minus the second; and that as a share of the tool's (the goal: at most 20%, and about the same
at every N, i.e. hvbench's cost grows linearly with the count). Medians over the repetitions.
Wall-clock on a shared host: other work moves every figure, so read the share at the larger
counts, where it is least noisy. What the platform opens once (the guest image's tree, an
engine's daemon and image) is made before the first group and in neither figure.

    .venv/bin/python bench/storm_overhead.py [--drivers container,docker,podman]
        [--counts 1,8,32,64,128,256] [--repeat 3] [--memory 256M]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from footprint import run_scope

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Driver, Needs
from hvbench.drivers.engine import EngineDriver, EngineInstance
from hvbench.drivers.oslevel import OciDriver, OciInstance
from hvbench.host.resources import Ledger, resource_name

DEADLINE_S = 900.0


class Storm(NamedTuple):
    """Wall seconds of one group of N: its start and its stop."""

    start: float
    stop: float

    @property
    def total(self) -> float:
        return self.start + self.stop


def all_at_once(argvs: Sequence[Sequence[str]]) -> float:
    """Run every command at once, each in a thread of its own (as hvbench starts a group), with
    no pipes (a detached container would hold them open); the wall seconds until the last
    returned. SystemExit naming the first that failed."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
             "stderr": subprocess.DEVNULL}  # fmt: skip
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(argvs))) as pool:
        done = list(pool.map(lambda argv: subprocess.run(argv, **quiet), argvs))
    seconds = time.monotonic() - t0
    for proc in done:
        if proc.returncode != 0:
            raise SystemExit(f"{shlex.join(proc.args)} failed: exit {proc.returncode}")
    return seconds


def through_hvbench(driver: Driver, count: int) -> Storm:
    """One group of ``count`` started and stopped by the driver."""
    t0 = time.monotonic()
    started = driver.start(count, time.monotonic() + DEADLINE_S)
    t1 = time.monotonic()
    driver.stop(started.instances)
    return Storm(t1 - t0, time.monotonic() - t1)


def runc_by_hand(driver: OciDriver, ledger: Ledger, count: int) -> Storm:
    """``runc run --detach`` of ``count`` bundles at once, then ``runc delete --force`` of
    them: the driver's spec of each instance, with a network namespace of runc's own."""
    runtime = list(driver.opened.runtime)
    runs, deletes, made = [], [], []
    for index in range(count):
        inst = OciInstance("hand", index, 1, driver.settings.memory >> 20)
        inst.root = str(driver.opened.root)
        inst.container_id = resource_name(ledger.run_id, inst.name)
        inst.cgroups_path = f"/{inst.container_id}"
        spec = driver.spec(inst, "unused", None)
        spec["linux"]["namespaces"] = [
            {"type": kind["type"]} for kind in spec["linux"]["namespaces"]
        ]
        bundle = driver.workdir / f"hand-{index}"
        made.append(ledger.add("path", str(bundle)))
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(spec))
        made.append(ledger.add("container", inst.container_id, runtime=runtime))
        runs.append([*runtime, "run", "--detach", "--bundle", str(bundle), inst.container_id])
        deletes.append([*runtime, "delete", "--force", inst.container_id])
    storm = Storm(all_at_once(runs), all_at_once(deletes))
    for res in reversed(made):
        ledger.release(res)
    return storm


def engine_by_hand(driver: EngineDriver, ledger: Ledger, count: int) -> Storm:
    """The engine's ``run --detach`` of ``count`` containers at once, the very command the
    driver runs (its image of the guest tree, its limits and flags), then its removal of them
    (``EngineDriver.remove``)."""
    runs, removes, made = [], [], []
    for index in range(count):
        inst = EngineInstance("hand", index, 1, driver.settings.memory >> 20)
        inst.container_id = resource_name(ledger.run_id, inst.name)
        runs.append(driver.run_argv(inst, None))
        remove = [*inst.cli, *driver.remove, inst.container_id]
        made.append(ledger.add("command", inst.container_id, argv=remove))
        removes.append(remove)
    storm = Storm(all_at_once(runs), all_at_once(removes))
    for res in made:
        ledger.forget(res)  # removed by the last command
    return storm


BY_HAND: dict[type, Callable[..., Storm]] = {OciDriver: runc_by_hand, EngineDriver: engine_by_hand}
"""The platform's own tool, per kind of driver."""


def by_hand_for(driver: Driver) -> Callable[[Driver, Ledger, int], Storm] | None:
    """What makes the driver's instances by hand, or None for a driver not in ``BY_HAND``."""
    return next((f for kind, f in BY_HAND.items() if isinstance(driver, kind)), None)


def measure(name: str, counts: list[int], repeat: int, memory: str) -> None:
    """Print the table's rows for one driver, one a count."""
    settings = DRIVERS[name].settings_model.model_validate({"driver": name, "memory": memory})
    with run_scope("storm") as (ledger, network, workdir):
        driver = DRIVERS[name](name, settings, Needs(), ledger, network, workdir)
        by_hand = by_hand_for(driver)
        if by_hand is None:
            raise SystemExit(f"{name}: no platform tool to compare with here")
        try:
            driver.open()
            network.up()
            for count in counts:
                ours, theirs = [], []
                for _ in range(repeat):
                    ours.append(through_hvbench(driver, count))
                    theirs.append(by_hand(driver, ledger, count))
                print(row(name, count, ours, theirs), flush=True)
        finally:
            driver.close()


def row(name: str, count: int, ours: list[Storm], theirs: list[Storm]) -> str:
    """hvbench's and the tool's wall seconds per instance, hvbench's own, its share."""
    hv = statistics.median(s.total for s in ours) / count
    tool = statistics.median(s.total for s in theirs) / count
    start = statistics.median(s.start for s in ours) / count
    stop = statistics.median(s.stop for s in ours) / count
    own = hv - tool
    return (
        f"{name:10} {count:5} {hv:9.3f} {start:8.3f} {stop:8.3f} {tool:9.3f} {own:9.3f} "
        f"{100 * own / tool:7.0f}%"
    )


HEADER = (
    f"{'driver':10} {'N':>5} {'hvbench':>9} {'start':>8} {'stop':>8} {'tool':>9} {'own':>9} "
    f"{'own/tool':>8}\n"
    f"{'':10} {'':5} {'s/inst':>9} {'s/inst':>8} {'s/inst':>8} {'s/inst':>9} {'s/inst':>9}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drivers", default="container")
    parser.add_argument("--counts", default="1,8,32,64,128,256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory", default="256M")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print(HEADER, flush=True)
    for name in args.drivers.split(","):
        if not DRIVERS[name].check().ok:
            print(f"{name}: {DRIVERS[name].check().detail}; left out")
            continue
        measure(name, counts, args.repeat, args.memory)


if __name__ == "__main__":
    main()
