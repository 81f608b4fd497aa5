"""LXC (``driver: lxc``): Debian's lxc 5.0, system containers as Proxmox VE runs them.

Each instance is ``lxc-start`` of a configuration of the driver's own that includes LXC's
common.conf (the capabilities, device rules and mounts its templates give every container),
with the guest image's tree as its root, read-only (``lxc.rootfs.options = ro``; /tmp and /run
tmpfs of its own, as in the guests), oslevel's INIT as its init (a script in the tree: a
read-only root has no room to mount one), the platform's cgroup limits in LXC's own keys under a
cgroup of the platform's (``lxc.cgroup.dir``), and what PLATFORMS.md found it needs here:
``lxc.console.path = none``, ``lxc.apparmor.profile = unconfined``.

For the workloads that need a userland (consolidation), the guests' Debian root filesystem
image under an overlay of the instance's own, booted with its own init (systemd, ``lxc.init.cmd``,
with ``cgroup:mixed`` mounts for it), privileged only (see ``no_userland``).

``privileged: false`` (the default of Proxmox's containers): an id map (LXC's userns.conf) of
SUBIDS ids of root's own in /etc/subuid and /etc/subgid (LXC insists on them where newuidmap is
installed; made and removed through the ledger), the tree's and the data disk's owners shifted
into that range; ``true``: the host's ids.

Network: a veth whose host end (``hvl<index>``) the driver puts on the run's bridge (LXC's
``lxc.net.0.link`` looks the bridge up in /sys, which shows the host's namespace: lxc-start runs
in the run's namespace through ``nsenter --net``), the instance's address on ``eth0`` inside.
LXC's command socket is an abstract one, of that namespace too: ``lxc-attach`` (the control
channel, which puts the command in the container's namespaces and cgroup) and ``lxc-stop``
enter it as well.

Snapshot: ``lxc-checkpoint`` (CRIU) is not driven yet: refused.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import psutil

from hvbench.drivers.base import BootPhases
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.footprint import Pace
from hvbench.drivers.last_words import last_words
from hvbench.drivers.oslevel import INIT, WORKDIR, OsLevelSettings, host_data_disk
from hvbench.drivers.tree import BOOT_TARGET, SYSTEMD, Tree, TreeDriver, TreeInstance
from hvbench.errors import InstanceError
from hvbench.host.cgroup import cgroup_of, cgroup_version
from hvbench.host.network import BRIDGE, PREFIX
from hvbench.host.process import SYSTEM_PATH, checked, output_tail, time_left, which
from hvbench.host.resources import resource_name
from hvbench.host.subids import SUBIDS, subordinate_ids
from hvbench.store import WhatRan

NO_CHECKPOINT = "lxc-checkpoint (CRIU) is not driven by hvbench yet"
CONFIG = Path("/usr/share/lxc/config")
INIT_SCRIPT = "/hvbench-init"
"""Where the tree holds oslevel's INIT as a script, lxc.init.cmd's."""
LOCKS = Path("/run/lxc/lock")
"""Where LXC locks a container path's containers (``/run/lxc/lock/<lxcpath>``)."""
PACE = Pace(slowdown=1.0, io_slowdown=1.2, start_s=0.2, core_s=0.05)
"""The kernel's container mechanism, as runc's: compute at native speed. Unprivileged, 64M: a
group of 1 started and stopped in about 0.2 s, 64 at once in about 1.2 s (0.04 core-seconds
each) on the 2 cores of the development host (a ``boot`` study at 1, 8 and 64 instances,
2026-12-07: the time between its groups' samples); was 4 and 2 s, unmeasured."""


class LxcSettings(OsLevelSettings):
    driver: Literal["lxc"]
    privileged: bool = False
    """The host's ids in the container (``true``), or an id map of its own (unprivileged)."""

    no_lifecycle: ClassVar[str] = f"has no migration or snapshot: {NO_CHECKPOINT}"

    def pace(self, kvm: bool) -> Pace:
        return PACE


@dataclass
class LxcInstance(TreeInstance):
    """One LXC container; ``cli`` is its ``lxc-attach`` up to the command."""

    def command(self, argv: Sequence[str], stdin: bool) -> list[str]:
        return [*self.cli, "--", "/bin/sh", "-c", f'cd {WORKDIR} && exec "$@"', "sh", *argv]


