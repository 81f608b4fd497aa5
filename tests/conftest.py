"""Shared fixtures: every test gets a store of its own; guest fixtures live in guest_fixtures."""

from __future__ import annotations

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
