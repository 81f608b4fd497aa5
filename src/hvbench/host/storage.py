"""Block devices and mounts a run makes on the host: loop devices over files, and the
filesystems mounted from them."""

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
    made.append(attach_loop(ledger, backing, "--direct-io=on"))
    return made


def make_image(path: Path, fmt: str, size: int, backing: Path | None = None) -> None:
    """A sparse raw file, an empty qcow2 image, or a qcow2 overlay of a raw ``backing`` file."""
    if fmt == "raw" and backing is None:
        with path.open("wb") as f:
            f.truncate(size)
        return
    argv = ["qemu-img", "create", "-q", "-f", fmt]
    if backing is not None:
        argv += ["-F", "raw", "-b", str(backing)]
    proc = subprocess.run(
        [*argv, str(path), *([str(size)] if backing is None else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise HvbenchError(f"qemu-img create {path}: {proc.stderr.strip()}")


def attach_loop(ledger: Ledger, backing: Path, *flags: str) -> Resource:
    """An existing file behind a free loop device, with losetup's ``flags``
    (``--read-only``, ``--direct-io=on``); the loop resource, whose name is the device."""
    proc = subprocess.run(
        ["losetup", "--find", "--show", *flags, str(backing)],
        capture_output=True,
        text=True,
        check=False,
    )
    device = proc.stdout.strip()
    if not device:
        why = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise HvbenchError(f"losetup could not attach {backing}: {why[0]} (needs root)")
    return ledger.add("loop", device)


def mount(ledger: Ledger, made: list[Resource], mountpoint: Path, *argv: str) -> None:
    """``mount ARGV MOUNTPOINT`` on a directory made for it. Both go into the ledger before they
    exist and into ``made`` (the mount last, so that it is undone first), failure or not."""
    made.append(ledger.add("path", str(mountpoint)))
    mountpoint.mkdir(exist_ok=True)  # a group before may have failed to mount it
    made.append(ledger.add("mount", str(mountpoint)))
    proc = subprocess.run(
        ["mount", *argv, str(mountpoint)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise HvbenchError(f"mount {' '.join(argv)} {mountpoint}: {why[0]}")
