"""Where the tests find Firecracker and Cloud Hypervisor: on PATH, as a user installs their
release binaries. Neither may be redistributed and no registry these machines reach has them,
so a test that needs a running VMM is opt-in: without the binary it skips, under CI as well,
with a reason that says how to get one. The drivers' requests are proven without the binaries,
against the VMMs' own API descriptions (test_vmm_contracts.py)."""

from __future__ import annotations

import shutil

import pytest

VMMS = ("firecracker", "cloud-hypervisor")

RELEASES = {
    "firecracker": "github.com/firecracker-microvm/firecracker/releases",
    "cloud-hypervisor": "github.com/cloud-hypervisor/cloud-hypervisor/releases",
}


def found(name: str) -> str | None:
    """The path of the VMM ``name`` on PATH, or None."""
    return shutil.which(name)


def missing_reason(names: tuple[str, ...] = VMMS) -> str | None:
    """The skip's reason where one of ``names`` is not on PATH: it begins ``opt-in:``, which
    bench/lab_boots.py reads as a passed session."""
    lacking = [name for name in names if found(name) is None]
    if not lacking:
        return None
    how = "; ".join(f"{name} from {RELEASES[name]}" for name in lacking)
    return f"opt-in: no {' or '.join(lacking)} on PATH (put the release binary there: {how})"


def vmm_binary(name: str) -> str:
    """The path of the VMM ``name`` for a test that runs it; a skip (opt-in) without one."""
    reason = missing_reason((name,))
    if reason:
        pytest.skip(reason)
    return str(found(name))
