"""Firecracker guests (``driver: firecracker``): the microVM VMM behind AWS Lambda and Fargate.

One Firecracker process per guest, configured through its API socket (``api_vmm``): the
Debian kernel's ``vmlinux`` with hvbench's initramfs, virtio-mmio devices that the guest finds
in ACPI (virtio-net on a tap of the run's bridge, virtio-blk for the data disk, whose drive id
the guest reads as its serial), and qemu-guest-agent on virtio-vsock. Firecracker runs only on
KVM; it has no PCI, no emulated NICs or disks, no live migration.

Its snapshots (``FirecrackerLifecycle.snapshot``) are what it offers instead of migration: a
full snapshot, then a diff snapshot of what the guest wrote since, merged onto the full one as
Firecracker's documentation says (its pages copied over the base's), and a new Firecracker that
loads it: a restore from a snapshot, stated as such, never called a migration.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import model_validator

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
from hvbench.drivers.disks import DataImage, find_disk
from hvbench.drivers.vmm_api import Endpoint, VmmApi
from hvbench.errors import CommandTimeout, InstanceError
from hvbench.host import hugepages
from hvbench.host.resources import Resource


class FirecrackerDisk(RawDisk):
    """The data disk on Firecracker's virtio-blk."""

    io_engine: Literal["Sync", "Async"] = "Sync"
    """Firecracker's block I/O engine: Sync (its own thread, blocking) or Async (io_uring)."""
    cache_type: Literal["Unsafe", "Writeback"] = "Unsafe"
    """Unsafe ignores the guest's flushes; Writeback passes them to the host (fsync)."""


class FirecrackerSettings(ApiVmmSettings):
    driver: Literal["firecracker"]
    binary: str = "firecracker"
    smt: bool = False
    """Simultaneous multithreading in the guest (vCPUs as sibling pairs)."""
    cpu_template: Literal["None", "C3", "T2", "T2S", "T2CL", "T2A"] = "None"
    """A static CPU template: the CPU features the guest sees, masked as on an instance type
    (T2A for AMD hosts; C3, T2, T2S, T2CL for Intel)."""
    hugepages: Literal["none", "2M"] = "none"
    """Guest memory on the host's 2M hugetlbfs pages (reserved for the run, given back after)."""
    track_dirty_pages: bool = False
    """KVM's dirty page log, so that a diff snapshot holds only the pages written since the
    last one; without it Firecracker takes the pages resident on the host (mincore)."""
    disk: FirecrackerDisk = FirecrackerDisk()

    @model_validator(mode="after")
    def _vcpus(self) -> FirecrackerSettings:
        if self.vcpus > 1 and self.vcpus % 2:
            raise ValueError("vcpus: 1 or an even number (Firecracker's rule)")
        return self

    def host_misfits(self, count: int) -> list[str]:
        out = super().host_misfits(count)
        if self.hugepages == "none":
            return out
        return out + list(filter(None, [hugepages.misfit(self.hugepages, count * self.memory)]))

    no_lifecycle: ClassVar[str] = (
        "has no live migration (Firecracker restores from a snapshot instead: workload snapshot)"
    )

    def refuses(self, operation: Operation) -> str | None:
        if operation == "migrate":
            return f"the firecracker driver {self.no_lifecycle}"
        if self.hugepages != "none":
            return (
                "firecracker: a snapshot of guest memory on hugetlbfs pages loads only through "
                "a userfaultfd handler, which hvbench does not run (hugepages: none)"
            )
        return None


@dataclass
class FirecrackerInstance(ApiVmmInstance):
    vmm: ClassVar[str] = "Firecracker"
    driver: FirecrackerDriver | None = None

    def lifecycle(self) -> Lifecycle | None:
        return FirecrackerLifecycle(self.driver, self) if self.driver else None