@dataclass(frozen=True)
class LxcTree(Tree):
    """What an LXC platform resolves: the tree, and who its containers' root is on the host."""

    root_id: int = field(kw_only=True)
    """The host uid and gid of the containers' root: the first of the id map, or 0."""


class LxcDriver(TreeDriver[LxcSettings, LxcInstance, LxcTree]):
    name: ClassVar[str] = "lxc"
    settings_model = LxcSettings
    engine_name: ClassVar[str] = "lxc"
    instance_class = LxcInstance
    packages: ClassVar[tuple[str, ...]] = ("lxc", "uidmap")
    modes: ClassVar[tuple[str, ...]] = ("unprivileged", "privileged")

    @classmethod
    def binary(cls) -> str | None:
        return which("lxc-start")

    @classmethod
    def version(cls) -> str:
        return f"LXC {super().version()}"

    @classmethod
    def lacks(cls) -> list[str]:
        return [NO_CHECKPOINT]

    @classmethod
    def ran_by_settings(cls, settings: LxcSettings) -> WhatRan:
        return WhatRan(mode=cls.modes[settings.privileged], modes=cls.modes)

    @property
    def lxcpath(self) -> Path:
        """The platform's containers' directory (``-P``)."""
        return self.workdir / f"{self.platform}-lxc"

    def no_userland(self) -> str | None:
        if self.settings.privileged:
            return None
        return (
            "lxc boots the Debian root filesystem image (consolidation, kernbench) only with "
            "privileged: true: an unprivileged container's id map cannot be put on the "
            "read-only image (an idmapped mount of its overlay fails here, EINVAL)"
        )

    def _resolve(self) -> LxcTree:
        """The tree with the init script, shifted into the id map where unprivileged (a booted
        root image has its own init), and the containers' directory with its lock directory
        (LXC's, under /run)."""
        tree = self._resolve_tree()
        if not tree.booted:
            (tree.root / INIT_SCRIPT.lstrip("/")).write_text(INIT[2] + "\n")
        root_id = 0
        if not self.settings.privileged:
            root_id = subordinate_ids(self.ledger, self.resources, "root")
            _shift(tree.root, root_id)
        self.resources.append(self.ledger.add("path", str(self.lxcpath)))
        self.lxcpath.mkdir()
        lock = LOCKS / str(self.lxcpath).lstrip("/")
        top = next((d for d in (*reversed(lock.parents), lock) if not d.exists()), None)
        if top is not None:  # the first directory of it that LXC will make
            self.resources.append(self.ledger.add("path", str(top)))
        return LxcTree(**vars(tree), root_id=root_id)

    def _start_one(self, inst: LxcInstance, deadline: float) -> None:
        made = inst.resources
        home = self.workdir / inst.name
        made.append(self.ledger.add("path", str(home)))
        home.mkdir()
        data = None
        if self.needs.data_disk:
            data = home / "data"
            host_data_disk(self, self.settings.disk, inst, data, "bind-mounted", made)
            os.chown(data, self.opened.root_id, self.opened.root_id)
        inst.address = self.network.address(inst.index)
        self.network.up()
        enter = ["nsenter", f"--net={self.network.netns_path}", "--"]
        name = resource_name(self.ledger.run_id, inst.name)
        where = ["-n", name, "-P", str(self.lxcpath)]
        inst.cli = (*enter, "lxc-attach", *where, "--clear-env", "-v", f"PATH={SYSTEM_PATH}",
                    "-v", "HOME=/root")  # fmt: skip
        root = self.instance_root(home, made)
        config = home / "config"
        config.write_text("\n".join(self._config(inst, root, data)) + "\n")
        veth = f"hvl{inst.index}"
        made.append(self.ledger.add("link", veth, netns=self.network.netns))
        stop = [*enter, "lxc-stop", "--kill", *where]
        made.append(self.ledger.add("command", name, argv=stop))
        log = home / "lxc.log"
        t0 = time.monotonic()  # boot: lxc-start until the init runs its commands (``ready``)
        start = subprocess.run(
            [*enter, "lxc-start", *where, "--rcfile", str(config), "--daemon",
             "--logfile", str(log), "--logpriority", "WARN"],
            capture_output=True, text=True, timeout=time_left(deadline), check=False,
        )  # fmt: skip
        if start.returncode != 0:
            words = last_words(start.returncode, output=log)
            raise InstanceError(f"{inst.name}: lxc-start failed ({words})")
        link = ["ip", "-n", self.network.netns, "link", "set", veth, "master", BRIDGE, "up"]
        checked(link)
        info = subprocess.run([*enter, "lxc-info", *where, "--pid", "--no-humanize"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        try:
            inst.init = psutil.Process(int(info.stdout.strip()))
            inst.cgroups_path = cgroup_of(inst.init.pid)
        except (ValueError, OSError, psutil.Error):
            raise InstanceError(
                f"{inst.name}: lxc-info gave no running init: {output_tail(info)}"
            ) from None
        self.ready(inst, deadline)
        inst.boot = BootPhases.ready_since(t0)

    def _config(self, inst: LxcInstance, root: Path, data: Path | None) -> list[str]:
        """The container's configuration: LXC's common one, then the platform's; a booted root
        image (writable, its own overlay) with its own init and the cgroup mounts systemd
        needs."""
        s, booted = self.settings, self.opened.booted
        lines = [f"lxc.include = {CONFIG / 'common.conf'}"]
        if not s.privileged:
            ids = f"0 {self.opened.root_id} {SUBIDS}"
            lines += [f"lxc.include = {CONFIG / 'userns.conf'}", f"lxc.idmap = u {ids}",
                      f"lxc.idmap = g {ids}"]  # fmt: skip
        lines += [
            f"lxc.uts.name = {inst.name}",
            f"lxc.rootfs.path = dir:{root}",
            *(["lxc.rootfs.options = ro"] * (not booted)),
            "lxc.console.path = none",
            "lxc.tty.max = 0",  # no terminals: commands come through lxc-attach
            "lxc.apparmor.profile = unconfined",
            f"lxc.cgroup.dir = {self.cgroup_parent.lstrip('/')}/{inst.name}",
            *s.limits.lxc_keys(cgroup_version(), inst.index),
            "lxc.mount.auto = proc:mixed sys:mixed" + " cgroup:mixed" * booted,
            "lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,mode=1777 0 0",
            "lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,mode=755 0 0",
            f"lxc.init.cmd = /{SYSTEMD} {BOOT_TARGET}"
            if booted
            else f"lxc.init.cmd = /bin/sh {INIT_SCRIPT}",
            f"lxc.init.cwd = {WORKDIR}",
            "lxc.net.0.type = veth",
            f"lxc.net.0.veth.pair = hvl{inst.index}",
            "lxc.net.0.name = eth0",
            f"lxc.net.0.ipv4.address = {inst.address}/{PREFIX} {_broadcast(inst.address)}",
            "lxc.net.0.flags = up",
        ]
        if data is not None:
            lines.append(f"lxc.mount.entry = {data} {DATA_MOUNT.lstrip('/')} none bind 0 0")
        return lines

    def facts(self) -> dict[str, object]:
        s = self.settings
        return {
            **super().facts(),
            "ids": "the host's (privileged)"
            if s.privileged
            else f"root is host uid {self.opened.root_id}, {SUBIDS} ids mapped (unprivileged)",
            "root": self.opened.described(),
            "control": "lxc-attach (the container's namespaces and cgroup)",
            "network": "a veth on the run's bridge, the instance's address on eth0",
            "config": "LXC's common.conf"
            + ("" if s.privileged else " and userns.conf")
            + ", then the platform's limits (lxc.cgroup keys)",
        }


def _broadcast(address: str | None) -> str:
    """The broadcast address of the run's network (LXC works out none: 0.0.0.255)."""
    return str(ipaddress.ip_interface(f"{address}/{PREFIX}").network.broadcast_address)


def _shift(root: Path, first: int) -> None:
    """Shift the owners of the tree's files into the id map that starts at host id ``first``,
    as LXC's tools do for an unprivileged container's root."""
    for path in (root, *root.rglob("*")):
        stat = path.lstat()
        os.lchown(path, stat.st_uid + first, stat.st_gid + first)
