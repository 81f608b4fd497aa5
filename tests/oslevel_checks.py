"""What the container and gVisor tests share: a small study through the real runner, and the
check that a run left nothing of its containers behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study

CPU = (
    "{name: cpu, suite: micro, integer: {duration: 1}, float: {duration: 1}, memory: {duration: 1},"
    " branchy: {duration: 1}}"
)
WORKLOADS = f"""\
  - {CPU}
  - {{name: disk, tool: dd, size: 16M}}
  - {{name: net, tool: iperf3, seconds: 1, parallel: 1, directions: [in, out]}}
"""
EXPECTED = (
    "cpu.branchy.primes_events_per_s",
    "disk.dd.write_mbps",
    "disk.dd.read_mbps",
    "net.iperf3.outbound_gbps",
    "net.iperf3.inbound_gbps",
)


def run_study(platforms: str, instances: str = "1") -> tuple[Store, str]:
    """A quick run of cpu, disk and net on the platforms with these instance counts (one group
    of instances each, in one run); returns the store and the run id."""
    text = (
        f"name: oslevel-test\nplatforms:\n{platforms}workloads:\n{WORKLOADS}"
        f"instances: [{instances}]\nrepetitions: 1\n"
    )
    store = Store()
    runner = Runner.create(parse_study(text, "t"), store, quick=True)
    runner.run()
    return store, runner.run_id


def failures(store: Store, run_id: str) -> list[str]:
    return [s.error or "" for s in store.samples(run_id) if s.status != "ok"]


def metric_values(store: Store, run_id: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for row in store.metric_rows(run_id):
        values.setdefault(row.name, []).append(row.value)
    return values


def container_leftovers(run_id: str) -> list[str]:
    """Namespaces, loop devices, mounts, cgroups, directories and processes (the runtime's, which
    name the run's state directory) of a run."""
    tag = run_id[-8:]
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line for line in netns.splitlines() if tag in line]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [line for line in loops.splitlines() if run_id in line]
    found += [line for line in Path("/proc/mounts").read_text().splitlines() if run_id in line]
    found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/hvb-{tag}-*")]
    found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"hvb-{tag}-*")]
    found += [
        str(p) for p in (Path("/run/hvbench") / run_id, Path("/var/tmp/hvbench") / run_id)
        if p.exists()
    ]  # fmt: skip
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if run_id in cmdline:
            found.append(f"process {proc.pid}: {cmdline[:120]}")
    return found


KILLED_WORKLOAD = "{name: cpu, suite: micro, integer: {duration: 60}}"


def killed_run_is_cleaned_up(
    platform: str, tmp_path: Path, workload: str = KILLED_WORKLOAD
) -> list[str]:
    """SIGKILL ``hvbench run`` while its container runs a command; ``hvbench cleanup`` must then
    remove the container (its processes, cgroups, state and mounts) and all else of the run,
    the loop devices it mounted included (a root filesystem image's is backed by the cache).
    Returns those loop devices."""
    study = tmp_path / "study.yaml"
    study.write_text(
        f"name: killed\nplatforms:\n  p: {platform}\nworkloads:\n  - {workload}\nrepetitions: 1\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hvbench", "run", str(study)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    run_id = proc.stdout.readline().split()[1]
    deadline = time.monotonic() + 600  # a root filesystem image may be built first
    while not list(Path("/sys/fs/cgroup").glob(f"*/hvb-{run_id[-8:]}-*")):
        assert time.monotonic() < deadline and proc.poll() is None, "no container started"
        time.sleep(0.5)
    time.sleep(3)  # into the workload's command
    proc.kill()
    proc.wait()
    assert container_leftovers(run_id) != []
    mounts = Path("/proc/mounts").read_text().splitlines()
    loops = [m.split()[0] for m in mounts if run_id in m and m.startswith("/dev/loop")]
    cleanup = subprocess.run(
        [sys.executable, "-m", "hvbench", "cleanup", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run_id in [r["run"] for r in json.loads(cleanup.stdout)]
    assert container_leftovers(run_id) == []
    attached = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME"],
                              capture_output=True, text=True).stdout.split()  # fmt: skip
    assert not set(loops) & set(attached), loops
    return loops