class FirecrackerDriver(ApiVmmDriver[FirecrackerSettings, FirecrackerInstance]):
    name: ClassVar[str] = "firecracker"
    settings_model = FirecrackerSettings
    vmm_name: ClassVar[str] = "Firecracker"
    install_hint: ClassVar[str] = (
        "install Firecracker's release binary on PATH, or name it with binary:"
    )
    guest_modules: ClassVar[tuple[str, ...]] = ("virtio_mmio", "vmw_vsock_virtio_transport")
    tap_tag: ClassVar[str] = "f"
    mac_byte: ClassVar[int] = 0x16

    @classmethod
    def disk_cache(cls, settings: FirecrackerSettings) -> str | None:
        if settings.disk.backing == "block":
            return "Firecracker virtio-blk: the host page cache of the block device"
        return "Firecracker virtio-blk: the host page cache of the image file (no O_DIRECT)"

    def _instance(self, index: int) -> FirecrackerInstance:
        s = self.settings
        return FirecrackerInstance(self.platform, index, s.vcpus, s.memory >> 20)

    def _hugepage_size(self) -> str | None:
        return None if self.settings.hugepages == "none" else self.settings.hugepages

    def data_settings(self) -> FirecrackerDisk:
        return self.settings.disk

    def data_description(self, data: DataImage) -> str:
        d = self.settings.disk
        what = "block device" if data.file is None else "raw image file"
        return (
            f"{what} {data.path} on Firecracker virtio-blk (virtio-mmio), "
            f"io_engine={d.io_engine}, cache_type={d.cache_type}"
        )

    def describe(self) -> dict:
        info = super().describe()
        if "resolved" in info:  # none is configured: Firecracker's devices then run unlimited
            info["resolved"]["rate_limiters"] = "none"
        return info

    def _data_device(self, inst: FirecrackerInstance, spec: GuestSpec) -> str:
        """Firecracker's drives appear in the order they were configured (its virtio-blk
        serial is an id of the host file, not the drive's): the root filesystem's first."""
        return find_disk(inst, "vdb" if spec.root else "vda", by="name")

    def _log_file(self, prefix: Path, made: list[Resource]) -> Path | None:
        log = prefix.with_suffix(".firecracker.log")
        made.append(self.ledger.add("path", str(log)))
        log.write_bytes(b"")
        return log

    @staticmethod
    def _probe(api: VmmApi) -> Endpoint:
        return FirecrackerApi(api).instance

    def _argv(self, api_socket: str, inst: FirecrackerInstance, log: Path | None) -> list[str]:
        return [
            self.opened.binary,
            "--api-sock", api_socket,
            "--id", inst.name,
            "--log-path", str(log),
            "--level", "Info",
        ]  # fmt: skip

    def _boot(self, vmm: Vmm, inst: FirecrackerInstance, spec: GuestSpec, vsock: str) -> None:
        s, api = self.settings, FirecrackerApi(vmm.api)
        api.machine_config.put(
            {
                "vcpu_count": s.vcpus,
                "mem_size_mib": s.memory >> 20,
                "smt": s.smt,
                "track_dirty_pages": s.track_dirty_pages,
                "huge_pages": "None" if s.hugepages == "none" else s.hugepages,
                "cpu_template": s.cpu_template,
            },
        )
        boot = {"kernel_image_path": spec.kernel, "initrd_path": spec.initrd}
        api.boot_source.put(boot | {"boot_args": spec.cmdline})
        drives: list[tuple[str, str, dict[str, str]]] = (
            [("rootfs", spec.root, {})] if spec.root else []
        )
        if spec.data:
            engine: dict[str, str] = {
                "io_engine": s.disk.io_engine,
                "cache_type": s.disk.cache_type,
            }
            drives.append(("data", spec.data.path, engine))
        for drive_id, path, extra in drives:
            api.drive(drive_id).put(
                {"drive_id": drive_id, "path_on_host": path, "is_root_device": False,
                 "is_read_only": False, **extra},
            )  # fmt: skip
        if inst.tap:
            api.network_interface("eth0").put(
                {"iface_id": "eth0", "host_dev_name": inst.tap, "guest_mac": inst.mac}
            )
        api.vsock.put({"guest_cid": GUEST_CID, "uds_path": vsock})
        vmm.guest_started = vmm.since_start()
        api.actions.put({"action_type": "InstanceStart"})


class FirecrackerApi:
    """Firecracker's API, each path of its description (firecracker-api.yaml) named once."""

    def __init__(self, api: VmmApi) -> None:
        self._api = api
        self.instance = Endpoint(api, "/")
        self.machine_config = Endpoint(api, "/machine-config")
        self.boot_source = Endpoint(api, "/boot-source")
        self.vsock = Endpoint(api, "/vsock")
        self.actions = Endpoint(api, "/actions")
        self.vm = Endpoint(api, "/vm")
        self.snapshot_create = Endpoint(api, "/snapshot/create")
        self.snapshot_load = Endpoint(api, "/snapshot/load")

    def drive(self, drive_id: str) -> Endpoint:
        return Endpoint(self._api, f"/drives/{drive_id}")

    def network_interface(self, iface_id: str) -> Endpoint:
        return Endpoint(self._api, f"/network-interfaces/{iface_id}")


@dataclass(frozen=True)
class SnapshotFiles:
    """One Firecracker snapshot's two files, each in the ledger: the microVM's state and its
    guest memory."""

    state: Resource
    memory: Resource


