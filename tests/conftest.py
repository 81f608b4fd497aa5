"""Shared fixtures: every test gets a store of its own, some a hand-made run in it, and the
PostgreSQL tests a server; guest fixtures live in guest_fixtures."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

# Every run of the suite's, in this process and in the hvbench commands it starts, keeps its
# ledgers and its hold on the host in a state directory of the session's own (a tmpfs, as
# /run/hvbench is): a user's run on this host neither blocks the suite nor is cleaned up by it.
# Set before hvbench is imported, which reads it once.
if "HVBENCH_STATE_DIR" not in os.environ:
    os.environ["HVBENCH_STATE_DIR"] = tempfile.mkdtemp(prefix="hvbench-suite-", dir="/run")
    os.chmod(os.environ["HVBENCH_STATE_DIR"], 0o755)  # as /run/hvbench: others may read it
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import locales
import pytest
from builders import RunBuilder, host
from guest_fixtures import guest_image, guest_run  # noqa: F401 (shared booted-guest fixtures)
from polling import wait_for

from hvbench.store import Store

if TYPE_CHECKING:
    from lab import Labs


def require(ok: bool, fix: str) -> None:
    """Fail (never skip) when the suite's set-up is incomplete: a skipped test proves nothing,
    and ./setup.sh --dev installs everything the suite needs."""
    if not ok:
        pytest.fail(f"missing on this host: {fix} (run ./setup.sh --dev)", pytrace=False)


def _booted_lab(item: pytest.Item) -> bool:
    """A test that reads a nested lab's boot (through its module's fixture, which asks for
    ``labs``)."""
    return "labs" in getattr(item, "fixturenames", ())


def _order(item: pytest.Item) -> int:
    """Where a test runs: the others first, while the nested labs boot in the background, then
    the tests that read a lab's boot, then those that need the host to themselves (``alone``)."""
    if item.get_closest_marker("alone"):
        return 2
    return 1 if _booted_lab(item) else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's state directory goes with it, unless a run left a ledger there (then it
    stays, for ``hvbench cleanup`` with HVBENCH_STATE_DIR naming it)."""
    state = Path(os.environ["HVBENCH_STATE_DIR"])
    if state.name.startswith("hvbench-suite-"):
        (state / "measuring.lock").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            state.rmdir()


@pytest.fixture(scope="session", autouse=True)
def _labs_booting(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Labs | None]:
    """The nested labs of the session's tests, booted in the background from its start
    (lab.Labs, one boot per module that asks for one with ``lab_boot()``); None where no
    test reads one."""
    modules = dict.fromkeys(i.module for i in request.session.items if _booted_lab(i))
    if not modules:
        yield None
        return
    import lab  # only where a lab boots: it builds what it boots

    labs = lab.Labs()
    try:
        for module in modules:
            labs.start(module, tmp_path_factory.mktemp(module.__name__.removeprefix("test_")))
        yield labs
    finally:
        labs.close()


@pytest.fixture(scope="session")
def locale_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Users' locales (de_DE, fr_FR, a latin-1 one) for LOCPATH, made once a session."""
    require((locales.SOURCES / "de_DE").exists(), "locales (apt-get install locales)")
    return locales.make(tmp_path_factory.mktemp("locales"))


@pytest.fixture(scope="session")
def labs(_labs_booting: Labs | None) -> Labs:
    """The session's nested labs, for a lab module's fixture (``Labs.booted``)."""
    assert _labs_booting is not None
    return _labs_booting


@pytest.fixture(autouse=True)
def _alone(request: pytest.FixtureRequest, _labs_booting: Labs | None) -> None:
    """A test marked ``alone`` starts once every lab has finished: its guests serve fixed
    request rates within fixed deadlines, which a lab beside them starved (libvirt's six TCG
    domains gave no result in 470 s)."""
    if _labs_booting is not None and request.node.get_closest_marker("alone"):
        _labs_booting.finished()


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """A fresh SQLite store per test, so tests never see each other's runs."""
    monkeypatch.setenv("HVBENCH_DB", f"sqlite:///{tmp_path / 'results.db'}")


@pytest.fixture
def store(tmp_path) -> Store:
    """An empty store, the one the CLI reads (``HVBENCH_DB``)."""
    return Store(f"sqlite:///{tmp_path}/results.db")


@pytest.fixture
def four_platforms(store: Store) -> Store:
    """The store with a hand-made run whose verdicts the report tests know: native, virtio (92%),
    e1000 (70%, outbound 30% lower), tcg (41%, host CPU 2×)."""
    b = RunBuilder(store, inventory={"cores_logical": 2, "hostname": "h|<b>"})
    factors = {"native": 1.0, "virtio": 0.92, "e1000": 0.70, "tcg": 0.41}
    for platform, f in factors.items():
        disk, net = b.cell(platform, "disk"), b.cell(platform, "net")
        kern = b.cell(platform, "kernbench")
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            busy = 10.0 if platform != "tcg" else 20.0
            b.sample(disk, rep, {"disk.bonnie.block_kbps": [58000 * f * (1 + n)]}, "KB/s")
            out = 0.7 if platform == "e1000" else 1.0
            b.sample(
                net,
                rep,
                {
                    "net.iperf3.inbound_gbps": [10 * f * (1 + n)],
                    "net.iperf3.outbound_gbps": [10 * f * out * (1 + n)],
                },
                "Gbit/s",
                host_cpu=host(10, busy * f * (1 + n)),
            )
            b.sample(kern, rep, {"kernbench.elapsed_s": [54 / f * (1 + n)]}, "s", False)
    return store


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test of a nested lab names the directory its boot left (L1's console, its logs,
    the stores, what its scratch disk held), kept with pytest's temporary directories."""
    report = yield
    lab = sys.modules.get("lab")  # only the lab's tests import it
    if report.failed and lab:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, lab.LabRun):
                report.sections.append(("nested lab", value.result.why(value.exchange)))
    return report


def _pg_bin() -> Path | None:
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / "initdb").exists():
            return base
    return None


@pytest.fixture(scope="module")
def postgres_url():
    """A throw-away PostgreSQL cluster on a unix socket, run as the postgres user (who cannot
    enter pytest's private tmp directories, hence a directory of its own)."""
    bindir = _pg_bin()
    if bindir is None or shutil.which("runuser") is None:
        pytest.fail("PostgreSQL is not installed: run ./setup.sh --dev (package postgresql)")
    root = Path(tempfile.mkdtemp(prefix="hvbench-pg-"))
    os.chmod(root, 0o777)
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    os.chmod(sock, 0o777)
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_pg, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "hv"],
        check=True,
        capture_output=True,
    )
    opts = f"-k {sock} -c listen_addresses='' -c fsync=off"
    subprocess.run(
        [
            *as_pg,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-w",
            "-l",
            str(root / "log"),
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        wait_for(lambda: list(sock.glob(".s.PGSQL.*")), 30, f"PostgreSQL's socket in {sock}")
        subprocess.run(
            [*as_pg, str(bindir / "createdb"), "-h", str(sock), "-U", "hv", "hvbench"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://hv@/hvbench?host={sock}"
    finally:
        subprocess.run(
            [*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
