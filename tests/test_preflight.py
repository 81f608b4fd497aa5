"""Before the first sample (issue 52, items 3 and 4): one measuring run holds the host, and a
study's platforms are checked as ``hvbench doctor`` checks them, each that cannot run here
refused in one line with doctor's fix or left out with ``--skip-unavailable``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hvbench.host.hold import HostBusy, HostHold, holder
from hvbench.store import Store

HVBENCH = Path(sys.executable).parent / "hvbench"
STUDY = """\
name: preflight
baseline: {baseline}
platforms:
  native: {{driver: native}}
  xen-pv: {{driver: xen, mode: pv, memory: 256M}}
workloads:
  - {{name: disk, tool: dd, size: 64M}}
repetitions: 1
"""
"""Xen runs only in a Xen dom0, which this host is not: doctor says so, with the fix."""


def run(tmp_path: Path, *args: str, baseline: str = "native") -> subprocess.CompletedProcess:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(baseline=baseline))
    db = f"sqlite:///{tmp_path / 'results.db'}"
    argv = [str(HVBENCH), "run", str(path), "--json", "--no-report", "--db", db, *args]
    env = os.environ | {"HVBENCH_STATE_DIR": str(tmp_path / "state")}  # no other run holds it
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_platform_this_host_cannot_run_is_refused_before_anything_is_stored(tmp_path: Path):
    """On 6bbaf15, as the issue reports, the run went on, every sample of the platform failing
    ('runsc is not installed', six minutes long)."""
    done = run(tmp_path)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "cannot run on this host: platform xen-pv: " in line and "fix: " in line, line
    assert line.endswith("or leave it out: hvbench run --skip-unavailable"), line
    assert Store(f"sqlite:///{tmp_path / 'results.db'}").runs() == []


def test_skip_unavailable_leaves_it_out_in_one_line(tmp_path: Path):
    done = run(tmp_path, "--skip-unavailable", "--quick")
    assert done.returncode == 0, done.stderr
    said = [ln for ln in done.stderr.splitlines() if "leaving out" in ln]
    assert len(said) == 1 and "platform xen-pv: " in said[0], done.stderr
    (stored,) = Store(f"sqlite:///{tmp_path / 'results.db'}").runs()
    assert "xen-pv" not in stored.study_text  # the study as it ran


def test_an_unavailable_baseline_is_refused_even_when_skipping(tmp_path: Path):
    done = run(tmp_path, "--skip-unavailable", baseline="xen-pv")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "the baseline cannot run on this host: platform xen-pv: " in line, line


def test_one_hold_at_a_time(tmp_path: Path):
    """A second hold is refused naming the first; let go, it is free; with ``wait`` a second
    waits for the first, told once who it waits for."""
    first = HostHold.take("run-1", "study one", root=tmp_path)
    assert holder(tmp_path) == first.holder
    with pytest.raises(HostBusy, match=r"^run run-1 \(study 'study one', pid \d+, since 20"):
        HostHold.take("run-2", "two", root=tmp_path)
    told: list[object] = []
    taken: list[HostHold] = []
    waiting = threading.Thread(
        target=lambda: taken.append(HostHold.take("run-3", "three", True, told.append, tmp_path))
    )
    waiting.start()
    deadline = time.monotonic() + 30
    while not told:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert told == [first.holder] and not taken
    first.release()
    waiting.join(timeout=30)
    (third,) = taken
    assert holder(tmp_path) == third.holder and third.holder.run_id == "run-3"
    third.release()
    third.release()  # once; later calls do nothing
    assert holder(tmp_path) is None


def test_a_killed_holder_lets_go(tmp_path: Path):
    """The kernel lets go of a SIGKILLed holder's lock: no stale file blocks the next run."""
    code = (
        "import time; from pathlib import Path; from hvbench.host.hold import HostHold; "
        f"h = HostHold.take('run-k', 'k', root=Path({str(tmp_path)!r})); "
        "print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    assert holder(tmp_path) is not None
    proc.kill()
    proc.wait(timeout=30)
    assert holder(tmp_path) is None
    HostHold.take("run-next", "next", root=tmp_path).release()


def test_a_look_at_the_hold_never_makes_a_run_refuse(tmp_path: Path):
    """``holder`` (doctor's look) takes nothing: runs taken while two lookers look without a
    pause never find the host busy."""
    stop = threading.Event()

    def look() -> None:
        while not stop.is_set():
            holder(tmp_path)

    lookers = [threading.Thread(target=look) for _ in range(2)]
    for t in lookers:
        t.start()
    try:
        for i in range(200):
            HostHold.take(f"run-{i}", "s", root=tmp_path).release()
    finally:
        stop.set()
        for t in lookers:
            t.join()
