"""Cloud Hypervisor guests (``driver: cloud-hypervisor``): the Rust VMM behind Kata Containers
and Azure's confidential VMs.

One Cloud Hypervisor process per guest, configured through its API socket (``api_vmm``):
``vm.create`` with the Debian kernel's ``vmlinux`` (booted at its PVH entry) and hvbench's
initramfs, virtio-pci devices (virtio-net on a tap of the run's bridge, virtio-blk for the data
disk with a serial the host names), qemu-guest-agent on virtio-vsock, then ``vm.boot``. It runs
only on KVM; it has no emulated NICs or disks.

Its snapshot (``CloudHypervisorLifecycle.snapshot``) pauses the guest and writes its state and
memory to a directory; a new Cloud Hypervisor restores it from there and resumes it. Its live
migration (``CloudHypervisorLifecycle.migrate``) sends the running guest to a second Cloud
Hypervisor on this host over a Unix socket.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

from hvbench.drivers.api_vmm import (
    GUEST_CID,
    ApiVmmDriver,
    ApiVmmInstance,
    ApiVmmSettings,
    GuestSpec,
    RawDisk,
    Vmm,
)
from hvbench.drivers.base import (
    Lifecycle,
    MigrationPlan,
    Operation,
    OperationReport,
    operation_path,
)
from hvbench.drivers.disks import DATA_SERIAL, DataImage, find_disk
from hvbench.drivers.vmm_api import Endpoint, VmmApi
from hvbench.errors import CommandTimeout, InstanceError
from hvbench.host import hugepages
from hvbench.host.resources import Resource


class Queues(BaseModel):
    """A virtio device's queues, as Cloud Hypervisor's ``num_queues`` and ``queue_size``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_queues: PositiveInt | None = None
    """None: Cloud Hypervisor's default (a disk: 1; a NIC: 2, one pair)."""
    queue_size: PositiveInt | None = None


class CloudHypervisorDisk(RawDisk, Queues):
    """The data disk on Cloud Hypervisor's virtio-blk."""

    direct: bool = False
    """O_DIRECT on the host side (bypassing the host page cache)."""


class CloudHypervisorSettings(ApiVmmSettings):
    driver: Literal["cloud-hypervisor"]
    binary: str = "cloud-hypervisor"
    hugepages: bool = False
    """Guest memory on the host's 2M hugetlbfs pages (reserved for the run, given back after)."""
    shared: bool = False
    """Guest memory mapped shared (MAP_SHARED), as vhost-user devices need."""
    net: Queues = Queues()
    disk: CloudHypervisorDisk = CloudHypervisorDisk()

    @model_validator(mode="after")
    def _queues(self) -> CloudHypervisorSettings:
        if self.net.num_queues is not None and self.net.num_queues % 2:
            raise ValueError("net num_queues: an even number (a receive and a send queue a pair)")
        if (self.disk.num_queues or 1) > self.vcpus:
            raise ValueError("disk num_queues: at most vcpus (Cloud Hypervisor's rule)")
        return self

    @property
    def multi_queue_tap(self) -> bool:
        """More than one queue pair: Cloud Hypervisor then opens its tap multi-queue, and
        refuses a tap made otherwise."""
        return (self.net.num_queues or 2) > 2

    def host_misfits(self, count: int) -> list[str]:
        out = super().host_misfits(count)
        if not self.hugepages:
            return out
        return out + list(filter(None, [hugepages.misfit("2M", count * self.memory)]))

    copies_once: ClassVar[str | None] = (
        "Cloud Hypervisor's migration copies guest memory in passes until the rest fits its "
        "downtime"
    )

    def refuses(self, operation: Operation) -> str | None:
        if operation == "migrate" and self.nic != "none" and not self.multi_queue_tap:
            return (
                "cloud-hypervisor: a migration's second Cloud Hypervisor attaches to the guest's "
                "tap while the first still holds it, which only a multi-queue tap allows "
                "(net: {num_queues: 4}, or nic: none)"
            )
        return None


