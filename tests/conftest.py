"""Shared fixtures: every test gets a store of its own; guest fixtures live in guest_fixtures."""

from __future__ import annotations

import pytest
from guest_fixtures import guest_image, guest_run  # noqa: F401 (shared booted-guest fixtures)


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """A fresh SQLite store per test, so tests never see each other's runs."""
    monkeypatch.setenv("HVBENCH_DB", f"sqlite:///{tmp_path / 'results.db'}")
