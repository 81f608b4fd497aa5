"""QEMU guests (``driver: qemu``): KVM where it can run a stock guest, TCG otherwise.

Each instance is one QEMU process started inside the run's network namespace (so it can open its
tap on the run's bridge), booting a Debian kernel with an initramfs built from the host's own
tool binaries (hvbench.guest.image). Commands go through qemu-guest-agent on a virtio-serial
port, never through the NIC under test. The kernel console is QEMU's stdout, read by a thread
that timestamps the boot phases.

The machine (its settings, builder and devices) is ``qemu_machine``'s, which the libvirt driver
shares; one QEMU process and the KVM probe are ``qemu_process``'s.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from qemu.qmp.legacy import QEMUMonitorProtocol

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import (
    Availability,
    Driver,
    Lifecycle,
    MigrationPlan,
    OperationReport,
    operation_path,
)
from hvbench.drivers.disks import DATA_SERIAL, find_disk, mount_data_disk
from hvbench.drivers.qemu_devices import QEMU, Machine
from hvbench.drivers.qemu_machine import (
    BACKPORTS,
    MachineBuilder,
    QemuSettings,
    data_device,
    enable_queues,
    nic_device,
    root_disk,
)
from hvbench.drivers.qemu_process import Guest, kvm_verdict
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest.agent import GuestAgent
from hvbench.host.network import tap_and_mac
from hvbench.host.process import executable, probe, which
from hvbench.host.resources import Resource
from hvbench.store import WhatRan

MIGRATION_POLL_S = 0.05
"""Seconds between two query-migrate of a migration in progress."""


@functools.cache
def qemu_version(binary: str) -> str:
    """The first line of ``--version`` (with Debian's package version), for the provenance."""
    out = probe([binary, "--version"])
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


# instances and the driver -----------------------------------------------------------------


@dataclass
class QemuInstance(AgentInstance):
    vmm: ClassVar[str] = "QEMU"
    guest: Guest | None = None
    channels: list[Resource] = field(default_factory=list)
    """What belongs to the QEMU process running the instance now (the process, its QMP and
    agent sockets, its tap): replaced when the instance migrates or is restored; its
    ``resources`` are what outlives one QEMU process (its disks)."""
    driver: QemuDriver | None = None
    """The driver that started it, for the operations that start a second QEMU."""

    def agent_channel(self) -> GuestAgent | None:
        return self.guest.agent if self.guest else None

    def running(self) -> Guest:
        """The QEMU running the instance; InstanceError, with its last words, where none does."""
        guest = self.guest
        if guest is None or not guest.alive():
            raise InstanceError(f"{self.name}: QEMU is not running ({self.last_words()})")
        return guest

    def kill(self) -> None:
        if self.guest:
            self.guest.kill()

    def last_words(self) -> str:
        return self.guest.last_words() if self.guest else "never started"

    def host_pids(self) -> list[int]:
        return [self.guest.proc.pid] if self.guest and self.guest.alive() else []

    def alive(self) -> bool:
        return self.guest is not None and self.guest.alive()

    def lifecycle(self) -> Lifecycle | None:
        return QemuLifecycle(self.driver, self) if self.driver else None


class QemuDriver(Driver[QemuSettings, QemuInstance, MachineBuilder]):
    """QEMU guests; what ``open`` resolves is the platform's machine (``MachineBuilder``)."""

    name: ClassVar[str] = "qemu"
    settings_model = QemuSettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pins: dict[str, list[int]] = {}
        self._reserved: list[Resource] = []
        self._net_queues: dict[str, str] = {}

    @classmethod
    def check(cls) -> Availability:
        binary = executable(QEMU)
        if binary is None:
            return Availability(False, f"{QEMU} not found", "apt-get install qemu-system-x86")
        if not which("qemu-ga"):
            return Availability(False, "qemu-ga not found", "apt-get install qemu-guest-agent")
        try:
            verdict = kvm_verdict(binary)
        except HvbenchError as e:
            return Availability(True, f"TCG (KVM probe could not run: {e})")
        backports = executable(BACKPORTS)
        other = (
            f"binary: {BACKPORTS} runs {qemu_version(backports)}"
            if backports
            else f"QEMU 10.0 for binary: {BACKPORTS}: ./setup.sh --with-qemu-backports"
        )
        return Availability(True, f"accel auto -> {verdict.accel}: {verdict.reason}; {other}")

    @classmethod
    def ran_by_settings(cls, settings: QemuSettings) -> WhatRan:
        return MachineBuilder.ran_by_settings(settings)

    def _resolve(self) -> MachineBuilder:
        return MachineBuilder.resolve(self.platform, self.settings, self.needs, None)

    def _prepare(self, count: int) -> None:
        if self.settings.nic != "none":
            self.network.up()  # once, before the instances' threads add their taps
        self._reserved = self.opened.reserve_hugepages(self.ledger, count)
        self._pins, self._net_queues = {}, {}  # the group's, for describe

    def _instance(self, index: int) -> QemuInstance:
        s = self.settings
        return QemuInstance(self.platform, index, s.vcpus, s.memory >> 20)

    def _started(self, instances: list[QemuInstance]) -> None:
        if self.settings.pin:
            self._pin(instances, os.cpu_count() or 1)

    def _start_one(self, inst: QemuInstance, deadline: float) -> None:
        s = self.settings
        prefix = self.workdir / f"{self.platform}-{inst.index}"
        if s.nic != "none":
            inst.address = self.network.address(inst.index)
        builder = self.opened
        machine = builder.machine(inst.index, prefix, inst.address)
        made = inst.resources
        if builder.rootfs:
            machine.disks.append(root_disk(builder.rootfs, self.ledger, prefix, made))
        if self.needs.data_disk:
            image, description = builder.data_disk(self, prefix, made)
            machine.disks.append(data_device(s, image.path))
        guest = inst.guest = self.launch(inst, machine, prefix, inst.channels)
        boot_deadline = min(deadline, time.monotonic() + s.boot_timeout)
        try:
            guest.wait_ready(boot_deadline)
        except CommandTimeout as e:
            raise InstanceError(f"{inst.name}: not ready in time ({e})") from e
        inst.boot = guest.console.boot_phases()
        if s.queues > 1:
            self._net_queues[inst.name] = enable_queues(inst, s.queues)
        if self.needs.data_disk:
            device = find_disk(inst, DATA_SERIAL)
            mount_data_disk(inst, device, description, formatted=image.formatted)

    def launch(
        self, inst: QemuInstance, machine: Machine, prefix: Path, made: list[Resource]
    ) -> Guest:
        """Start a QEMU for the instance with channels of its own, recorded in ``made``: QMP
        and agent sockets named after ``prefix`` and, with a NIC, a fresh tap on the run's
        bridge with the instance's MAC (a migration's destination gets its own, as on a second
        host, and announces the guest there)."""
        s = self.settings
        machine = replace(
            machine, agent_socket=f"{prefix}.agent.sock", qmp_socket=f"{prefix}.qmp.sock", nics=[]
        )
        for sock in (machine.agent_socket, machine.qmp_socket):
            made.append(self.ledger.add("path", sock))
        netns = None
        if s.nic != "none":
            tap, mac = tap_and_mac("q", 0x12, inst.index)
            made.append(self.network.add_tap(tap, multi_queue=s.queues > 1))
            machine.nics.append(nic_device(s, tap, mac))
            netns = self.network.netns
        guest = Guest.launch(machine, prefix, self.ledger, netns)
        made.append(guest.process)
        return guest

    def _pin(self, instances: list[QemuInstance], cores: int) -> None:
        slot = 0
        for inst in instances:
            threads = inst.running().vcpu_threads()
            self._pins[inst.name] = []
            for tid in threads:
                core = slot % cores
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, {core})
                    self._pins[inst.name].append(core)
                slot += 1

    def _end(self, inst: QemuInstance) -> None:
        """Release the instance's channels (its QEMU process among them) before its disks,
        and let its console's reader end."""
        if inst.guest:
            inst.guest.agent.close()
        while inst.channels:
            self.ledger.release(inst.channels.pop())
        if inst.guest:
            inst.guest.console.join(5)

    def _stopped(self, instances: list[QemuInstance]) -> None:
        while self._reserved:  # after the guests that held them
            self.ledger.release(self._reserved.pop())

    def describe(self) -> dict:
        info = super().describe()
        if self.is_open:
            builder = self.opened
            qemu = qemu_version(builder.binary)
            info["resolved"] = {**builder.resolved(qemu, self._pins), "qemu_binary": builder.binary}
            if self._net_queues:
                info["resolved"]["net_queues"] = self._net_queues
            info |= builder.images()
        return info

    def what_ran(self) -> WhatRan:
        return self.opened.what_ran() if self.is_open else super().what_ran()


