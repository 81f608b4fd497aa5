"""What every disk workload shares: the data disk under test and the ``{name: disk}`` settings.

The disk under test is the platform's separate data disk, freshly formatted (on the host where it
is raw, else inside the instance) and mounted in it (``Instance.data_disk``), never the root
filesystem: on native that is a loop device with direct I/O, in a guest the second virtual disk.
Each workload works in a scratch directory on it, so what a killed tool leaves behind goes away
in ``cleanup``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from hvbench.errors import InstanceError
from hvbench.units import format_size
from hvbench.workloads.base import WorkloadSettings
from hvbench.workloads.common import SMALL_COMMAND_S, ScratchWorkload, run

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

TOOLS = ("bonnie++", "fio", "dbench", "dd")
"""The ``tool:`` choices of ``{name: disk}``; bonnie++ (the seeds' tool) is the default."""


class DiskSettings(WorkloadSettings):
    """Settings every disk tool takes; each tool adds its own."""

    name: Literal["disk"]

    def label(self) -> str:
        """The tool, and the bytes it writes where the tool takes a ``size`` (its own field:
        dbench has none, dd's may be ``auto``)."""
        size = getattr(self, "size", None)
        shown = f" size={size if isinstance(size, str) else format_size(size)}" if size else ""
        return f"disk {getattr(self, 'tool', '')}{shown}"


D = TypeVar("D", bound=DiskSettings)


class DiskWorkload(ScratchWorkload[D]):
    """A workload on the data disk: its scratch directory is on the disk under test."""

    name: ClassVar[str] = "disk"
    needs_data_disk: ClassVar[bool] = True

    def scratch_parent(self, instance: Instance) -> str:
        if instance.data_disk is None:
            raise InstanceError(
                f"{instance.name}: platform {instance.platform!r} has no data disk; disk "
                "workloads measure a separate disk (give the platform one)"
            )
        return instance.data_disk.mountpoint

    def check_space(self, instance: Instance, needed: int) -> None:
        """Fail early, in one line, when the data set cannot fit on the data disk."""
        free = free_bytes(instance, self.scratch_parent(instance))
        if needed > free:
            raise InstanceError(
                f"{instance.name}: {self.settings.label()} needs {format_size(needed)} but the "
                f"data disk has {free >> 20} MiB free; set a smaller size or a larger disk"
            )


def free_bytes(instance: Instance, path: str) -> int:
    """Free bytes of the filesystem holding ``path`` (POSIX ``df -P -k``: GNU and busybox)."""
    lines = (
        run(instance, ["df", "-P", "-k", path], timeout=SMALL_COMMAND_S).text().strip().splitlines()
    )
    try:
        return int(lines[-1].split()[3]) * 1024
    except (IndexError, ValueError):
        raise InstanceError(f"{instance.name}: cannot read df output {lines[-1:]!r}") from None
