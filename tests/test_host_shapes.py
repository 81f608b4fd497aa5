"""Host shapes (issue 52, item 6): ``hvbench run`` on hosts unlike the one it grew up on, each
made for real here: a disk faster than dd's 2 GiB bound (a loop device over a file in tmpfs,
formatted and mounted as the run's work directory), a slow disk (the block I/O controller's
throttle on the disk native measures), a user's locale (de_DE, fr_FR), two runs at once. Each
asserts the exit code, the figures parsed (samples ok, every metric a number), and nothing
left on the host. A user without root is test_one_line's.

The memory-backed disk's needs the host to itself (``alone``): its speed is the CPU's too. The
others hold a state directory of their own, or measure through a throttle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from locales import LOCALES, users_env
from run_checks import leftovers

from hvbench.host import hold
from hvbench.store import Store
from hvbench.workloads.dd import DdSettings

HVBENCH = Path(sys.executable).parent / "hvbench"
TWO_GIB = 2 << 30

STUDY = """\
name: {name}
baseline: native
platforms:
  native: {{driver: native{native}}}
{more}workloads:
{workloads}
instances: [1]
repetitions: 1
"""
CONTAINER = "  container: {driver: container, vcpus: 1, memory: 1G, disk: {size: 3G}}\n"
DD = "  - {name: disk, tool: dd, size: auto}\n"
"""The default study's dd: sized natively to 1.5 s a pass, at most 2 GiB."""
EVERY_PARSER = (
    "  - {name: cpu, suite: apps, copies: 1, skip: [povray, stockfish, zstd, sqlite, sha256]}\n"
    + DD
    + "  - {name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 1}\n"
)
"""The default study's workloads on the platforms here: every parser the first run reads."""


def study(
    directory: Path, name: str, workloads: str, native: str = "", more: str = CONTAINER
) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, native=native, more=more, workloads=workloads))
    return path


def hvbench_run(
    study_file: Path, db: str, *args: str, env: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen:
    """``hvbench run STUDY --json`` started, its output piped, its state directory (ledgers,
    the host's hold) the study's neighbour ``state``, which no other run on the host holds."""
    argv = [str(HVBENCH), "run", str(study_file), "--json", "--no-report", "--db", db, *args]
    env = (env or dict(os.environ)) | {"HVBENCH_STATE_DIR": str(study_file.parent / "state")}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )  # type: ignore[call-overload]


def ended(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, dict | None, str]:
    """Exit code, the run's JSON (None where it printed none) and stderr."""
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return proc.returncode, json.loads(out) if out.strip() else None, err


def measured(db: str, run: dict, state: Path, work: Path | None = None) -> Store:
    """The run finished with every sample ok and every metric a number, and left nothing on
    the host (``state``, ``work``: the directories it was given)."""
    assert run["status"] == "finished" and run["failed_samples"] == 0, run
    store = Store(db)
    samples = store.samples(run["run"])
    assert samples and {s.status for s in samples} == {"ok"}
    metrics = store.metric_rows(run["run"])
    assert {m.cell_id for m in metrics} == {c.id for c in store.cells(run["run"])}
    assert all(m.value is not None for m in metrics if m.text is None)
    assert leftovers(run["run"], state) == []
    if work is not None:
        assert not (work / run["run"]).exists()
    return store


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def memory_disk(tmp_path: Path) -> Iterator[Path]:
    """A disk faster than any bound of dd's: ext4 on a loop device over a file in tmpfs,
    mounted as the run's work directory; all of it gone after."""
    backing = Path("/dev/shm") / f"hvbench-shape-{os.getpid()}.img"
    mount = tmp_path / "work"
    mount.mkdir()
    with backing.open("wb") as f:
        f.truncate(10 << 30)
    device = _run(["losetup", "--find", "--show", str(backing)])
    try:
        _run(["mkfs.ext4", "-q", device])
        _run(["mount", device, str(mount)])
        try:
            yield mount
        finally:
            _run(["umount", str(mount)])
    finally:
        _run(["losetup", "-d", device])
        backing.unlink()