class QemuLifecycle(Lifecycle):
    """Migration and snapshot/restore through QMP: the instance moves to a second QEMU started
    with ``-incoming defer`` on this host (same disk files, new sockets and tap), which then
    becomes the instance; the first is killed and its channels released."""

    def __init__(self, driver: QemuDriver, inst: QemuInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """Pre-copy over a UNIX socket; with ``postcopy`` the switch to post-copy comes after
        the first full pass (as libvirt's POSTCOPY_AFTER_PRECOPY); ``auto_converge`` lets QEMU
        throttle the guest's vCPUs when the copy does not converge."""
        src = self.inst.running()
        sock = self._path("migrate.sock")
        caps = _capabilities(postcopy=plan.postcopy, auto_converge=plan.auto_converge)
        dest, made = self._incoming(src.machine, deadline, caps, f"unix:{sock.name}")
        try:
            with src.monitor(deadline) as qmp:
                qmp.cmd("migrate-set-capabilities", capabilities=caps)
                params = qmp.cmd("query-migrate-parameters")
                qmp.cmd("migrate", uri=f"unix:{sock.name}")
                info, throttle = _follow(qmp, src.machine.name, deadline, plan.postcopy)
            self._ready(dest, deadline)
        except BaseException:
            self._abandon(dest, made)
            raise
        finally:
            self.driver.ledger.release(sock)
        self._switch(dest, made)
        ram = info.get("ram", {})
        figures = {
            "total_s": info["total-time"] / 1000,
            "downtime_ms": float(info["downtime"]),
            "setup_ms": float(info.get("setup-time", 0)),
            "transferred_mib": ram.get("transferred", 0) / (1 << 20),
            "passes": float(ram.get("dirty-sync-count", 0)),
        }
        if plan.auto_converge:
            figures["throttle_pct"] = float(throttle)
        raw = json.dumps({"plan": vars(plan), "parameters": params, "query-migrate": info})
        return OperationReport(figures, raw)

    def snapshot(self, deadline: float) -> OperationReport:
        """Save: migrate to a file the host opened and passed to QEMU (``fd:``), after which
        the paused source is killed. Restore: a fresh QEMU reads it back through an ``fd:`` of
        its own; timed from that QEMU's start until the guest's agent answers."""
        src = self.inst.running()
        image = self._path("snapshot")
        t0 = time.monotonic()
        with open(image.name, "wb") as out, src.monitor(deadline) as qmp:
            # a QEMU that was a post-copy destination still has the capability, which a file
            # cannot carry (no return path)
            qmp.cmd("migrate-set-capabilities", capabilities=_capabilities(False, False))
            qmp.send_fd_scm(out.fileno())
            qmp.cmd("getfd", fdname="snapshot")
            qmp.cmd("migrate", uri="fd:snapshot")
            info, _ = _follow(qmp, src.machine.name, deadline, postcopy=False)
        save_s = time.monotonic() - t0
        size = os.path.getsize(image.name)
        self._switch(None, [])  # a saved guest is ended, as `virsh save` does
        t1 = time.monotonic()
        with open(image.name, "rb") as source:
            dest, made = self._incoming(src.machine, deadline, [], "fd:snapshot", source.fileno())
        try:
            self._ready(dest, deadline)
        except BaseException:
            self._abandon(dest, made)
            raise
        restore_s = time.monotonic() - t1
        self._switch(dest, made)
        self.driver.ledger.release(image)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        return OperationReport(figures, json.dumps({"query-migrate": info, "bytes": size}))

    # steps -----------------------------------------------------------------------------

    def _path(self, what: str) -> Resource:
        """A file or socket of the operation in the run's directory, in the ledger."""
        path = self.driver.workdir / f"{self.inst.name}.{what}"
        return self.driver.ledger.add("path", str(path))

    def _incoming(
        self, machine: Machine, deadline: float, caps: list[dict], uri: str, fd: int | None = None
    ) -> tuple[Guest, list[Resource]]:
        """A second QEMU for the instance (as ``machine``), waiting for its stream at ``uri``
        with the capabilities the source will have (post-copy must be on at both ends); ``fd``
        is passed to it as ``fdname=snapshot`` first."""
        prefix = operation_path(self.driver.workdir, self.inst, "in")
        made: list[Resource] = []
        try:
            dest = self.driver.launch(self.inst, replace(machine, incoming=True), prefix, made)
            with dest.monitor(deadline) as qmp:
                if caps:
                    qmp.cmd("migrate-set-capabilities", capabilities=caps)
                if fd is not None:
                    qmp.send_fd_scm(fd)
                    qmp.cmd("getfd", fdname="snapshot")
                qmp.cmd("migrate-incoming", uri=uri)
        except BaseException:
            while made:
                self.driver.ledger.release(made.pop())
            raise
        return dest, made

    def _ready(self, dest: Guest, deadline: float) -> None:
        """The destination runs the guest once its agent answers through its own socket."""
        try:
            dest.wait_ready(deadline)
        except CommandTimeout as e:
            raise InstanceError(f"{self.inst.name}: no answer after the move ({e})") from e

    def _switch(self, dest: Guest | None, made: list[Resource]) -> None:
        """End the instance's current QEMU and release its channels; ``dest`` (with its
        channels) is the instance from now on."""
        old, channels = self.inst.guest, self.inst.channels
        if old is not None:
            old.kill()
        while channels:
            self.driver.ledger.release(channels.pop())
        self.inst.guest, self.inst.channels = dest, made

    def _abandon(self, dest: Guest, made: list[Resource]) -> None:
        dest.kill()
        while made:
            self.driver.ledger.release(made.pop())


def _capabilities(postcopy: bool, auto_converge: bool) -> list[dict]:
    """migrate-set-capabilities' argument: every capability hvbench uses, on or off."""
    states = {"postcopy-ram": postcopy, "auto-converge": auto_converge}
    return [{"capability": name, "state": on} for name, on in states.items()]


def _follow(
    qmp: QEMUMonitorProtocol, name: str, deadline: float, postcopy: bool
) -> tuple[dict[str, Any], int]:
    """Poll query-migrate until the migration completed; switch to post-copy after the first
    pass where asked; cancel it past ``deadline``. Returns the last answer and the highest CPU
    throttle seen (auto-converge)."""
    switched, throttle = False, 0
    while True:
        info = qmp.cmd("query-migrate")
        if not isinstance(info, dict):
            raise InstanceError(f"{name}: query-migrate answered {info!r}")
        status = info.get("status")
        throttle = max(throttle, int(info.get("cpu-throttle-percentage", 0)))
        if status == "completed":
            return info, throttle
        if status in ("failed", "cancelled"):
            raise InstanceError(f"{name}: migration {status}: {info.get('error-desc', '')}")
        ram = info.get("ram", {})
        if postcopy and not switched and status == "active" and ram.get("dirty-sync-count", 0) > 1:
            qmp.cmd("migrate-start-postcopy")
            switched = True
        if time.monotonic() > deadline:
            qmp.cmd("migrate_cancel")
            raise InstanceError(
                f"{name}: migration not done in time ({status}, "
                f"{ram.get('transferred', 0) >> 20} MiB sent, {ram.get('dirty-sync-count', 0)} "
                "passes): raise the workload's timeout or lower its dirty rate"
            )
        time.sleep(MIGRATION_POLL_S)
