"""Xen domains (``mode: pv | pvh | hvm``) from dom0: what the xen driver (``drivers.xen``, through
xl) and libvirt's Xen half (``drivers.libvirt_xen``, through libvirtd) share.

Each instance is one domain made from an xl configuration this driver writes: the guest image's
kernel and initramfs booted directly, ``vcpus`` and ``memory``, the data disk on blkback (``phy:``,
a loop device with direct I/O over a sparse file, or a block device the user names) or on QEMU's
qdisk backend (``file:``), and one NIC: netfront in PV and PVH, netfront or an emulated e1000 or
rtl8139 in HVM. ``xl create`` starts it and ``xl destroy`` ends it; the ledger destroys any domain
a killed run left.

Control channel: the domain's console, which xenconsoled (PV, PVH) or the device model (HVM's
emulated serial port) exposes as a pty in dom0. qemu-guest-agent runs on the guest's end of that
line (``hvbench.agent=`` on the kernel command line; the guest stops printing kernel messages there
once booted), and a relay serves the pty on a unix socket, so the host side is the same GuestAgent
as for QEMU and UML. The console's boot messages before that are kept in the instance's log.

Root filesystem (``Needs.userland``: consolidation's servers, kernbench): the Debian image of
``guest.userland`` on ``xvda`` through QEMU's qdisk backend, as a qcow2 overlay of the cached image
(copy-on-write, as the qemu driver boots it), which the initramfs mounts and switches to
(``hvbench.root=/dev/xvda``).

Lifecycle (``XenLifecycle``): ``xl save`` to a file in the run's directory and ``xl restore``
from it; ``xl migrate`` to this host itself, pre-copy only (xl has no post-copy or auto-converge).
Either way the instance's domain is a new one (a new id, console pty and NIC backends) under the
same name: the driver lets go of the old one's and takes up the new one's (``_detach``,
``_attach``).

Network: the NIC's backend in dom0 (``vifD.0``, and ``vifD.0-emu`` for an emulated NIC) is made by
xl with a hotplug script that only reports it connected; the driver then moves it into the run's
namespace onto its bridge, as libvirt's taps are (RunNetwork.adopt_tap), so dom0's own network is
never touched.

Host CPU: a domain's vCPUs run on Xen, not in dom0's processes. An instance's CPU is its device
model's in dom0 plus its vCPU time as Xen accounts it (``xl list``); the host's is dom0's states
with every other domain's vCPU time as guest time, on all physical CPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import termios
import time
import tty
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_args

from pydantic import PositiveInt, model_validator

from hvbench.drivers.agent_instance import AgentInstance
from hvbench.drivers.base import (
    Availability,
    BootPhases,
    Driver,
    Lifecycle,
    MigrationPlan,
    Operation,
    OperationReport,
    PlatformSettings,
    operation_path,
)
from hvbench.drivers.disks import DataImage, HostDisk, mount_data_disk
from hvbench.drivers.footprint import KVM_PACE, Pace
from hvbench.drivers.last_words import last_words
from hvbench.drivers.serial_relay import LineRelay
from hvbench.errors import CommandTimeout, HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import userland
from hvbench.guest.agent import GuestAgent
from hvbench.host.monitor import HostCpuSource, read_proc_stat
from hvbench.host.network import PREFIX
from hvbench.host.process import ExecResult, processes, run_bounded, time_left
from hvbench.host.resources import Resource, resource_name
from hvbench.host.storage import make_image
from hvbench.store import WhatRan
from hvbench.units import Size

CAPABILITIES = Path("/proc/xen/capabilities")
XL_TIMEOUT = 300.0
"""Seconds an xl command may take: domain building is slow under nested emulation."""
ALIVE_EVERY = 2.0
"""Seconds a liveness answer is reused: each asks xl, which is not free in dom0."""
HOTPLUG = """#!/bin/sh
# hvbench's hotplug script for its domains' devices. A NIC's backend is only reported connected:
# hvbench itself moves it into its run's network namespace, so dom0's network stays as it was. A
# disk's block device, which hvbench attached itself (a loop device with direct I/O, or the
# user's), is handed to blkback as it is: Xen's block script would set up and check it again.
case "$1/$XENBUS_TYPE" in
online/vif)
    xenstore-write "$XENBUS_PATH/hotplug-status" connected ;;
