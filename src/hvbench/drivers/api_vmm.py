"""What Firecracker and Cloud Hypervisor share: a VMM process per guest, configured through its
REST API on a Unix socket (``vmm_api``), booting Debian's uncompressed kernel (``vmlinux``) with
hvbench's initramfs directly, its serial console on the VMM's stdout, and qemu-guest-agent on a
vsock port that the VMM exposes on a host Unix socket (``VsockAgent``): the control channel is
never the NIC or the disk under test.

Each driver says how to start its VMM and what to ask of its API (``ApiVmmDriver``'s hooks);
the lifecycle around them (the run's network, huge pages, taps, data disks, the ledger, boot
phases, readiness, stopping) is the same for both, as QEMU's is for the qemu driver.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
from abc import abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import Availability, Driver, PlatformSettings
from hvbench.drivers.console import Console, launch
from hvbench.drivers.disks import DataImage, mount_data_disk
from hvbench.drivers.footprint import KVM_PACE, Footprint, Pace
from hvbench.drivers.last_words import VmmFailed, last_words
from hvbench.drivers.vmm_api import Endpoint, VmmApi
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import userland
from hvbench.guest.agent import VsockAgent
from hvbench.host import hugepages
from hvbench.host.inventory import PVM_ONLY, host_is_a_guest, kvm_is_pvm_only
from hvbench.host.network import PREFIX, tap_and_mac
from hvbench.host.process import executable, probe
from hvbench.host.resources import Ledger, Resource
from hvbench.store import WhatRan
from hvbench.units import Size, format_size

GUEST_CID = 3
"""The guest's vsock address (the host is 2); each VMM has a vsock device of its own."""
ANY_CID = 0xFFFFFFFF
"""VMADDR_CID_ANY: the agent listens whatever CID the guest has (a snapshot's restore sets the
guest's CID anew from its VMM's device)."""
AGENT_VSOCK_PORT = 1024
"""The vsock port qemu-ga listens on in the guest."""
AGENT_LET_GO_S = 1.0
"""Seconds a closed agent connection is given to reach the guest's agent (a vsock shutdown, one
packet) before the guest is paused: ample at two levels of emulation."""
BOOT_ARGS = "console=ttyS0 loglevel=6 panic=-1 oops=panic reboot=k"
"""As QEMU's guests boot (an oops ends the guest rather than leave it half alive), with the
keyboard controller's reset, which ends a Firecracker guest's VMM."""