@pytest.mark.alone
def test_a_disk_faster_than_the_bound_loops_its_passes(tmp_path: Path, memory_disk: Path):
    """dd's passes of at most 2 GiB last under a second on a memory-backed disk (reads of 2.7-5
    GB/s here): the run loops them within each sample, says so, and stores the loops with the
    size. On 6bbaf15 the issue's host refused ('lasts 0.87 s natively, under the 1 s a pass
    needs'); here, loaded, it once went on, and its read pass then lasted 0.70 s."""
    db = f"sqlite:///{tmp_path / 'results.db'}"
    env = os.environ | {"HVBENCH_WORK_DIR": str(memory_disk)}
    code, run, err = ended(hvbench_run(study(tmp_path, "fast-disk", DD), db, env=env))
    assert code == 0 and run is not None, err
    store = measured(db, run, tmp_path / "state", memory_disk)
    chosen = DdSettings.model_validate(store.artifacts(run["run"])["calibration"]["0"])
    assert chosen.sized == TWO_GIB and chosen.loops >= 2, chosen
    assert f"sized: 2G a pass, {chosen.loops} loops a sample" in err, err
    raws = store.raw_outputs(run["run"])
    assert {len([r for r in raws if r.cell_id == c.id]) for c in store.cells(run["run"])} == {
        2 * chosen.loops
    }  # each pass kept, on native and in the container