add/vbd)
    dev="$(xenstore-read "$XENBUS_PATH/params")"
    xenstore-write "$XENBUS_PATH/physical-device" "$(stat -L -c %t:%T "$dev")" \\
        "$XENBUS_PATH/physical-device-path" "$dev" "$XENBUS_PATH/hotplug-status" connected ;;
esac
exit 0
"""
GUEST_LINE = {"pv": "/dev/hvc0", "pvh": "/dev/hvc0", "hvm": "/dev/ttyS0"}
"""The guest's end of the console line its agent uses."""
CONSOLE_KEY = {"pv": "console/tty", "pvh": "console/tty", "hvm": "serial/0/tty"}
"""Where xenstore names the dom0 pty of that line, under /local/domain/<domid>/."""
DATA_DEVICE = "/dev/xvdb"
ROOT_DEVICE = "/dev/xvda"
LOCAL_SSH = "sh -c 'shift; exec \"$@\"' ssh"
"""What ``xl migrate -s`` runs instead of ssh: it gets the host and the receiving xl's command
line and runs that command here (migration to this host, no sshd involved)."""
NO_LOG_DIRTY = "Failed to enable logdirty: 95,"
"""libxc's word that Xen cannot track the domain's dirty pages (EOPNOTSUPP): a PV domain's need
shadow paging, which Debian's Xen 4.17 is built without (no CONFIG_SHADOW_PAGING)."""
NIC_MODULE = {"e1000": "e1000", "rtl8139": "8139cp"}
"""Guest drivers of the emulated NICs."""


class XenDisk(HostDisk):
    """The data disk: blkback over a loop device or block device (``phy``), or QEMU's qdisk over
    the file itself (``qdisk``, HVM's and PV's userspace backend)."""

    backend: Literal["phy", "qdisk"] = "phy"

    @model_validator(mode="after")
    def _consistent(self) -> XenDisk:
        if self.backing == "block" and not self.path:
            raise ValueError("backing: block needs a path (a partition or LV)")
        if self.backend == "qdisk" and self.backing == "block":
            raise ValueError("backend: qdisk takes a file; use backend: phy for a block device")
        return self


Mode = Literal["pv", "pvh", "hvm"]


class XenSettings(PlatformSettings):
    driver: Literal["xen", "libvirt"]
    """``libvirt`` for the same domains through libvirt (``LibvirtXenSettings``)."""
    mode: Mode = "pv"
    vcpus: PositiveInt = 1
    memory: Size = 512 << 20
    nic: Literal["netfront", "e1000", "rtl8139", "none"] = "netfront"
    """netfront: the PV NIC (any mode); e1000, rtl8139: emulated by the device model (HVM)."""
    disk: XenDisk = XenDisk()
    tsc_mode: Literal["default", "always_emulate", "native", "native_paravirt"] = "default"
    """xl's tsc_mode: whether Xen traps and emulates the guest's RDTSC/RDTSCP (timekeeping
    costs differ markedly between modes)."""
    kernel_args: str = ""
    boot_timeout: float = 600
    """Seconds from ``xl create`` to the agent's first answer."""

    @model_validator(mode="after")
    def _consistent(self) -> XenSettings:
        if self.nic in ("e1000", "rtl8139") and self.mode != "hvm":
            raise ValueError(f"nic: {self.nic} is emulated, which only mode: hvm has")
        if self.memory < 128 << 20:
            raise ValueError("memory: at least 128M")
        return self

    def pace(self, kvm: bool) -> Pace:
        """A domain runs on Xen with the hardware's virtualization (or paravirtualized), as a
        KVM guest does: not measured (this host runs no Xen but nested under TCG, where the
        labs' figures are TCG's), KVM's figures stand in."""
        return KVM_PACE

    copies_once: ClassVar[str | None] = "xl migrates by pre-copy alone"

    def refuses(self, operation: Operation) -> str | None:
        return None  # xl saves, restores and migrates every domain it makes


def _xl(*args: str, timeout: float = XL_TIMEOUT) -> ExecResult:
    try:
        return run_bounded(["xl", *args], timeout)
    except FileNotFoundError:
        raise HvbenchError("xen: xl not found (apt-get install xen-utils; run in dom0)") from None


def _xenstore_read(key: str) -> str | None:
    result = run_bounded(["xenstore-read", key], 30)
    return result.stdout.decode().strip() if result.ok else None