@dataclass
class CloudHypervisorInstance(ApiVmmInstance):
    vmm: ClassVar[str] = "Cloud Hypervisor"
    driver: CloudHypervisorDriver | None = None

    def lifecycle(self) -> Lifecycle | None:
        return CloudHypervisorLifecycle(self.driver, self) if self.driver else None


def _queues(q: Queues) -> dict:
    return {k: v for k, v in q.model_dump().items() if k in ("num_queues", "queue_size") and v}


class CloudHypervisorDriver(ApiVmmDriver[CloudHypervisorSettings, CloudHypervisorInstance]):
    name: ClassVar[str] = "cloud-hypervisor"
    settings_model = CloudHypervisorSettings
    vmm_name: ClassVar[str] = "Cloud Hypervisor"
    install_hint: ClassVar[str] = (
        "install Cloud Hypervisor's release binary on PATH, or name it with binary:"
    )
    guest_modules: ClassVar[tuple[str, ...]] = ("virtio_pci", "vmw_vsock_virtio_transport")
    tap_tag: ClassVar[str] = "c"
    mac_byte: ClassVar[int] = 0x17

    @classmethod
    def disk_cache(cls, settings: CloudHypervisorSettings) -> str | None:
        if settings.disk.direct:
            return None
        return "Cloud Hypervisor virtio-blk without direct=on: the host page cache"

    def _instance(self, index: int) -> CloudHypervisorInstance:
        s = self.settings
        return CloudHypervisorInstance(self.platform, index, s.vcpus, s.memory >> 20)

    def _hugepage_size(self) -> str | None:
        return "2M" if self.settings.hugepages else None

    def _multi_queue_tap(self) -> bool:
        return self.settings.multi_queue_tap

    def data_settings(self) -> CloudHypervisorDisk:
        return self.settings.disk

    def data_description(self, data: DataImage) -> str:
        d = self.settings.disk
        what = "block device" if data.file is None else "raw image file"
        queues = ", ".join(f"{k}={v}" for k, v in _queues(d).items())
        return (
            f"{what} {data.path} on Cloud Hypervisor virtio-blk (virtio-pci), direct={d.direct}"
            + (f", {queues}" if queues else "")
        )

    def _data_device(self, inst: CloudHypervisorInstance, spec: GuestSpec) -> str:
        return find_disk(inst, DATA_SERIAL)

    @staticmethod
    def _probe(api: VmmApi) -> Endpoint:
        return CloudHypervisorApi(api).ping

    def _argv(self, api_socket: str, inst: CloudHypervisorInstance, log: Path | None) -> list[str]:
        return [self.opened.binary, "--api-socket", f"path={api_socket}"]

    def _boot(self, vmm: Vmm, inst: CloudHypervisorInstance, spec: GuestSpec, vsock: str) -> None:
        s = self.settings
        memory: dict = {"size": s.memory, "shared": s.shared}
        if s.hugepages:
            memory |= {"hugepages": True, "hugepage_size": 2 << 20}
        disks: list[dict[str, object]] = (
            [{"path": spec.root, "id": "rootfs", "image_type": "Raw"}] if spec.root else []
        )
        if spec.data:
            disks.append(
                # the image's type said, not guessed: a guessed raw image has its sector 0
                # made read-only (Cloud Hypervisor's guard against a guest writing a header)
                {
                    "path": spec.data.path,
                    "serial": DATA_SERIAL,
                    "direct": s.disk.direct,
                    "image_type": "Raw",
                }
                | _queues(s.disk)
            )
        config = {
            "cpus": {"boot_vcpus": s.vcpus, "max_vcpus": s.vcpus},
            "memory": memory,
            "payload": {"kernel": spec.kernel, "initramfs": spec.initrd, "cmdline": spec.cmdline},
            "disks": disks,
            "net": [{"tap": inst.tap, "mac": inst.mac} | _queues(s.net)] if inst.tap else [],
            "vsock": {"cid": GUEST_CID, "socket": vsock},
            "serial": {"mode": "Tty"},
            "console": {"mode": "Off"},
        }
        api = CloudHypervisorApi(vmm.api)
        api.create.put(config)
        vmm.guest_started = vmm.since_start()
        api.boot.put()


