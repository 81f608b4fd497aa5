"""Shared fixtures: every test gets a store of its own; guest fixtures live in guest_fixtures."""

from __future__ import annotations

import sys
from collections.abc import Generator

import pytest
from guest_fixtures import guest_image, guest_run  # noqa: F401 (shared booted-guest fixtures)


def require(ok: bool, fix: str) -> None:
    """Fail (never skip) when the suite's set-up is incomplete: a skipped test proves nothing,
    and ./setup.sh --dev installs everything the suite needs."""
    if not ok:
        pytest.fail(f"missing on this host: {fix} (run ./setup.sh --dev)", pytrace=False)


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