class RawDisk(BaseModel):
    """The data disk both VMMs take: a raw image file made for the instance, or the user's
    block device (each VMM adds its own knobs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backing: Literal["file", "block"] = "file"
    path: str | None = None
    """For ``file``: the directory that holds the image (default: the run's work directory).
    For ``block``: the partition, LV or loop device to use, which is erased."""
    size: Size = 2 << 30

    @model_validator(mode="after")
    def _block_has_a_path(self) -> RawDisk:
        if self.backing == "block" and not self.path:
            raise ValueError("backing: block needs a path (a partition, LV or loop device)")
        return self


class ApiVmmSettings(PlatformSettings):
    """Settings both microVM VMMs take: what a user of either tunes first."""

    binary: str
    """The VMM to run: a path, or a program in hvbench's virtualenv or on PATH, so that two
    versions can be two platforms of one study."""
    vcpus: PositiveInt = 1
    memory: Size = 512 << 20
    nic: Literal["virtio-net", "none"] = "virtio-net"
    kernel_args: str = ""
    boot_timeout: float = Field(default=300, gt=0)

    @model_validator(mode="after")
    def _memory(self) -> ApiVmmSettings:
        if self.memory < 128 << 20:
            raise ValueError("memory: at least 128M (the initramfs lives in guest memory)")
        if self.memory % (2 << 20):
            raise ValueError("memory: a multiple of 2M")
        return self

    def host_misfits(self, count: int) -> list[str]:
        """The VMM itself first: its binary, which hvbench does not ship, on PATH or named."""
        if executable(self.binary) is None:
            return [
                f"binary: {self.binary} not found (put the {self.driver} release binary on "
                "PATH, or name it with binary:)"
            ]
        return []

    def footprint(self) -> Footprint | None:
        return Footprint(FOOTPRINT_MIB << 20, 6 + self.vcpus, address=self.nic != "none")

    def pace(self, kvm: bool) -> Pace:
        """QEMU's under KVM: these VMMs run only there."""
        return KVM_PACE


FOOTPRINT_MIB = 32
"""MiB a microVM VMM holds besides guest memory, rounded up from what Firecracker promises (its
threads at most 5 MiB beyond the guest); checked by the memory workload of the KVM lab."""


@functools.cache
def vmm_version(binary: str) -> str:
    """The VMM's own version line (``--version``), for the provenance."""
    out = probe([binary, "--version"])
    line = next((ln for ln in out.stdout.splitlines() if ln.strip()), "")
    return line.strip() or "unknown"


def kvm_availability(vmm: str, binary: str | None, fix: str) -> Availability:
    """Doctor's word on a microVM VMM: found (with its version), and whether this host's KVM
    runs a stock guest (both VMMs need KVM; where /dev/kvm is PVM's, none boots)."""
    if binary is None:
        return Availability(False, f"{vmm} not found", fix)
    version = vmm_version(binary)
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Availability(False, f"{version}: no usable /dev/kvm (it needs KVM)", "")
    if kvm_is_pvm_only():
        return Availability(False, f"{version}: /dev/kvm {PVM_ONLY}", "")
    return Availability(True, f"{version} on KVM")


@dataclass
class Vmm:
    """One running VMM process: its console reader, its API and its guest's agent."""

    name: str
    proc: subprocess.Popen
    process: Resource
    console: Console
    api: VmmApi
    agent: VsockAgent
    stderr: Path
    log: Path | None
    """The VMM's own log where it keeps one apart from stderr (Firecracker's ``--log-path``)."""
    api_up: float | None = None
    """Seconds from the process's start until its API answered: the VMM's own start."""
    guest_started: float | None = None
    """Seconds from the process's start until the API call that started the guest."""

    @classmethod
    def launch(
        cls,
        argv: list[str],
        name: str,
        prefix: Path,
        sockets: tuple[str, str],
        ledger: Ledger,
        netns: str | None,
        log: Path | None = None,
    ) -> Vmm:
        """Start the VMM (inside ``netns`` if given, where its tap is) and record it in the
        ledger; ``sockets`` are its API's and its vsock's."""
        proc, process, console, stderr = launch(argv, prefix, ledger, netns, f"{name}: the VMM")
        api = VmmApi(sockets[0], name)
        agent = VsockAgent(sockets[1], name, AGENT_VSOCK_PORT)
        return cls(name, proc, process, console, api, agent, stderr, log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def since_start(self) -> float:
        """Seconds since the process started, on the console's clock."""
        return time.monotonic() - self.console.started

    def wait_ready(self, deadline: float) -> None:
        """Wait for the agent; raise InstanceError with the VMM's last words if it died."""
        try:
            self.agent.wait_ready(deadline, self.alive)
        except InstanceError as e:
            if not self.alive():
                raise self.failure(f"{self.name}: the VMM exited") from e
            raise
        self.console.ready()

    def release_agent(self, deadline: float) -> None:
        """Close the agent's connection and let the guest's agent take it as closed, before the
        guest is paused for a snapshot: a vsock connection open across a snapshot is reset
        under qemu-ga, which then waits on it for good (it watches its client for input and
        hang-up, not for the error a reset raises), and the guest answers no one again. A new
        connection answering shows that the agent let the old one go; its own close is given
        ``AGENT_LET_GO_S`` to reach the guest."""
        self.agent.close()
        try:
            self.agent.wait_ready(deadline, self.alive)
        except CommandTimeout as e:
            raise InstanceError(f"{self.name}: the agent did not answer before a snapshot") from e
        self.agent.close()
        time.sleep(AGENT_LET_GO_S)

    def last_words(self) -> str:
        """How the VMM ended, what it said (stderr, its log) and the guest's console."""
        return last_words(self.proc.poll(), **self._logs())

    def failure(self, what: str) -> VmmFailed:
        """The error that says ``what`` happened to this VMM, with its last words."""
        return VmmFailed.of(what, self.proc, **self._logs())

    def _logs(self) -> dict[str, Path | None]:
        return {"stderr": self.stderr, "log": self.log, "console": self.console.log}

    def kill(self) -> None:
        self.agent.close()
        self.api.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self.console.join(5)


MERGED_SLACK = 2 << 20
"""Bytes of the VMM's own anonymous memory that a guest's memory mapping may have been merged
with and is counted as the guest's: at most this much of the overhead is misread."""


@dataclass
class ApiVmmInstance(AgentInstance):
    vmm: ClassVar[str] = "the VMM"
    process: Vmm | None = None
    channels: list[Resource] = field(default_factory=list)
    """What belongs to the VMM process running the instance now (the process, its sockets):
    replaced when the instance is restored or migrated; its ``resources`` (its tap, its disks)
    outlive one process."""
    tap: str | None = None
    mac: str | None = None

    def guest_ram(self, path: str, size: int) -> bool:
        """The guest's memory: one anonymous mapping of its size (or, restored, the snapshot's
        memory file), which the kernel may have merged with a small anonymous mapping of the
        VMM's own beside it (Firecracker's, nested: 132 KiB more), never with more than
        ``MERGED_SLACK``."""
        guest = self.memory_mib << 20
        return guest <= size <= guest + MERGED_SLACK

    def agent_channel(self) -> VsockAgent | None:
        return self.process.agent if self.process else None

    def kill(self) -> None:
        if self.process:
            self.process.kill()

    def last_words(self) -> str:
        return self.process.last_words() if self.process else "never started"

    def host_pids(self) -> list[int]:
        return [self.process.proc.pid] if self.process and self.process.alive() else []

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


@dataclass(frozen=True)
class GuestSpec:
    """What one instance's VMM is asked to run, in the terms both APIs take."""

    kernel: str
    initrd: str
    cmdline: str
    data: DataImage | None
    """The data disk's image (its drive is named ``DATA_SERIAL``), where workloads need one."""
    root: str | None
    """The instance's own copy of the root filesystem image (sparse), where workloads need a
    full userland: the first drive, /dev/vda."""


S = TypeVar("S", bound=ApiVmmSettings)
I = TypeVar("I", bound=ApiVmmInstance)  # noqa: E741 (the usual name of a type variable)


def room_for_copies(source: Path, count: int, into: Path, who: str) -> None:
    """Refuse in one line, before any is made, ``count`` copies of ``source`` (each instance's
    root filesystem: Firecracker and Cloud Hypervisor take raw drives, no copy-on-write format)
    that cannot fit in ``into``; where its filesystem clones files (reflink) they take no room.
    In the KVM lab five copies filled the disk midway (cp: No space left on device)."""
    probe = into / f".{source.name}.reflink"
    cloned = subprocess.run(
        ["cp", "--reflink=always", str(source), str(probe)], capture_output=True, check=False
    )
    probe.unlink(missing_ok=True)
    if cloned.returncode == 0:
        return
    each, free = source.stat().st_blocks * 512, shutil.disk_usage(into).free
    if count * each > free:
        raise HvbenchError(
            f"{who}: {count} instance(s) boot a copy each of the root filesystem "
            f"({format_size(each)} each, no copy-on-write disk format for this VMM), "
            f"{format_size(count * each)} in all, but {into} has {format_size(free)} free: "
            "free space there or run fewer instances"
        )


@dataclass(frozen=True)
class ApiVmmOpened:
    """What a microVM VMM's driver resolves once per run (``open``)."""

    binary: str
    """The VMM's executable."""
    image: guest_image.GuestImage
    """The guest image, whose vmlinux the VMM boots."""
    rootfs: userland.RootImage | None
    """The root filesystem image, where the workloads need a full userland."""


class ApiVmmDriver(Driver[S, I, ApiVmmOpened]):
    """The lifecycle both microVM VMMs share; a driver says how to start its VMM (``_argv``)
    and how to configure and boot a guest through its API (``_boot``)."""

    vmm_name: ClassVar[str]
    """The VMM as messages name it."""
    guest_modules: ClassVar[tuple[str, ...]]
    """The guest's drivers for the VMM's transport and devices, in load order."""
    install_hint: ClassVar[str]
    """How to get the VMM, for the line that says it is missing."""
    tap_tag: ClassVar[str]
    mac_byte: ClassVar[int]
    """The instances' tap names and MACs (``tap_and_mac``), told apart from other drivers'."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reserved: list[Resource] = []

    @classmethod
    def check(cls) -> Availability:
        default = cls.settings_model.model_fields["binary"].default
        return kvm_availability(cls.vmm_name, executable(default), cls.install_hint)

    @classmethod
    def check_for(cls, settings: S) -> Availability:
        return kvm_availability(cls.vmm_name, executable(settings.binary), cls.install_hint)

    @classmethod
    def ran_by_settings(cls, settings: S) -> WhatRan:
        return WhatRan(mode="kvm", modes=("kvm",), disk_cache=cls.disk_cache(settings))

    @classmethod
    @abstractmethod
    def disk_cache(cls, settings: S) -> str | None:
        """How the data disk goes through the host page cache (``WhatRan.disk_cache``)."""

    def what_ran(self) -> WhatRan:
        return replace(self.ran_by_settings(self.settings), nested=host_is_a_guest())

    def _resolve(self) -> ApiVmmOpened:
        binary = executable(self.settings.binary)
        if binary is None:
            raise HvbenchError(
                f"platform {self.platform}: binary: {self.settings.binary} not found "
                f"({self.install_hint})"
            )
        image = guest_image.build(set(self.needs.tools), "amd64")
        if image.vmlinux is None:
            raise HvbenchError(
                f"platform {self.platform}: {self.vmm_name} boots an uncompressed vmlinux, "
                "which could not be extracted from the guest kernel"
            )
        rootfs = None
        if self.needs.userland:
            rootfs = userland.build(set(self.needs.tools), image, self.needs.packages)
        return ApiVmmOpened(binary, image, rootfs)

    def _prepare(self, count: int) -> None:
        rootfs = self.opened.rootfs
        if rootfs:
            room_for_copies(rootfs.disk, count, self.workdir, f"platform {self.platform}")
        if self.settings.nic != "none":
            self.network.up()
        size = self._hugepage_size()
        if size:
            pages = hugepages.pages_for(size, count * self.settings.memory)
            self._reserved = [
                hugepages.reserve(self.ledger, size, pages, f"platform {self.platform}")
            ]

    def _hugepage_size(self) -> str | None:
        """The huge page size guest memory is on (reserved for the group), or None."""
        return None

    def _multi_queue_tap(self) -> bool:
        """Whether the VMM opens the instance's tap multi-queue (then it must be made so)."""
        return False

    def _start_one(self, inst: I, deadline: float) -> None:
        opened = self.opened
        prefix = self.workdir / f"{self.platform}-{inst.index}"
        made = inst.resources
        append = [BOOT_ARGS, f"hvbench.hostname={inst.name}", self.settings.kernel_args]
        if self.settings.nic != "none":
            inst.address = self.network.address(inst.index)
            append.append(f"hvbench.ip={inst.address}/{PREFIX}")
            inst.tap, inst.mac = tap_and_mac(self.tap_tag, self.mac_byte, inst.index)
            made.append(self.network.add_tap(inst.tap, multi_queue=self._multi_queue_tap()))
        root = None
        if opened.rootfs:
            root = f"{prefix}.root.ext4"
            made.append(self.ledger.add("path", root))
            subprocess.run(
                ["cp", "--reflink=auto", "--sparse=always", str(opened.rootfs.disk), root],
                check=True,
            )
            append.append(opened.rootfs.boot_args("/dev/vda"))
        data = None
        if self.needs.data_disk:
            data = DataImage.make(self, self.data_settings(), f"{prefix.name}.data.raw", made)
        modules = [*self.guest_modules, *self._device_modules()]
        append += [
            f"hvbench.agent_vsock={ANY_CID}:{AGENT_VSOCK_PORT}",
            f"hvbench.modules={','.join(modules)}",
        ]
        spec = GuestSpec(
            str(opened.image.vmlinux),
            str(opened.image.initrd),
            " ".join(a for a in append if a),
            data,
            root,
        )
        boot_deadline = min(deadline, time.monotonic() + self.settings.boot_timeout)
        vmm = inst.process = self.launch(inst, prefix, spec, boot_deadline, inst.channels)
        try:
            vmm.wait_ready(boot_deadline)
        except CommandTimeout as e:
            raise vmm.failure(f"{inst.name}: not ready in time ({e})") from e
        inst.boot = replace(vmm.console.boot_phases(), **self._vmm_phases(vmm))
        if data is not None:
            device = self._data_device(inst, spec)
            mount_data_disk(inst, device, self.data_description(data), formatted=data.formatted)

    @abstractmethod
    def _data_device(self, inst: I, spec: GuestSpec) -> str:
        """The data disk's device node in the guest, once it is there."""

    def _device_modules(self) -> list[str]:
        modules = []
        if self.settings.nic != "none":
            modules.append("virtio_net")
        if self.needs.data_disk or self.opened.rootfs:
            modules.append("virtio_blk")
        return modules

    @abstractmethod
    def data_settings(self) -> RawDisk:
        """The platform's data disk settings."""

    @abstractmethod
    def data_description(self, data: DataImage) -> str:
        """What backs the data disk, for the report."""

    def launch(
        self, inst: I, prefix: Path, spec: GuestSpec, deadline: float, made: list[Resource]
    ) -> Vmm:
        """Start a VMM for the instance with sockets of its own (recorded in ``made``), wait
        for its API and boot the guest through it (``_boot``)."""
        api_socket, vsock = f"{prefix}.api.sock", f"{prefix}.vsock"
        for path in (api_socket, vsock):
            made.append(self.ledger.add("path", path))
        vmm = self.start_vmm(inst, prefix, (api_socket, vsock), made)
        try:
            self._boot(vmm, inst, spec, vsock)
        except InstanceError as e:  # a refused setting or kernel: the VMM's word, its console's
            raise vmm.failure(str(e)) from e
        return vmm

    def start_vmm(
        self, inst: I, prefix: Path, sockets: tuple[str, str], made: list[Resource]
    ) -> Vmm:
        """Start the VMM process alone, its API answering (for a boot, a restore or a
        migration's destination)."""
        log = self._log_file(prefix, made)
        argv = self._argv(sockets[0], inst, log)
        netns = self.network.netns if self.settings.nic != "none" else None
        vmm = Vmm.launch(argv, inst.name, prefix, sockets, self.ledger, netns, log)
        made.append(vmm.process)
        try:
            vmm.api.wait(time.monotonic() + 30, vmm.alive, self._probe(vmm.api).path)
        except InstanceError as e:
            raise vmm.failure(str(e)) from e
        vmm.api_up = vmm.since_start()
        return vmm

    @staticmethod
    @abstractmethod
    def _probe(api: VmmApi) -> Endpoint:
        """What the VMM answers a GET of as soon as its API is up."""

    def _log_file(self, prefix: Path, made: list[Resource]) -> Path | None:
        """A log file of the VMM's own (made empty, in the ledger), where it keeps one."""
        return None

    @abstractmethod
    def _argv(self, api_socket: str, inst: I, log: Path | None) -> list[str]:
        """The VMM's command line, serving its API on ``api_socket``."""

    @abstractmethod
    def _boot(self, vmm: Vmm, inst: I, spec: GuestSpec, vsock: str) -> None:
        """Configure the guest through the API and start it, noting when the start was asked
        for (``vmm.guest_started``)."""

    @staticmethod
    def _vmm_phases(vmm: Vmm) -> dict[str, float]:
        """The VMM's own phases beside kernel, init and ready: its API up (``api``) and, from
        the call that started the guest, the guest's init (``start_to_init``: Firecracker's
        definition of its boot time)."""
        out = {} if vmm.api_up is None else {"api": round(vmm.api_up, 3)}
        init = vmm.console.phases.get("init")
        if vmm.guest_started is not None and init is not None:
            out["start_to_init"] = round(init - vmm.guest_started, 3)
        return out

    def _end(self, inst: I) -> None:
        if inst.process:
            inst.process.kill()
        while inst.channels:
            self.ledger.release(inst.channels.pop())

    def _stopped(self, instances: list[I]) -> None:
        while self._reserved:
            self.ledger.release(self._reserved.pop())

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        opened = self.opened
        info["resolved"] = {
            "vmm": vmm_version(opened.binary),
            "vmm_binary": opened.binary,
            "accel": "kvm",
            "nested": host_is_a_guest(),
        }
        info["image"] = opened.image.manifest
        if opened.rootfs:
            info["rootfs"] = opened.rootfs.summary()
        return info
