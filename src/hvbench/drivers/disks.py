"""Data disks: what a platform's settings say of the disk workloads measure, how its host side
is made (the same way for every driver), and how it is formatted and mounted inside an
instance, and found there."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from hvbench.drivers.base import DataDisk, Driver, Instance
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest.files import DISK_LIST
from hvbench.host.process import failed
from hvbench.host.storage import loop_device, make_image
from hvbench.units import Size

if TYPE_CHECKING:
    from hvbench.host.resources import Resource


class HostDisk(BaseModel):
    """A data disk made on the host (native, containers): a loop device with direct I/O over a
    sparse file, or a block device the user names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backing: Literal["file", "block"] = "file"
    path: str | None = None
    """For ``file``: the directory that holds the image (default: the run's work directory).
    For ``block``: the partition or LV to format, which is erased."""
    size: Size = 2 << 30


class DiskBacking(Protocol):
    """What every platform's data disk settings say of where the disk lives on the host."""

    @property
    def backing(self) -> Literal["file", "block"]: ...

    @property
    def path(self) -> str | None: ...

    @property
    def size(self) -> int: ...


DATA_MOUNT = "/mnt/hvbench-data"
DATA_SERIAL = "hvbench-data"
"""The serial a VMM gives the data disk, by which it is found in the guest (``find_disk``)."""
MKFS = ("mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0")
"""How every data disk is formatted. Inode tables and journal are initialised now, not lazily:
ext4's background initialisation would otherwise write to the disk while a workload measures it."""


@dataclass(frozen=True)
class DataImage:
    """The host side of one instance's data disk, made the same way for every driver
    (``make``), so that each driver only maps it onto its own device syntax."""

    path: str
    """What the instance's VMM (or the host's mkfs) opens: the user's block device, the file
    made for the instance, or the loop device over that file."""
    file: Path | None
    """The file made for the instance, or None on the user's block device."""
    formatted: bool
    """Formatted with MKFS on the host already (any raw disk), natively: a guest's mkfs
    under TCG or UML took 2.3 s an instance of the default study. A qcow2 image, whose
    clusters the host cannot write as a file, is formatted inside the instance."""

    @classmethod
    def make(
        cls,
        driver: Driver,
        disk: DiskBacking,
        name: str,
        made: list[Resource],
        fmt: str = "raw",
        loop: bool = False,
    ) -> DataImage:
        """The block device the settings name, once it is there (validation made sure they
        name one); or a new image file ``name`` of the disk's size and format ``fmt`` in the
        disk's directory (by default the run's), in the ledger (``made``) before it exists,
        behind a loop device with direct I/O where ``loop``; formatted on the host where raw."""
        if disk.backing == "block":
            assert disk.path
            if not Path(disk.path).exists():
                raise HvbenchError(
                    f"platform {driver.platform}: disk path {disk.path} does not exist"
                )
            image = cls(disk.path, None, formatted=True)
        elif loop:
            file = Path(disk.path or driver.workdir) / name
            made += loop_device(driver.ledger, file, disk.size)
            image = cls(made[-1].name, file, formatted=True)
        else:
            file = Path(disk.path or driver.workdir) / name
            made.append(driver.ledger.add("path", str(file)))
            make_image(file, fmt, disk.size)
            image = cls(str(file), file, formatted=fmt == "raw")
        if image.formatted:
            mkfs = subprocess.run([*MKFS, image.path], capture_output=True, text=True, check=False)
            if mkfs.returncode != 0:  # as a guest's mkfs failing: the instance did not start
                raise InstanceError(
                    failed(f"platform {driver.platform}: {MKFS[0]} {image.path}", mkfs)
                )
        return image


def mount_data_disk(
    instance: Instance,
    device: str,
    description: str,
    *,
    formatted: bool,
    mountpoint: str = DATA_MOUNT,
) -> None:
    """Mount the data disk inside the instance, formatting it there first (with MKFS) where
    the host did not (``DataImage.formatted``), the same way on every platform with a kernel
    of its own: in one command, as each costs a round trip to a slow guest (0.4 s under UML)."""
    script = 'mkdir -p "$2" && mount "$1" "$2"'
    if not formatted:
        script = f'{shlex.join(MKFS)} "$1" && {script}'
    result = instance.exec(["sh", "-c", script, "sh", device, mountpoint], timeout=600)
    if not result.ok:
        raise InstanceError(f"{instance.name}: data disk {device}: {result.describe_failure()}")
    instance.data_disk = DataDisk(device, mountpoint, description)


def guest_disks(inst: Instance, by: Literal["serial", "name"] = "serial") -> dict[str, str]:
    """Serial (or kernel name) -> device node of the guest's disks (guest output parsed
    defensively)."""
    result = inst.exec([DISK_LIST], timeout=60)
    disks: dict[str, str] = {}
    for line in result.text().splitlines()[:256]:
        parts = line.split()
        if len(parts) >= (3 if by == "serial" else 2) and re.fullmatch(r"[a-z0-9]{1,32}", parts[0]):
            disks[parts[2] if by == "serial" else parts[0]] = f"/dev/{parts[0]}"
    return disks


def find_disk(
    inst: Instance, key: str, by: Literal["serial", "name"] = "serial", timeout: float = 30
) -> str:
    """The device node of the disk with this serial (or kernel name, where the VMM gives its
    disks no serial of the host's choosing), waiting a little: disks behind a controller are
    probed asynchronously."""
    deadline = time.monotonic() + timeout
    while (device := guest_disks(inst, by).get(key)) is None:
        if time.monotonic() > deadline:
            raise InstanceError(f"{inst.name}: no disk with {by} {key} in the guest")
        time.sleep(0.5)
    return device
