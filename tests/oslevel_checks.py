"""What the container and gVisor tests share: a small study through the real runner, and the
check that a run left nothing of its containers behind."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from guest_fixtures import GuestRun
from polling import wait_for
from run_checks import CPU
from workload_env import run_workload

from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.oslevel import OciDriver
from hvbench.host.network import PREFIX
from hvbench.host.process import processes
from hvbench.host.resources import STATE_ROOT, resource_name
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads.migration import Migration, MigrationSettings
from hvbench.workloads.snapshot import Snapshot, SnapshotSettings

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


def run_study(
    platforms: str, instances: str = "1", workloads: str = WORKLOADS
) -> tuple[Store, str]:
    """A quick run of the workloads (cpu, disk and net) on the platforms with these instance
    counts (one group of instances each, in one run); returns the store and the run id."""
    text = (
        f"name: oslevel-test\nplatforms:\n{platforms}workloads:\n{workloads}"
        f"instances: [{instances}]\nrepetitions: 1\n"
    )
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(text, "t"), quick=True))
    session.run()
    return store, session.run_id


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
    named = resource_name(run_id)
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line for line in netns.splitlines() if named in line]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [line for line in loops.splitlines() if run_id in line]
    found += [line for line in Path("/proc/mounts").read_text().splitlines() if run_id in line]
    found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{named}-*")]
    found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"{named}-*")]
    found += [
        str(p) for p in (STATE_ROOT / run_id, Path("/var/tmp/hvbench") / run_id)
        if p.exists()
    ]  # fmt: skip
    for proc in processes(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if run_id in cmdline:
            found.append(f"process {proc.pid}: {cmdline[:120]}")
    return found


KILLED_WORKLOAD = "{name: cpu, suite: micro, integer: {duration: 60}}"


def runtime_runs(run_id: str, command: str) -> bool:
    """Whether the container runtime runs ``command`` in one of the run's containers: its
    ``exec`` (``<runtime> ... exec ... hvb-<run>-<instance>-<pid> [env LC_ALL=...] <command>
    ...``: the fixed locale's ``toolenv.in_locale`` before it) waits on the host for as long as
    the command runs."""
    prefix = f"{resource_name(run_id)}-"
    for proc in processes(["cmdline"]):
        argv = proc.info["cmdline"] or []
        named = [i for i, a in enumerate(argv) if a.startswith(prefix)]
        if "exec" in argv and any(command in argv[i + 1 :] for i in named):
            return True
    return False


def cleaned_up(run_id: str) -> None:
    """``hvbench cleanup`` of a killed run: it names the run, and nothing of it is left."""
    cleanup = subprocess.run(
        [sys.executable, "-m", "hvbench", "cleanup", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run_id in [r["run"] for r in json.loads(cleanup.stdout)]
    assert container_leftovers(run_id) == []


def started_run(study: Path) -> tuple[subprocess.Popen, str]:
    """``hvbench run`` of the study started, and its run id (its first line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hvbench", "run", str(study)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return proc, proc.stdout.readline().split()[1]


def killed_run_is_cleaned_up(
    platform: str,
    tmp_path: Path,
    workload: str = KILLED_WORKLOAD,
    command: str = "stress-ng",
    runs: Callable[[str, str], bool] = runtime_runs,
) -> list[str]:
    """SIGKILL ``hvbench run`` while its container runs the workload's ``command``; ``hvbench
    cleanup`` must then remove the container (its processes, cgroups, state and mounts) and all
    else of the run, the loop devices it mounted included (a root filesystem image's is backed
    by the cache). ``runs`` says whether a container of the run runs the command (by default:
    its runtime's ``exec`` of it). Returns those loop devices."""
    study = tmp_path / "study.yaml"
    study.write_text(
        f"name: killed\nplatforms:\n  p: {platform}\nworkloads:\n  - {workload}\nrepetitions: 1\n"
    )
    proc, run_id = started_run(study)

    def running() -> bool:
        assert proc.poll() is None, f"hvbench run ended before a container ran {command}"
        return runs(run_id, command)

    # a root filesystem image may be built first
    wait_for(running, 600, f"{command} running in a container of run {run_id}", interval=0.2)
    proc.kill()
    proc.wait()
    assert container_leftovers(run_id) != []
    mounts = Path("/proc/mounts").read_text().splitlines()
    loops = [m.split()[0] for m in mounts if run_id in m and m.startswith("/dev/loop")]
    cleaned_up(run_id)
    attached = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME"],
                              capture_output=True, text=True).stdout.split()  # fmt: skip
    assert not set(loops) & set(attached), loops
    return loops


def exited(pid: int) -> bool:
    """Whether the process has exited: gone, or a zombie the host's init has yet to reap (a
    container's init is reparented to it)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return True


def checkpoint_moves_and_restores(d: OciDriver, guest_run: GuestRun, exec_killed: bool) -> None:
    """The runtime's checkpoint and restore, as a migration (the dirtier, started through the
    init's spawner, writing all through it) and as a snapshot: each time a new container takes
    over with what the old one held in memory and on its data disk, on the run's network; the
    image directory goes, and the ledger holds the one container that runs. ``exec_killed``:
    a background process that ``exec`` started is gone after the restore (runsc; runc's
    ``exec`` cannot leave one: it waits for the process's output to close)."""
    [inst] = d.start(1, time.monotonic() + 180).instances
    try:
        fill = f"head -c 16777216 /dev/urandom > /tmp/mem && echo kept > {DATA_MOUNT}/probe"
        assert inst.exec(["sh", "-c", fill], 60).ok
        digest = inst.exec(["md5sum", "/tmp/mem"], 30).text()
        if exec_killed:
            assert inst.exec(["sh", "-c", "sleep 600 &"], 30).ok
        assert inst.init is not None
        first = inst.init.pid
        migration = Migration(MigrationSettings(name="migration", dirty_rate=1 << 20))
        [moved] = run_workload(migration, [inst], guest_run.network)
        m = {x.name: x.value for x in moved.metrics}
        assert inst.init.pid != first and exited(first)
        assert m["migration.wrong_pages"] == 0, "every page the dirtier wrote was restored"
        # stop-and-copy: the whole move is downtime; total_s is rounded to the millisecond
        # (a relative 1e-3 failed a 0.4 s move), downtime_ms to the microsecond
        assert m["migration.downtime_ms"] == pytest.approx(m["migration.total_s"] * 1000, abs=0.501)
        assert m["migration.transferred_mib"] > 32 + 16, "the dirtier's buffer and /tmp/mem"
        assert m["migration.passes"] == 1
        assert m["migration.guest_pause_ms"] > 0
        if exec_killed:
            assert "sleep 600" not in inst.exec(["ps", "-o", "args"], 30).text()

        second = inst.init.pid
        [restored] = run_workload(Snapshot(SnapshotSettings(name="snapshot")), [inst],
                                  guest_run.network)  # fmt: skip
        s = {x.name: x.value for x in restored.metrics}
        assert inst.init.pid != second and exited(second)
        assert 16 < s["snapshot.size_mib"] < 256, "the tmpfs file is in the image"
        assert s["snapshot.save_s"] > 0 and s["snapshot.restore_s"] > 0
        assert not list(guest_run.workdir.glob("*.checkpoint*")), "the images go once restored"
        live = [r for r in guest_run.ledger.live if r.kind == "container"]
        assert [r.name for r in live] == [inst.container_id]
        assert inst.exec(["md5sum", "/tmp/mem"], 30).text() == digest
        assert inst.exec(["cat", f"{DATA_MOUNT}/probe"], 30).text() == "kept\n"
        assert f"198.18.0.10/{PREFIX}" in inst.exec(["ip", "-4", "-o", "addr"], 30).text()
    finally:
        d.stop([inst])
    assert not inst.alive()
