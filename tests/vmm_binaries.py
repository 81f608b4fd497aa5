"""Where the tests find Firecracker and Cloud Hypervisor: the copies in ../shared/vmm beside the
checkout when they are there, else on PATH. Under CI a missing VMM is a failure; elsewhere a
skip that says how to get one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "vmm"


def vmm_binary(name: str) -> str:
    """The path of the VMM ``name`` (``firecracker``, ``cloud-hypervisor``) for a test."""
    shared = SHARED / name
    if shared.is_file() and os.access(shared, os.X_OK):
        return str(shared)
    found = shutil.which(name)
    if found:
        return found
    why = (
        f"no {name}: neither {shared} nor one on PATH (install its release binary from the "
        "project's releases page, on PATH)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)