class CloudHypervisorApi:
    """Cloud Hypervisor's API, each action of its description (cloud-hypervisor-api.yaml) that
    hvbench calls named once."""

    def __init__(self, api: VmmApi) -> None:
        def action(name: str) -> Endpoint:
            return Endpoint(api, f"/api/v1/{name}")

        self.ping = action("vmm.ping")
        self.create, self.boot = action("vm.create"), action("vm.boot")
        self.pause, self.resume = action("vm.pause"), action("vm.resume")
        self.snapshot, self.restore = action("vm.snapshot"), action("vm.restore")
        self.send_migration = action("vm.send-migration")
        self.receive_migration = action("vm.receive-migration")


class CloudHypervisorLifecycle(Lifecycle):
    """Snapshot and restore (``vm.snapshot`` of the paused guest into a directory, then a new
    Cloud Hypervisor that ``vm.restore``s it and resumes), and live migration to a new Cloud
    Hypervisor (``vm.receive-migration`` there, ``vm.send-migration`` here)."""

    def __init__(self, driver: CloudHypervisorDriver, inst: CloudHypervisorInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Live-migrate to a second Cloud Hypervisor on this host over a Unix socket, memory
        copied as to another host (``local`` mode, which hands shared memory over, is its
        live upgrade instead); the destination attaches to the same multi-queue tap.

        The destination takes its configuration from the source, so it binds the guest's vsock
        socket at the source's path: the source's is moved aside first (the source keeps
        listening on it). The source, ending once the guest moved, unlinks that path, which is
        the destination's socket by then: a second name made for it while the move goes on
        (``os.link``) puts it back.

        ``total_s`` runs from the send call until the destination's receive call answered
        (the guest is there), timed here: the send call answers at once, as the move goes on
        in a thread of the source's, and Cloud Hypervisor reports no figures of its own (the
        guest's pause is the dirtier's)."""
        source = self.inst.process
        if source is None or not source.alive():
            raise InstanceError(
                f"{self.inst.name}: Cloud Hypervisor is not running ({self.inst.last_words()})"
            )
        ledger, workdir = self.driver.ledger, self.driver.workdir
        source.release_agent(deadline)  # a vsock connection does not survive the move
        vsock = Path(source.agent.path)
        [socket_res] = [r for r in self.inst.channels if r.name == str(vsock)]
        prefix = operation_path(workdir, self.inst, "in")
        channel = Path(f"{prefix}.migration.sock")
        aside, kept = Path(f"{vsock}.source"), Path(f"{vsock}.destination")
        made = [ledger.add("path", str(path)) for path in (channel, aside, kept)]
        target = [ledger.add("path", f"{prefix}.api.sock")]
        dest: Vmm | None = None
        calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="receive-migration")
        try:
            dest = self.driver.start_vmm(self.inst, prefix, (target[0].name, str(vsock)), target)
            receive = {"receiver_url": f"unix:{channel}"}
            receiving = calls.submit(
                _answered, CloudHypervisorApi(dest.api).receive_migration, receive
            )
            _wait_for(channel, "migration socket", deadline, dest)
            os.rename(vsock, aside)
            t0 = time.monotonic()
            send = {"destination_url": f"unix:{channel}"}
            CloudHypervisorApi(source.api).send_migration.put(send, timeout=deadline - t0)
            _wait_for(vsock, "vsock socket", deadline, dest)
            os.link(vsock, kept)
            total_s = _result(receiving, dest, deadline) - t0
            source.kill()
            if not vsock.exists():
                os.rename(kept, vsock)
            dest.wait_ready(deadline)
        except BaseException:
            if dest:
                dest.kill()
            if aside.exists():  # the source goes on where the move failed: its socket back
                vsock.unlink(missing_ok=True)
                os.rename(aside, vsock)
            for res in target:
                ledger.release(res)
            raise
        finally:
            calls.shutdown(wait=False)  # a receive still waiting ends with its killed VMM
            for res in made:
                ledger.release(res)
        for res in self.inst.channels:
            if res is not socket_res:
                ledger.release(res)
        self.inst.process, self.inst.channels = dest, [*target, socket_res]
        figures = {"total_s": total_s}
        raw = {"kind": "Cloud Hypervisor vm.send-migration over a Unix socket", "figures": figures}
        return OperationReport(figures, json.dumps(raw))

    def snapshot(self, deadline: float) -> OperationReport:
        """Pause and snapshot (``save_s``; ``size_mib``: the directory's files), end that
        Cloud Hypervisor, restore into a new one and resume until the guest's agent answers
        (``restore_s``, from the new process's start). The new process takes the same socket
        paths and tap, which the snapshot's configuration names."""
        vmm = self.inst.process
        if vmm is None or not vmm.alive():
            raise InstanceError(
                f"{self.inst.name}: Cloud Hypervisor is not running ({self.inst.last_words()})"
            )
        directory = self.driver.workdir / f"{self.inst.name}.snapshot"
        made = self.driver.ledger.add("path", str(directory))
        directory.mkdir()
        try:
            vmm.release_agent(deadline)
            t0 = time.monotonic()
            api = CloudHypervisorApi(vmm.api)
            api.pause.put()
            api.snapshot.put({"destination_url": f"file://{directory}"})
            save_s = time.monotonic() - t0
            size = sum(p.stat().st_size for p in directory.iterdir())
            api_socket, vsock = vmm.api.path, vmm.agent.path
            vmm.kill()
            while self.inst.channels:
                self.driver.ledger.release(self.inst.channels.pop())
            t1 = time.monotonic()
            prefix = operation_path(self.driver.workdir, self.inst, "in")
            channels: list[Resource] = [
                self.driver.ledger.add("path", p) for p in (api_socket, vsock)
            ]
            self.inst.channels = channels
            vmm = self.inst.process = self.driver.start_vmm(
                self.inst, prefix, (api_socket, vsock), channels
            )
            api = CloudHypervisorApi(vmm.api)
            api.restore.put({"source_url": f"file://{directory}"})
            api.resume.put()
            try:
                vmm.wait_ready(deadline)
            except CommandTimeout as e:
                raise InstanceError(f"{self.inst.name}: no answer after the restore ({e})") from e
            restore_s = time.monotonic() - t1
        finally:
            self.driver.ledger.release(made)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        raw = {"kind": "Cloud Hypervisor vm.snapshot, vm.restore", "figures": figures}
        return OperationReport(figures, json.dumps(raw))


def _wait_for(path: Path, what: str, deadline: float, vmm: Vmm) -> None:
    """Wait for a socket of the destination's, or raise with its last words. Polled each
    millisecond: the vsock socket must be given its second name before the source ends, which a
    small guest on a fast host may take well under a second to reach."""
    while not path.exists():
        if not vmm.alive() or time.monotonic() > deadline:
            raise vmm.failure(f"{vmm.name}: no {what} from the destination")
        time.sleep(0.001)


def _answered(endpoint: Endpoint, body: dict) -> float:
    """Make the call; when it answered (monotonic seconds). A destination's
    ``vm.receive-migration`` answers only once the guest arrived, so it runs beside the send."""
    endpoint.put(body, timeout=None)
    return time.monotonic()


def _result(call: Future[float], vmm: Vmm, deadline: float) -> float:
    """The call's answer, or its error, waited for until ``deadline``."""
    try:
        return call.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout as e:
        raise InstanceError(f"{vmm.name}: vm.receive-migration did not answer in time") from e
