"""The host itself, run under the same harness code path as every guest.

Commands run on the host in a network namespace of their own, joined to the run's bridge by a
veth pair, so the peer is reached the same way as from a guest. The data disk is a loop device
(direct I/O, so the host page cache does not hide the medium) or a block device the user names.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import psutil

from hvbench.drivers.base import Availability, Driver, Instance, Kernel, PlatformSettings
from hvbench.drivers.disks import DataImage, HostDisk, mount_data_disk
from hvbench.drivers.footprint import Footprint, Pace
from hvbench.errors import HvbenchError
from hvbench.host.process import ExecResult, LiveProcesses, run_bounded
from hvbench.store import WhatRan
from hvbench.units import Size


class NativeDisk(HostDisk):
    """Where native disk workloads write: a loop device over a file, or a block device."""

    size: Size = 8 << 30


FOOTPRINT = Footprint(memory=272 << 10, tasks=0, net_namespaces=1)
"""An idle native instance is its network namespace with a veth on the run's bridge: 232-270
KiB of kernel memory each in six runs (slab, per-CPU, stacks, page tables: the median of three
rounds of 64 made through the run's network), no process of its own (``bench/footprint.py``,
2-core host, kernel 6.18)."""
PACE = Pace(slowdown=1.0, io_slowdown=1.0, start_s=0.1, core_s=0.1)
"""The baseline. Its start is the namespace, a loop device and mkfs of the data disk: 0.03-0.11
s for one, stop 0.01-0.07 s; four at once 0.09-0.35 s on 2 cores (``bench/footprint.py``)."""


class NativeSettings(PlatformSettings):
    no_lifecycle: ClassVar[str] = "runs on the host itself: there is no guest to move or save"

    driver: Literal["native"]
    disk: NativeDisk = NativeDisk()

    def footprint(self) -> Footprint:
        return FOOTPRINT

    def pace(self, kvm: bool) -> Pace:
        return PACE


@dataclass
class NativeInstance(Instance):
    guest_is_host_processes: ClassVar[bool] = True
    ends_its_processes: ClassVar[bool] = False
    netns: str = ""
    running: LiveProcesses = field(default_factory=LiveProcesses)

    def exec(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
        wrapped = ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]
        result = run_bounded(
            wrapped, timeout, stdin, on_start=self.running.started, on_exit=self.running.exited
        )
        result.argv = list(argv)
        return result

    def host_pids(self) -> list[int]:
        return self.running.pids()

    def alive(self) -> bool:
        return True

    def kill(self) -> None:
        """End commands still running (a hung tool, an interrupted run)."""
        for pid in self.host_pids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


class NativeDriver(Driver[NativeSettings, NativeInstance, None]):
    name: ClassVar[str] = "native"
    kernel: ClassVar[Kernel] = "host"
    settings_model = NativeSettings
    default_instances: ClassVar[Sequence[int] | None] = (1,)

    @classmethod
    def check(cls) -> Availability:
        return Availability(True, "the host itself")

    @classmethod
    def ran_by_settings(cls, settings: NativeSettings) -> WhatRan:
        return WhatRan(bare=True)

    def _resolve(self) -> None:
        """Nothing: the host is every instance, and each makes its own namespace and disk."""

    def _instance(self, index: int) -> NativeInstance:
        return NativeInstance(
            platform=self.platform,
            index=index,
            vcpus=os.cpu_count() or 1,
            memory_mib=psutil.virtual_memory().total >> 20,
            address=self.network.address(index),
        )

    def _start_one(self, inst: NativeInstance, deadline: float) -> None:
        netns = self.network.add_host_netns(inst.index)
        inst.resources.append(netns)
        inst.netns = netns.name
        # the host's /tmp would keep what a killed run's workloads left there
        scratch = self.ledger.add("path", str(self.workdir / f"tmp-{inst.index}"))
        inst.resources.append(scratch)
        Path(scratch.name).mkdir(parents=True, exist_ok=True)
        inst.scratch_root = scratch.name
        if self.needs.data_disk:
            self._attach_disk(inst, self.settings.disk)

    def _attach_disk(self, inst: NativeInstance, disk: NativeDisk) -> None:
        """Attach, format and mount the data disk; what is made goes to the instance's
        resources at once, so that ``stop`` removes it even when formatting fails."""
        if disk.backing == "block" and not disk.path:
            raise HvbenchError("native disk: backing 'block' needs a path (a partition or LV)")
        image = DataImage.make(self, disk, f"native-{inst.index}.img", inst.resources, loop=True)
        if image.file is None:
            description = f"block device {image.path}"
        else:
            description = f"loop device (direct I/O) over a sparse file {image.file}"
        # native shares the host's mount namespace: each instance mounts in the run's directory
        mountpoint = str(self.workdir / f"data-{inst.index}")
        inst.resources.append(self.ledger.add("mount", mountpoint))
        mount_data_disk(
            inst, image.path, description, formatted=image.formatted, mountpoint=mountpoint
        )
