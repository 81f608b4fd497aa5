"""Shared fixtures: every test gets a store of its own; guest fixtures live in guest_fixtures."""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest
from guest_fixtures import guest_image, guest_run  # noqa: F401 (shared booted-guest fixtures)

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
