"""Block devices a run makes on the host: loop devices over sparse files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.host.resources import Ledger, Resource


def loop_device(ledger: Ledger, backing: Path, size: int) -> list[Resource]:
    """A sparse file of ``size`` bytes behind a loop device with direct I/O; the loop
    resource (whose name is the device) comes last."""
    made = [ledger.add("path", str(backing))]
    with backing.open("wb") as f:
        f.truncate(size)
    proc = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=on", str(backing)],
        capture_output=True,
        text=True,
        check=False,
    )
    device = proc.stdout.strip()
    if not device:
        why = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise HvbenchError(f"losetup could not attach {backing}: {why[0]} (needs root)")
    made.append(ledger.add("loop", device))
    return made
