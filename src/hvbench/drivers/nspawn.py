"""systemd-nspawn (``driver: nspawn``): Debian's systemd-container, as a systemd host has it.

Each instance is ``systemd-nspawn --register=no --keep-unit`` (no machined, no system bus
here: without ``--keep-unit`` it fails "Failed to open system bus") of the guest image's tree,
read-only (``--read-only``; /tmp a tmpfs of its own, as in the guests; no resolv.conf or
timezone copied in, which a read-only tree has no room for), oslevel's INIT its PID 1. Without
systemd, nspawn sets no cgroup limits: the driver starts it inside a cgroup of the instance's own
with the platform's limits (``host.cgroup.own_cgroup``), which the container inherits, and moves
the nspawn process itself out to the platform's parent once the container runs, so that the
instance's cgroup holds the container's processes alone.

For the workloads that need a userland (consolidation), ``--boot`` of the guests' Debian root
filesystem image under an overlay of the instance's own: its own init (systemd) is PID 1.

Commands run through ``nsenter`` into the container's namespaces and root (``--target`` its
PID 1), started inside its cgroup: nspawn has no ``exec`` of its own without machined
(``machinectl shell`` needs it).

Network: ``private_network: false`` (nspawn's default: the network namespace it is started in)
runs nspawn inside a namespace of the instance's own with a veth on the run's bridge, as the
``container`` platform's; ``true`` (``--network-bridge``, which implies ``--private-network``)
gives the container a namespace of nspawn's making, with a veth pair whose host end nspawn puts
on the run's bridge (nspawn runs in the run's namespace), the address set on ``host0`` inside.

Snapshot: nspawn has no checkpoint: refused.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
from hvbench.host.cgroup import move, own_cgroup
from hvbench.host.network import BRIDGE, PREFIX
from hvbench.host.process import SYSTEM_PATH, time_left, which
from hvbench.store import WhatRan

NO_CHECKPOINT = "systemd-nspawn has no checkpoint"
PACE = Pace(slowdown=1.0, io_slowdown=1.2, start_s=0.15, core_s=0.2)
"""The kernel's container mechanism, as runc's: compute at native speed. 64M: a group of 1
started and stopped in 0.14 s, groups of 8 and 64 0.12 and 0.10 s an instance (about 0.2
core-seconds each) on the 2 cores of the development host (through ``Driver.start`` and
``stop``, as ``bench/storm_overhead.py`` times hvbench's side, 2026-12-07; a ``boot`` study at
1, 8 and 64 agreed); was 4 and 2 s, unmeasured."""


class NspawnSettings(OsLevelSettings):
    driver: Literal["nspawn"]
    private_network: bool = False
    """A network namespace of nspawn's own with a veth on the run's bridge (``true``), or the
    one nspawn starts in, the instance's (nspawn's default)."""

    no_lifecycle: ClassVar[str] = f"has no migration or snapshot: {NO_CHECKPOINT}"

    def pace(self, kvm: bool) -> Pace:
        return PACE


@dataclass
class NspawnInstance(TreeInstance):
    """One nspawn container; ``cli`` starts a command in its cgroup."""

    def command(self, argv: Sequence[str], stdin: bool) -> list[str]:
        pid = str(self.init.pid if self.init else 0)
        enter = ["nsenter", "--target", pid, "--mount", "--uts", "--ipc", "--net", "--pid",
                 "--root", "--wd"]  # fmt: skip
        env = ["/bin/env", "-i", f"PATH={SYSTEM_PATH}", "HOME=/root"]
        return [*self.cli, *enter, "--", *env, *argv]


class NspawnDriver(TreeDriver[NspawnSettings, NspawnInstance, Tree]):
    name: ClassVar[str] = "nspawn"
    settings_model = NspawnSettings
    engine_name: ClassVar[str] = "systemd-nspawn"
    instance_class = NspawnInstance
    packages: ClassVar[tuple[str, ...]] = ("systemd-container",)
    modes: ClassVar[tuple[str, ...]] = ("private network", "instance network")
    host_dirs = (
        "/run/systemd/nspawn/locks",
        "/run/systemd/nspawn/propagate",
        "/run/systemd/nspawn",
    )
    """Where nspawn keeps its locks and the mounts it propagates."""

    @classmethod
    def binary(cls) -> str | None:
        return which("systemd-nspawn")

    @classmethod
    def lacks(cls) -> list[str]:
        return [NO_CHECKPOINT]

    @classmethod
    def ran_by_settings(cls, settings: NspawnSettings) -> WhatRan:
        return WhatRan(mode=cls.modes[0 if settings.private_network else 1], modes=cls.modes)

    def no_userland(self) -> str | None:
        return None

    def _resolve(self) -> Tree:
        """The guest tree, or the root filesystem image its containers boot."""
        return self._resolve_tree()

    def _start_one(self, inst: NspawnInstance, deadline: float) -> None:
        s, tree, made = self.settings, self.opened, inst.resources
        home = self.workdir / inst.name
        made.append(self.ledger.add("path", str(home)))
        home.mkdir()
        machine = f"hvb-{inst.index}"  # its veth: vb-<machine>, within 15 characters
        root = self.instance_root(home, made)
        # a booted root image is the instance's own overlay, its init systemd (--boot)
        payload = [SYSTEMD, BOOT_TARGET] if tree.booted else INIT
        args = payload[1:] if tree.booted else payload  # --boot: nspawn finds the init itself
        flags = ["--boot" if tree.booted else "--read-only", "--resolv-conf=off",
                 "--timezone=off", "--link-journal=no", "--tmpfs=/tmp:mode=1777",
                 f"--chdir={WORKDIR}", "--machine", machine]  # fmt: skip
        if self.needs.data_disk:
            host_data_disk(self, s.disk, inst, home / "data", "bind-mounted (--bind)", made)
            flags.append(f"--bind={home / 'data'}:{DATA_MOUNT}")
        inst.address = self.network.address(inst.index)
        if s.private_network:
            self.network.up()
            netns = self.network.netns
            flags.append(f"--network-bridge={BRIDGE}")
        else:
            made.append(self.network.add_host_netns(inst.index))
            netns = made[-1].name
        inst.cgroups_path = f"{self.cgroup_parent}/{inst.name}"
        inst.cli = own_cgroup(inst.cgroups_path, s.limits, inst.index)
        nspawn = which("systemd-nspawn") or "systemd-nspawn"
        argv = [*inst.cli, "nsenter", f"--net=/run/netns/{netns}", "--", nspawn,
                "--register=no", "--keep-unit", "--quiet", "--console=pipe", "--directory",
                str(root), *flags, "--", *args]  # fmt: skip
        log = home / "nspawn.log"
        t0 = time.monotonic()  # boot: nspawn's start until the init runs its commands (``ready``)
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        made.append(self.ledger.add_process(proc.pid))
        inst.init = self._payload(inst, proc, payload, log, deadline)
        move(proc.pid, self.cgroup_parent)  # the instance's cgroup holds the container alone
        if s.private_network:
            self._address(inst)
        self.ready(inst, deadline)
        inst.boot = BootPhases.ready_since(t0)

    def _payload(
        self,
        inst: NspawnInstance,
        proc: subprocess.Popen,
        payload: list[str],
        log: Path,
        deadline: float,
    ) -> psutil.Process:
        """The container's PID 1 once it runs: nspawn's child that runs ``payload`` (INIT, or
        the booted init, found by nspawn itself: named alike, with its arguments), not one of
        nspawn's own forks, whose command line ends in the same arguments."""
        nspawn = psutil.Process(proc.pid)
        while time_left(deadline) > 0:
            if proc.poll() is not None:
                words = last_words(proc.returncode, output=log)
                raise InstanceError(f"{inst.name}: systemd-nspawn ended ({words})")
            for child in nspawn.children(recursive=True):
                try:
                    argv = child.cmdline()
                    if argv[1:] == payload[1:] and Path(argv[0]).name == Path(payload[0]).name:
                        return child
                except psutil.Error:
                    continue
            time.sleep(0.02)
        raise InstanceError(f"{inst.name}: systemd-nspawn started no container in time")

    def _address(self, inst: NspawnInstance) -> None:
        """The instance's address on the host end of nspawn's veth (``host0``) inside."""
        pid = str(inst.init.pid if inst.init else 0)
        for args in (["addr", "add", f"{inst.address}/{PREFIX}", "dev", "host0"],
                     ["link", "set", "host0", "up"]):  # fmt: skip
            ip = subprocess.run(["nsenter", "--target", pid, "--net", "--", "ip", *args],
                                capture_output=True, text=True, check=False)  # fmt: skip
            if ip.returncode != 0:
                raise InstanceError(f"{inst.name}: ip {' '.join(args)}: {ip.stderr.strip()}")

    def facts(self) -> dict[str, object]:
        s = self.settings
        bridge = f"--network-bridge={BRIDGE}: a veth of nspawn's on the run's bridge"
        return {
            **super().facts(),
            "root": self.opened.described(),
            "control": "nsenter into the container's namespaces and root, in its cgroup",
            "network": bridge
            if s.private_network
            else "the instance's own namespace, a veth on the run's bridge (no --private-network)",
            "limits": "the instance's own cgroup, made by the driver (nspawn sets none without "
            "systemd)",
        }
