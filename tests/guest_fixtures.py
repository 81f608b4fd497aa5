"""Fixtures for tests that boot real QEMU guests under TCG (import from conftest).

The guest image is built once per session; every test that boots guests gets a run of its own
(ledger, network namespace, work directory), and afterwards it is checked that nothing the run
made is left on the host: no QEMU process, tap, bridge, namespace or loop device.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from hvbench.guest import image
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger, Resource

GUEST_TOOLS = frozenset({"iperf3"})
"""What the shared test image holds besides busybox, qemu-ga and mkfs.ext4."""


@pytest.fixture(scope="session")
def guest_image() -> image.GuestImage:
    """The test guest image, built (or taken from the cache) once per session."""
    return image.build(GUEST_TOOLS)


@dataclass
class GuestRun:
    """What a driver gets from the runner, for tests that drive it directly."""

    ledger: RecordingLedger
    network: RunNetwork
    workdir: Path


class RecordingLedger(Ledger):
    """A ledger that remembers everything ever added, to check afterwards that all is gone."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.made: list[tuple[str, str]] = []

    def add_many(self, entries: Sequence[tuple[str, str, dict]]) -> list[Resource]:
        self.made += [(kind, name) for kind, name, _ in entries]
        return super().add_many(entries)


@contextlib.contextmanager
def run_context(tmp_path: Path) -> Iterator[GuestRun]:
    """A run's ledger, network and work dir; released at the end, then checked for leftovers."""
    run_id = f"test-{time.time_ns()}"
    ledger = RecordingLedger(run_id)
    ledger.claim()
    network = RunNetwork(run_id, ledger)
    workdir = tmp_path / "work"
    workdir.mkdir()
    try:
        yield GuestRun(ledger, network, workdir)
    finally:
        ledger.release_all()
    assert_nothing_left(ledger.made)


@pytest.fixture
def guest_run(tmp_path: Path, guest_image: image.GuestImage) -> Iterator[GuestRun]:
    """A run of the test's own, for tests that boot guests."""
    with run_context(tmp_path) as run:
        yield run


def assert_nothing_left(made: list[tuple[str, str]]) -> None:
    """Every process, namespace, link and loop device the run recorded is gone."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    for kind, name in made:
        if kind == "process":
            assert (
                not psutil.pid_exists(int(name)) or psutil.Process(int(name)).status() == "zombie"
            )
        elif kind == "netns":
            assert name not in namespaces.split(), f"namespace {name} left behind"
        elif kind == "loop":
            assert f"{name}:" not in loops, f"loop device {name} left attached"
        elif kind == "path":
            assert not Path(name).exists(), f"{name} left behind"
    # links lived in the run's namespace, which is gone; a link in the root namespace would not be
    for kind, name in made:
        if kind == "link":
            assert name not in _links_root(), f"link {name} left behind"


def _links_root() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