class FirecrackerLifecycle(Lifecycle):
    """Snapshots of a running guest: full, then diff, merged and loaded by a new Firecracker."""

    def __init__(self, driver: FirecrackerDriver, inst: FirecrackerInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        raise InstanceError(f"{self.inst.name}: {FirecrackerSettings.no_lifecycle}")

    def snapshot(self, deadline: float) -> OperationReport:
        """Pause and save a full snapshot (``save_s``, ``size_mib``: state and memory); resume,
        let the guest answer once, pause and save a diff snapshot (``diff_save_s``,
        ``diff_size_mib``: the bytes its sparse memory file holds); end that Firecracker, merge
        the diff's pages onto the full memory file, and load the result into a new one until
        the guest's agent answers (``restore_s``, from the new process's start)."""
        vmm = self._running()
        full, diff = self._files(""), self._files("diff-")
        vmm.release_agent(deadline)
        save_s = self._save(vmm, "Full", full)
        size = sum(os.path.getsize(res.name) for res in (full.state, full.memory))
        FirecrackerApi(vmm.api).vm.patch({"state": "Resumed"})
        vmm.release_agent(deadline)  # the guest answers between the two: what the diff holds
        diff_save_s = self._save(vmm, "Diff", diff)
        diff_bytes = os.path.getsize(diff.state.name) + os.stat(diff.memory.name).st_blocks * 512
        self._end_process()
        merge_layer(Path(diff.memory.name), Path(full.memory.name))
        t0 = time.monotonic()
        prefix = operation_path(self.driver.workdir, self.inst, "in")
        made = [full.memory]  # backs the guest's memory while it runs
        sockets = (f"{prefix}.api.sock", f"{prefix}.vsock")
        try:
            made += [self.driver.ledger.add("path", p) for p in sockets]
            vmm = self.driver.start_vmm(self.inst, prefix, sockets, made)
            FirecrackerApi(vmm.api).snapshot_load.put(
                {
                    "snapshot_path": diff.state.name,
                    "mem_backend": {"backend_type": "File", "backend_path": full.memory.name},
                    "track_dirty_pages": self.driver.settings.track_dirty_pages,
                    "vsock_override": {"uds_path": sockets[1]},
                    "resume_vm": True,
                },
            )
            self.inst.process, self.inst.channels = vmm, made
            try:
                vmm.wait_ready(deadline)
            except CommandTimeout as e:
                raise InstanceError(f"{self.inst.name}: no answer after the restore ({e})") from e
        except BaseException:
            self._end_process()
            raise
        finally:
            for res in (full.state, diff.state, diff.memory):
                self.driver.ledger.release(res)
        figures = {
            "save_s": save_s,
            "size_mib": size / (1 << 20),
            "restore_s": time.monotonic() - t0,
            "diff_save_s": diff_save_s,
            "diff_size_mib": diff_bytes / (1 << 20),
        }
        raw = {"kind": "Firecracker snapshot: full, then diff merged onto it, loaded"}
        return OperationReport(figures, json.dumps(raw | {"figures": figures}))

    def _running(self) -> Vmm:
        vmm = self.inst.process
        if vmm is None or not vmm.alive():
            raise InstanceError(
                f"{self.inst.name}: Firecracker is not running ({self.inst.last_words()})"
            )
        return vmm

    @staticmethod
    def _save(vmm: Vmm, kind: str, files: SnapshotFiles) -> float:
        """Pause the guest and write a snapshot of ``kind``; the seconds both took."""
        t0 = time.monotonic()
        api = FirecrackerApi(vmm.api)
        api.vm.patch({"state": "Paused"})
        api.snapshot_create.put(
            {
                "snapshot_type": kind,
                "snapshot_path": files.state.name,
                "mem_file_path": files.memory.name,
            }
        )
        return time.monotonic() - t0

    def _files(self, kind: str) -> SnapshotFiles:
        """A snapshot's files (``kind``: "" for a full one, "diff-" for a diff), in the ledger."""
        prefix = self.driver.workdir / f"{self.inst.name}.snapshot-{kind}"
        add = self.driver.ledger.add
        return SnapshotFiles(add("path", f"{prefix}state"), add("path", f"{prefix}mem"))

    def _end_process(self) -> None:
        """End the instance's Firecracker and release its channels (a saved guest ends, as
        after ``virsh save``)."""
        if self.inst.process:
            self.inst.process.kill()
        while self.inst.channels:
            self.driver.ledger.release(self.inst.channels.pop())


def merge_layer(layer: Path, base: Path) -> None:
    """Copy a diff snapshot's memory file over its base: the pages the sparse layer holds
    (its data extents, found with SEEK_DATA and SEEK_HOLE) at their offsets, as Firecracker's
    snapshot-editor rebases a layer."""
    with layer.open("rb") as src, base.open("r+b") as dst:
        fd, end, offset = src.fileno(), os.fstat(src.fileno()).st_size, 0
        while offset < end:
            try:
                data = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past offset
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            done = data
            while done < hole:
                done += os.copy_file_range(fd, dst.fileno(), hole - done, done, done)
            offset = hole
