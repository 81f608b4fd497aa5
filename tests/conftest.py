"""Shared fixtures: every test gets a store of its own; guest fixtures live in guest_fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """A fresh SQLite store per test, so tests never see each other's runs."""
    monkeypatch.setenv("HVBENCH_DB", f"sqlite:///{tmp_path / 'results.db'}")
