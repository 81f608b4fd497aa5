"""Storms of runc containers for real: a group's instances stop all at once, the ledger records
them in batches that many threads write at once, and a run killed in the middle of a storm's
start leaves ``hvbench cleanup`` all it needs to remove everything."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

import pytest
from conftest import require
from guest_fixtures import GuestRun
from oslevel_checks import cleaned_up, container_leftovers
from polling import wait_for

from hvbench.drivers.base import Needs, at_once
from hvbench.drivers.container import ContainerDriver, ContainerSettings
from hvbench.drivers.oslevel import OciInstance
from hvbench.host.resources import STATE_ROOT, Ledger

STORM = 8
"""Instances of the storms the tests start: more than one core's worth of work on any host."""

needs_runc = pytest.mark.usefixtures("_runc")


@pytest.fixture
def _runc() -> None:
    require(ContainerDriver.check().ok, "runc (apt-get install runc)")


class Together(ContainerDriver):
    """The container driver, whose every instance's stop must have begun before any goes on:
    a stop that ends one instance after another never gets past the barrier."""

    def __init__(self, guest_run: GuestRun, count: int, fail: int | None = None) -> None:
        settings = ContainerSettings(driver="container", memory="128M")
        super().__init__("c", settings, Needs(), guest_run.ledger, guest_run.network,
                         guest_run.workdir)  # fmt: skip
        self.barrier = threading.Barrier(count)
        self.fail = fail
        """The index of an instance whose end fails (after the barrier)."""

    def _end(self, inst: OciInstance) -> None:
        self.barrier.wait(timeout=120)
        if inst.index == self.fail:
            raise RuntimeError(f"{inst.name} would not end")
        super()._end(inst)


def run_netns(guest_run: GuestRun) -> list[str]:
    """The instances' network namespaces of the run that are on the host."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    prefix = f"{guest_run.network.netns}-i"
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


@needs_runc
@pytest.mark.guest
def test_a_storm_stops_all_at_once_and_leaves_only_what_the_platform_holds(guest_run: GuestRun):
    d = Together(guest_run, STORM)
    insts = d.start(STORM, time.monotonic() + 300).instances
    assert len(run_netns(guest_run)) == STORM
    assert sorted(i.address or "" for i in insts)[:2] == ["198.18.0.10", "198.18.0.11"]
    d.stop(insts)
    assert not any(i.alive() or i.resources for i in insts)
    assert run_netns(guest_run) == [], "the group's namespaces went together"
    held = {r.name for r in d.resources} | {guest_run.network.netns}
    assert {r.name for r in guest_run.ledger.live} == held
    d.close()


@needs_runc
@pytest.mark.guest
def test_an_instance_that_fails_to_stop_keeps_none_of_the_others_from_it(guest_run: GuestRun):
    d = Together(guest_run, STORM, fail=2)
    insts = d.start(STORM, time.monotonic() + 300).instances
    with pytest.raises(RuntimeError, match="c-2 would not end"):
        d.stop(insts)
    # what each held is released, the one that would not end included
    assert not any(i.resources for i in insts) and run_netns(guest_run) == []
    assert not any(i.alive() for i in insts if i.index != 2)
    d.close()


def test_a_ledger_written_by_many_threads_at_once_reads_back_whole(tmp_path: Path):
    """Every thread's entries are in the journal once its add returns (what ``hvbench
    cleanup`` reads), whichever thread's sync wrote them to disk."""
    ledger = Ledger("threads", tmp_path)

    def instance(index: int) -> None:
        made = ledger.add_many(
            [("netns", f"ns-{index}", {}), ("path", str(tmp_path / f"b-{index}"), {})]
        )
        assert {r.id for r in made} <= {r.id for r in Ledger("threads", tmp_path).live}
        if index % 2:
            ledger.forget(made[1])

    assert at_once(range(64), instance) == []
    replayed = Ledger("threads", tmp_path).live
    assert sorted(r.name for r in replayed) == sorted(
        [f"ns-{i}" for i in range(64)] + [str(tmp_path / f"b-{i}") for i in range(0, 64, 2)]
    )
    assert [r.id for r in replayed] == [r.id for r in ledger.live]


class _Interrupted(Exception):
    """What this test's signal raises in the main thread, as Ctrl-C raises KeyboardInterrupt."""


def _interrupted(signum: int, frame: object) -> NoReturn:
    raise _Interrupted


def _waiting_in_at_once() -> bool:
    """Whether the main thread waits in at_once for its threads' futures, past starting them."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    calls = []
    while frame is not None:
        calls.append((Path(frame.f_code.co_filename).parent.name, frame.f_code.co_name))
        frame = frame.f_back
    return ("futures", "wait") in calls and any(name == "at_once" for _, name in calls)


def test_an_interrupted_at_once_raises_only_once_its_threads_have_ended():
    """An interrupt while a group starts reaches the run's cleanup only after every instance's
    thread has ended: before, the cleanup released a namespace that a thread had recorded and
    then made, and it was left (CI, an interrupted run)."""
    ended = threading.Event()

    def instance(index: int) -> None:
        wait_for(_waiting_in_at_once, timeout=30, what="at_once waiting for its threads")
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
        time.sleep(0.3)  # the thread is still making what it recorded
        ended.set()

    previous = signal.signal(signal.SIGUSR1, _interrupted)
    try:
        with pytest.raises(_Interrupted):
            at_once([0], instance)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert ended.is_set()


def _containers_begun(run_id: str) -> int:
    """Containers the run's ledger has recorded: each one's runtime is about to start it."""
    journal = STATE_ROOT / run_id / "ledger.jsonl"
    lines = journal.read_text().splitlines() if journal.exists() else []
    return sum('"kind": "container"' in line for line in lines)


@needs_runc
@pytest.mark.guest
def test_a_run_killed_mid_storm_leaves_nothing_after_cleanup(tmp_path: Path):
    count = 4 * STORM
    study = tmp_path / "storm.yaml"
    study.write_text(
        "name: killed-storm\nplatforms:\n  c: {driver: container, memory: 128M}\n"
        f"workloads:\n  - {{name: boot}}\ninstances: [{count}]\nrepetitions: 1\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hvbench", "run", "--wait", "--no-report", str(study)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().split()[1]

    def begun() -> int:
        assert proc.poll() is None, "hvbench run ended before its storm began"
        return _containers_begun(run_id)

    # the namespaces and bundles of all are made; the runtime starts the first containers
    wait_for(begun, 600, f"the storm of run {run_id} starting", interval=0.02)
    proc.kill()
    proc.wait()
    assert container_leftovers(run_id) != []
    cleaned_up(run_id)