@pytest.fixture
def throttled(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A block device (a loop device over a file on this host's disk) read and written at 40
    MB/s by the processes of a cgroup of the test's own (the block I/O controller's throttle:
    ``blkio.throttle.*`` on cgroup v1, ``io.max`` on v2): the device, and the cgroup's file
    that takes a process."""
    backing = Path("/var/tmp") / f"hvbench-shape-{os.getpid()}.img"
    with backing.open("wb") as f:
        f.truncate(4 << 30)
    device = _run(["losetup", "--find", "--show", str(backing)])
    numbers = _run(["lsblk", "-dno", "MAJ:MIN", device]).replace(" ", "")
    rate = 40_000_000
    v1 = Path("/sys/fs/cgroup/blkio")
    group = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / f"hvbench-shape-{os.getpid()}"
    group.mkdir()
    try:
        if v1.is_dir():
            for way in ("read", "write"):
                (group / f"blkio.throttle.{way}_bps_device").write_text(f"{numbers} {rate}")
            procs = group / "cgroup.procs"
        else:
            (group / "io.max").write_text(f"{numbers} rbps={rate} wbps={rate}")
            procs = group / "cgroup.procs"
        yield device, procs
    finally:
        for pid in procs.read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        _run(["losetup", "-d", device])
        backing.unlink()


def test_a_slow_disk_sizes_its_passes_down(tmp_path: Path, throttled: tuple[str, Path]):
    """Native's data disk throttled to 40 MB/s: dd's passes are sized to last the target there
    (no loops), not to the bound, and the run ends as on any disk."""
    device, procs = throttled
    db = f"sqlite:///{tmp_path / 'results.db'}"
    native = f", disk: {{backing: block, path: {device}}}"
    path = study(tmp_path, "slow-disk", DD, native=native, more="")

    def join_the_cgroup() -> None:
        procs.write_text(str(os.getpid()))

    proc = hvbench_run(path, db, preexec_fn=join_the_cgroup)
    code, run, err = ended(proc)
    assert code == 0 and run is not None, err
    store = measured(db, run, tmp_path / "state")
    chosen = DdSettings.model_validate(store.artifacts(run["run"])["calibration"]["0"])
    assert chosen.loops == 1 and chosen.sized is not None and chosen.sized < TWO_GIB / 4, chosen
    (write,) = [m.value for m in store.metric_rows(run["run"]) if m.name.endswith("write_mbps")]
    assert write < 48, write  # the throttle's 40 MB/s (10^6 bytes), measured through it


@pytest.mark.parametrize("name", LOCALES)
def test_a_users_locale_parses_every_figure(tmp_path: Path, locale_dir: Path, name: str):
    """The default study's workloads on native and in a container, in a German or French
    user's session (on main: 4 of 6 samples failed under each)."""
    db = f"sqlite:///{tmp_path / 'results.db'}"
    path = study(tmp_path, "locale", EVERY_PARSER)
    code, run, err = ended(hvbench_run(path, db, "--quick", env=users_env(locale_dir, name)))
    assert code == 0 and run is not None, err
    measured(db, run, tmp_path / "state")


def test_two_runs_at_once_the_second_refuses_or_waits(tmp_path: Path):
    """A run measuring: a second refuses in one line naming it (exit 2, nothing stored); with
    --wait it starts once the first has ended, so that neither measured beside the other (on
    main: both ran to the end, each beside the other). Their state directory is the test's
    own, so that nothing else on the host holds it."""
    db = f"sqlite:///{tmp_path / 'results.db'}"
    state = tmp_path / "state"
    # the first lasts about 20 s: the refused run and the waiting one start well within it
    net = "  - {name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 8}\n"
    first = hvbench_run(study(tmp_path, "first", net, more=""), db)
    holder = held(first, state)
    second = study(tmp_path, "second", DD.replace("auto", "64M"), more="")
    code, run, err = ended(hvbench_run(second, db))
    assert code == 2 and run is None and len(err.splitlines()) == 1, err
    assert f"run {holder.run_id} (study 'first', pid {first.pid}, since " in err, err
    assert "is measuring on this host" in err and "--wait" in err, err
    waited = hvbench_run(second, db, "--wait")
    code, one, err_one = ended(first)
    assert code == 0 and one is not None, err_one
    code, two, err_two = ended(waited)
    assert code == 0 and two is not None, err_two
    assert f"waiting for run {one['run']} (study 'first'" in err_two, err_two
    store = Store(db)
    assert [r.study_name for r in store.runs()].count("second") == 1  # the refused one: none
    first_ended = store.run(one["run"]).finished_at
    assert first_ended is not None
    assert min(s.started_at for s in store.samples(two["run"])) >= first_ended
    measured(db, one, state)
    measured(db, two, state)
    assert hold.holder(state) is None


def held(run: subprocess.Popen, state: Path) -> hold.Holder:
    """Who holds the host once ``run`` has taken it (within two minutes)."""
    deadline = time.monotonic() + 120
    while (holder := hold.holder(state)) is None:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.1)
    return holder


def test_a_killed_holder_does_not_block(tmp_path: Path):
    """SIGKILL the run that holds the host: the next run starts at once, as the ledger's
    orphans do not block either; ``hvbench cleanup`` removes what the killed one left."""
    db = f"sqlite:///{tmp_path / 'results.db'}"
    state = tmp_path / "state"
    net = "  - {name: net, tool: iperf3, directions: [in], parallel: 1, seconds: 5}\n"
    first = hvbench_run(study(tmp_path, "killed", net, more=""), db)
    ledger = state / held(first, state).run_id / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while not ledger.exists() or "netns" not in ledger.read_text():  # measuring: its namespace
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert hold.holder(state) is None
    env = os.environ | {"HVBENCH_STATE_DIR": str(state)}
    cleanup = subprocess.run(
        [str(HVBENCH), "cleanup", "--json"], env=env, capture_output=True, text=True, check=True
    )
    (killed,) = [r for r in Store(db).runs() if r.study_name == "killed"]
    assert killed.id in [r["run"] for r in json.loads(cleanup.stdout)]
    assert leftovers(killed.id, state) == []
    after = study(tmp_path, "after", DD.replace("auto", "64M"), more="")
    code, run, err = ended(hvbench_run(after, db))
    assert code == 0 and run is not None, err
    measured(db, run, state)