def xl_info() -> dict[str, str] | ExecResult:
    """``xl info`` as its ``key : value`` lines, or the failed result."""
    result = _xl("info", timeout=60)
    if not result.ok:
        return result
    pairs = (line.split(":", 1) for line in result.stdout.decode(errors="replace").splitlines())
    return {k.strip(): v.strip() for k, v in (p for p in pairs if len(p) == 2)}


def _why(result: ExecResult) -> str:
    """The cause in xl's output: libxl prints it first, then the clean-up that followed."""
    lines = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [f"exit status {result.exit_code}"])[0].strip()


@dataclass
class XenInstance(AgentInstance):
    vmm: ClassVar[str] = "the domain"
    domain: str = ""
    domid: int | None = None
    agent: GuestAgent | None = None
    relay: LineRelay | None = None
    _seen_alive: tuple[float, bool] = (0.0, False)
    driver: XenDomains[Any, Any] | None = None
    """The driver that started it, for the operations that make its domain anew."""

    def agent_channel(self) -> GuestAgent | None:
        return self.agent

    def lifecycle(self) -> Lifecycle | None:
        return XenLifecycle(self.driver, self) if self.driver else None

    def host_pids(self) -> list[int]:
        """The domain's device model in dom0 (HVM, qdisk), if any: its vCPUs themselves are
        scheduled by Xen, outside every dom0 process."""
        if self.domid is None:
            return []
        mine = ["-xen-domid", str(self.domid)]
        found = []
        for proc in processes(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if any(cmdline[i : i + 2] == mine for i in range(len(cmdline) - 1)):
                found.append(proc.pid)
        return found

    def accounted_cpu_seconds(self) -> float | None:
        """The domain's vCPU time as Xen accounts it (``xl list``'s Time(s), to 0.1 s)."""
        if self.domid is None:
            return None
        result = _xl("list", str(self.domid), timeout=60)
        return xl_list_times(result.stdout.decode(errors="replace")).get(self.domid)

    def last_words(self) -> str:
        """A domain is no process of ours: its console says what became of it."""
        return last_words(None, console=self.relay.log if self.relay else None)

    def alive(self) -> bool:
        if self.domid is None:
            return False
        when, answer = self._seen_alive
        if time.monotonic() - when > ALIVE_EVERY:
            answer = self._running()
            self._seen_alive = (time.monotonic(), answer)
        return answer

    def _running(self) -> bool:
        """Asks the toolstack whether the domain still runs (here xl)."""
        result = _xl("domid", self.domain, timeout=60)
        return result.ok and result.stdout.decode().strip() == str(self.domid)

    def _destroy(self) -> None:
        _xl("destroy", self.domain, timeout=120)

    def kill(self) -> None:
        if self.agent:
            self.agent.close()
        if self.domid is not None:
            with contextlib.suppress(CommandTimeout, HvbenchError):  # xl could not: stop goes on
                self._destroy()
            self._seen_alive = (time.monotonic(), False)
        if self.relay:
            self.relay.stop()


@dataclass(frozen=True)
class XenOpened:
    """What a driver of Xen domains resolves once per run (``open``)."""

    xen_version: str
    cpus: int
    """The host's physical CPUs, on which every domain runs."""
    image: guest_image.GuestImage
    kernel: Path
    """What the domains boot: PV and PVH the ELF vmlinux, HVM the bzImage."""
    rootfs: userland.RootImage | None
    """The root filesystem image, where the workloads need a full userland."""
    script: Resource
    """The hotplug script (HOTPLUG) that xl runs for NICs and phy disks."""


XS = TypeVar("XS", bound=XenSettings)
XO = TypeVar("XO", bound=XenOpened)


class XenDomains(Driver[XS, XenInstance, XO]):
    """Xen domains, through xl (``XenDriver``) or through libvirt (``LibvirtXenDriver``):
    what each resolves is ``XenOpened`` and what its toolstack adds."""

    instance_class: ClassVar[type[XenInstance]] = XenInstance

    @classmethod
    def check(cls) -> Availability:
        if not shutil.which("xl"):
            return Availability(
                False, "xl not found", "apt-get install xen-utils and boot the host into Xen"
            )
        try:
            caps = CAPABILITIES.read_text()
        except OSError:
            caps = ""
        if "control_d" not in caps:
            return Availability(
                False,
                "not running in a Xen dom0 (no control_d in /proc/xen/capabilities)",
                "boot the host with xen-hypervisor and run hvbench in dom0; "
                "tests/xenlab.py runs one nested under QEMU",
            )
        info = xl_info()
        if isinstance(info, ExecResult):
            return Availability(False, f"xl info failed: {_why(info)}", "start xencommons")
        return Availability(
            True, f"Xen {info.get('xen_version', '?')} dom0, virt_caps: {info.get('virt_caps')}"
        )

    @classmethod
    def ran_by_settings(cls, settings: XS) -> WhatRan:
        qdisk = "Xen's qdisk backend avoids O_DIRECT without direct-io-safe"
        cached = settings.disk.backend == "qdisk"
        return WhatRan(settings.mode, get_args(Mode), disk_cache=qdisk if cached else None)

    def _domains(self, xen_version: str, cpus: int) -> XenOpened:
        """What every toolstack's domains boot: the image, the kernel of the mode, the root
        filesystem where needed, and the hotplug script; ``xen_version`` and ``cpus`` as the
        toolstack says them."""
        image = guest_image.build(set(self.needs.tools))
        rootfs = self._userland(image)
        # PV and PVH load the ELF vmlinux (PVH needs its entry note); HVM's device model boots
        # the bzImage as a PC would
        mode = self.settings.mode
        kernel = image.bzimage if mode == "hvm" else image.vmlinux
        if kernel is None:
            raise HvbenchError(f"platform {self.platform}: {mode} boots an ELF vmlinux; none found")
        script = self.ledger.add("path", str(self.workdir / "xen-hotplug"))
        self.resources.append(script)
        Path(script.name).write_text(HOTPLUG)
        os.chmod(script.name, 0o755)
        return XenOpened(xen_version, cpus, image, kernel, rootfs, script)

    def _userland(self, image: guest_image.GuestImage) -> userland.RootImage | None:
        """The root filesystem image the workloads need (built now, or from the cache), or
        None where the initramfs does."""
        if not self.needs.userland:
            return None
        return userland.build(set(self.needs.tools), image, self.needs.packages)

    def _guest_seconds(self) -> float:
        """vCPU time of every domain but dom0, as Xen accounts it."""
        result = _xl("list", timeout=60)
        times = xl_list_times(result.stdout.decode(errors="replace"))
        return sum(t for domid, t in times.items() if domid != 0)

    def host_cpu_source(self) -> HostCpuSource:
        """The whole machine: dom0's states, with every other domain's vCPU time as guest time
        (a domain's vCPUs run on Xen, where no state of dom0 shows them), on all physical
        CPUs."""
        cpus = self.open().cpus

        def states() -> dict[str, float]:
            seconds = read_proc_stat()
            seconds["guest"] += self._guest_seconds()
            seconds["steal"] = 0.0  # dom0's steal is other domains running: guest time above
            return seconds

        return HostCpuSource(states, cpus)

    def _prepare(self, count: int) -> None:
        if self.settings.nic != "none":
            self.network.up()

    def _instance(self, index: int) -> XenInstance:
        s = self.settings
        return self.instance_class(
            self.platform,
            index,
            s.vcpus,
            s.memory >> 20,
            domain=resource_name(self.ledger.run_id, self.platform, index),
        )

    # the configuration ------------------------------------------------------------------

    def _cmdline(self, inst: XenInstance) -> str:
        """The guest kernel's command line: its agent on the console line, its address, the
        front-end drivers it loads."""
        s = self.settings
        modules = ["xen_blkfront"]
        args = [
            f"console={GUEST_LINE[s.mode].removeprefix('/dev/')}",
            f"hvbench.agent={GUEST_LINE[s.mode]}",
            f"hvbench.hostname={inst.name}",
            "panic=-1",
            "oops=panic",  # as QEMU guests: an oops ends the domain, not the sample's timeout
        ]
        if s.nic != "none":
            args.append(f"hvbench.ip={self.network.address(inst.index)}/{PREFIX}")
            modules.append("xen_netfront" if s.nic == "netfront" else NIC_MODULE[s.nic])
        if s.nic in NIC_MODULE:
            args.append("xen_emul_unplug=never")  # keep the emulated NIC the guest should use
        rootfs = self.opened.rootfs
        if rootfs:
            args.append(rootfs.boot_args(ROOT_DEVICE))
        args.append(f"hvbench.modules={','.join(modules)}")
        if s.kernel_args:
            args += s.kernel_args.split()
        return " ".join(args)

    def _mac(self, inst: XenInstance) -> str:
        """A MAC in Xen's range, unique per run and instance."""
        return f"00:16:3e:{os.getpid() >> 8 & 0xFF:02x}:{os.getpid() & 0xFF:02x}:{inst.index:02x}"

    def _config(self, inst: XenInstance, disk_target: str | None, root: str | None = None) -> str:
        """The xl configuration; ``root`` is the root filesystem's overlay (userland)."""
        s, opened = self.settings, self.opened
        lines = {
            "name": _quote(inst.domain),
            "type": _quote(s.mode),
            "vcpus": str(s.vcpus),
            "memory": str(s.memory >> 20),
            "kernel": _quote(str(opened.kernel)),
            "ramdisk": _quote(str(opened.image.initrd)),
            "cmdline": _quote(self._cmdline(inst)),
            "on_poweroff": '"destroy"',
            "on_reboot": '"destroy"',
            "on_crash": '"destroy"',
        }
        if s.tsc_mode != "default":
            lines["tsc_mode"] = _quote(s.tsc_mode)
        if s.mode == "hvm":
            lines |= {"serial": '"pty"', "vga": '"none"', "vnc": "0", "boot": '"c"'}
        if s.nic != "none":
            vif = [f"mac={self._mac(inst)}", f"script={opened.script.name}"]
            if s.nic in NIC_MODULE:
                vif += [f"model={s.nic}", "type=ioemu"]
            lines["vif"] = f"[{_quote(','.join(vif))}]"
        disks = []
        if root:
            vdev = ROOT_DEVICE.removeprefix("/dev/")
            disks.append(f"backendtype=qdisk,format=qcow2,vdev={vdev},access=rw,target={root}")
        if disk_target:
            spec = ["format=raw", "vdev=xvdb", "access=rw", f"target={disk_target}"]
            if s.disk.backend == "qdisk":
                spec.insert(0, "backendtype=qdisk")
            else:
                spec.insert(0, f"script={opened.script.name}")
            disks.append(",".join(spec))
        if disks:
            lines["disk"] = f"[{', '.join(_quote(d) for d in disks)}]"
        return "".join(f"{k} = {v}\n" for k, v in lines.items())

    def _root_disk(self, inst: XenInstance, rootfs: userland.RootImage) -> str:
        """The instance's copy-on-write overlay of the root filesystem image (qcow2, for
        QEMU's qdisk backend), so the cached image is never written."""
        overlay = self.workdir / f"{inst.name}.root.qcow2"
        inst.resources.append(self.ledger.add("path", str(overlay)))
        make_image(overlay, "qcow2", 0, backing=rootfs.disk)
        return str(overlay)

    def _data_disk(self, inst: XenInstance) -> tuple[DataImage, str]:
        """The data disk (its path is the target xl gets), and the report's description of it."""
        disk = self.settings.disk
        qdisk = disk.backend == "qdisk"
        image = DataImage.make(self, disk, f"{inst.name}.data.raw", inst.resources, loop=not qdisk)
        if image.file is None:
            return image, f"block device {image.path} on blkback"
        if qdisk:
            return image, f"sparse raw file {image.file} on QEMU's qdisk backend"
        return image, f"loop device (direct I/O) over {image.file} on blkback"

    # the lifecycle ----------------------------------------------------------------------

    def _start_one(self, inst: XenInstance, deadline: float) -> None:
        s = self.settings
        prefix = self.workdir / inst.name
        data, disk_description = self._data_disk(inst) if self.needs.data_disk else (None, "")
        rootfs = self.opened.rootfs
        root = self._root_disk(inst, rootfs) if rootfs else None
        started = time.monotonic()
        self._create(inst, prefix, data.path if data else None, deadline, root)
        if s.nic != "none":
            self._adopt_nics(inst)
        self._connect_agent(inst, prefix, min(deadline, started + s.boot_timeout))
        inst.boot = BootPhases.ready_since(started)
        if s.nic != "none":
            inst.address = self.network.address(inst.index)
        if data:
            mount_data_disk(inst, DATA_DEVICE, disk_description, formatted=data.formatted)

    def _create(
        self,
        inst: XenInstance,
        prefix: Path,
        disk_target: str | None,
        deadline: float,
        root: str | None = None,
    ) -> None:
        """Make the domain with the toolstack (here xl, from a configuration file) and note its
        id; the ledger knows it before it exists."""
        config = self.ledger.add("path", f"{prefix}.xl.cfg")
        inst.resources.append(config)
        Path(config.name).write_text(self._config(inst, disk_target, root))
        inst.resources.append(self.ledger.add("xendomain", inst.domain))
        created = _xl("create", config.name, timeout=time_left(deadline))
        if not created.ok:
            raise InstanceError(f"{inst.name}: xl create failed: {_why(created)}")
        domid = _xl("domid", inst.domain, timeout=60)
        if not domid.ok:
            raise InstanceError(f"{inst.name}: the domain vanished right after xl create")
        inst.domid = int(domid.stdout.decode().strip())

    def _adopt_nics(self, inst: XenInstance) -> None:
        names = [f"vif{inst.domid}.0"]
        if self.settings.nic in NIC_MODULE:
            names.append(f"vif{inst.domid}.0-emu")
        for name in names:
            inst.resources.append(self.network.adopt_tap(name))

    def _connect_agent(self, inst: XenInstance, prefix: Path, deadline: float) -> None:
        key = f"/local/domain/{inst.domid}/{CONSOLE_KEY[self.settings.mode]}"
        pty = None
        while pty is None:
            pty = _xenstore_read(key)
            if pty is None:
                if time.monotonic() > deadline:
                    raise InstanceError(f"{inst.name}: xenstore never named the console ({key})")
                time.sleep(0.5)
        fd = os.open(pty, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(fd, termios.TCSANOW)
        sock = self.ledger.add("path", f"{prefix}.agent.sock")
        inst.resources.append(sock)
        inst.relay = LineRelay(fd, sock.name, log=Path(f"{prefix}.console.log"))
        inst.relay.start()
        inst.agent = GuestAgent(sock.name, inst.name)
        try:
            inst.agent.wait_ready(deadline, inst.alive)
        except (CommandTimeout, InstanceError) as e:
            why = "exited" if not inst.alive() else "did not answer in time"
            raise InstanceError(f"{inst.name}: the domain {why} ({inst.last_words()})") from e

    def _detach(self, inst: XenInstance) -> None:
        """Let go of what tied the instance to its domain once that has ended (saved, migrated
        away): the agent's connection, the console's relay and socket, the NIC backends (gone
        with the domain; their ledger entries go too)."""
        if inst.agent:
            inst.agent.close()
        if inst.relay:
            inst.relay.stop()
        inst.agent, inst.relay, inst.domid = None, None, None
        stale = [r for r in inst.resources if r.kind == "link" or r.name.endswith(".agent.sock")]
        for res in stale:
            inst.resources.remove(res)
            self.ledger.release(res)

    def _attach(self, inst: XenInstance, deadline: float) -> None:
        """Take up the domain that now runs under the instance's name (restored, migrated in):
        its id, its NIC backends onto the run's bridge, and its console, until the agent
        answers there (its boot's console log is kept: this one has a name of its own)."""
        domid = _xl("domid", inst.domain, timeout=60)
        if not domid.ok:
            raise InstanceError(f"{inst.name}: no domain {inst.domain} after the operation")
        inst.domid = int(domid.stdout.decode().strip())
        inst._seen_alive = (0.0, False)
        if self.settings.nic != "none":
            self._adopt_nics(inst)
        self._connect_agent(inst, operation_path(self.workdir, inst, "in"), deadline)

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        opened = self.opened
        if opened.rootfs:
            info["rootfs"] = opened.rootfs.summary()
        info["resolved"] = {
            "xen_version": opened.xen_version,
            "kernel": str(opened.kernel),
            "host_cpu": "dom0's CPU states, with every domain's vCPU time (xl list) as guest time",
        }
        info["image"] = opened.image.manifest
        return info


class XenLifecycle(Lifecycle):
    """Snapshot and migration with xl. The save file and the names xl gives the two domains of
    a migration on one host (``NAME--incoming``, ``NAME--migratedaway``) are in the ledger
    before they exist; the instance's own ledger entry (its name) covers the domain after."""

    def __init__(self, driver: XenDomains[Any, Any], inst: XenInstance) -> None:
        self.driver, self.inst = driver, inst

    def snapshot(self, deadline: float) -> OperationReport:
        """save_s is ``xl save`` (it returns once the file holds the domain and the domain has
        ended); restore_s from ``xl restore``'s start until the agent answers again."""
        inst, ledger = self._running(), self.driver.ledger
        image = ledger.add("path", str(operation_path(self.driver.workdir, inst, "save")))
        try:
            t0 = time.monotonic()
            saved = _xl("save", inst.domain, image.name, timeout=time_left(deadline))
            if not saved.ok:
                raise InstanceError(f"{inst.name}: xl save failed: {_why(saved)}")
            save_s = time.monotonic() - t0
            size = os.path.getsize(image.name)
            self.driver._detach(inst)
            t1 = time.monotonic()
            restored = _xl("restore", image.name, timeout=time_left(deadline))
            if not restored.ok:
                raise InstanceError(f"{inst.name}: xl restore failed: {_why(restored)}")
            self.driver._attach(inst, deadline)
            restore_s = time.monotonic() - t1
        finally:
            ledger.release(image)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        raw = {"bytes": size, "xl save": _output(saved), "xl restore": _output(restored)}
        return OperationReport(figures, json.dumps(raw))

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        """``xl migrate`` to this host (LOCAL_SSH runs the receiving xl). total_s is the
        command's time, until the domain runs at the destination: the only figure xl gives
        (in the lab, a PVH domain's migration printed no progress lines, unlike ``xl save``:
        neither data sent, passes nor downtime)."""
        inst, ledger = self._running(), self.driver.ledger
        if self.driver.opened.rootfs:
            raise InstanceError(
                f"{inst.name}: xl cannot migrate a domain whose root is a qcow2 overlay on qdisk "
                "to this host (both ends' QEMU would write its metadata); run migration in a "
                "study without workloads that need the root filesystem"
            )
        names = [
            ledger.add("xendomain", f"{inst.domain}--{end}") for end in ("incoming", "migratedaway")
        ]
        try:
            t0 = time.monotonic()
            moved = _xl(
                "migrate", "-s", LOCAL_SSH, inst.domain, "localhost", timeout=time_left(deadline)
            )
            total_s = time.monotonic() - t0
        finally:
            for name in names:
                ledger.release(name)
        if not moved.ok:
            raise InstanceError(f"{inst.name}: xl migrate failed: {migrate_failure(moved)}")
        self.driver._detach(inst)
        self.driver._attach(inst, deadline)
        raw = {"plan": vars(plan), "xl migrate": _output(moved), "downtime": "xl reports none"}
        return OperationReport({"total_s": total_s}, json.dumps(raw))

    def _running(self) -> XenInstance:
        if not self.inst.alive():
            raise InstanceError(
                f"{self.inst.name}: the domain is not running ({self.inst.last_words()})"
            )
        return self.inst


def migrate_failure(result: ExecResult) -> str:
    """Why ``xl migrate`` failed, in one line: the hypervisor's lack of log-dirty for PV said
    as such (the live copy cannot start), else xl's own first error."""
    if NO_LOG_DIRTY in _output(result):
        return (
            "this Xen cannot track a PV domain's dirty pages (log-dirty: operation not "
            "supported; it needs a hypervisor built with CONFIG_SHADOW_PAGING, which Debian's "
            "4.17 is not): migrate PVH or HVM domains (HAP: a PVH one migrates here), or "
            "save and restore PV ones"
        )
    return _why(result)


def _output(result: ExecResult) -> str:
    return (result.stdout + result.stderr).decode(errors="replace")


def xl_list_times(listing: str) -> dict[int, float]:
    """Domain id -> Time(s), from ``xl list``'s lines (Name ID Mem VCPUs State Time(s)); lines
    that do not read as such are skipped."""
    times = {}
    for line in listing.strip().splitlines()[1:]:
        fields = line.split()
        try:
            times[int(fields[1])] = float(fields[-1])
        except (IndexError, ValueError):
            continue
    return times


def _quote(value: str) -> str:
    if '"' in value or "\n" in value:
        raise HvbenchError(f"xen: {value!r} cannot be written into an xl configuration")
    return f'"{value}"'
