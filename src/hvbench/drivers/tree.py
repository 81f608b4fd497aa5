"""The tree driver: what the drivers whose containers a program of the host's makes share (the
engines ``docker`` and ``podman``, and the system containers ``lxc`` and ``nspawn``), each driven
as its users drive it, over the very tree every other platform runs.

- the root: the guest image's tree (what ``container`` and ``gvisor`` run), unpacked once per
  platform, read-only (an engine imports it as its image: ``engine.py``); for the workloads that
  need a userland, the system containers boot the guests' Debian root filesystem image,
  read-only under an overlay of each instance's own, with its own init (systemd, to
  BOOT_TARGET); the engines refuse them;
- the cgroup limits of a VM of the platform's size (``OsLevelSettings.limits``), under a cgroup
  parent of the platform's own that goes with the run;
- the data disk: the OCI drivers' ext4 on a loop device with direct I/O, formatted and mounted on
  the host (``oslevel.host_data_disk``), given to the container the way its program gives one;
- the container's PID 1 is oslevel's INIT, or the booted image's init;
- the program's own processes (each container's monitor: containerd's shim, conmon, LXC's
  monitor, systemd-nspawn) are the instance's ``platform_pids``: host CPU and memory the
  platform costs.

Everything the program makes lives under the platform's directory in the run's work directory,
and everything is in the run's ledger before it exists, so ``hvbench cleanup`` removes what a
killed run left.
"""

from __future__ import annotations

import contextlib
import os
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import psutil

from hvbench.drivers.base import Availability, Driver, Kernel
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.oslevel import (
    CgroupContainer,
    OsLevelSettings,
    kill_but_init,
    mount_userland,
    overlay_root,
    wait_spawner,
)
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import rootfs, userland
from hvbench.host.cgroup import add_to_ledger, cgroup_procs
from hvbench.host.process import probe, time_left
from hvbench.host.resources import Resource, resource_name

SETUP_HINT = "./setup.sh --with-engines"
"""What installs every engine (Debian's docker.io, podman and what they need)."""
BOOT_TARGET = "systemd.unit=basic.target"
"""What a system container's init (the root image's systemd) boots to: its own system (journald,
sysinit, sockets, timers) but not multi-user.target, where the root image's packages enabled
their servers (nginx, PostgreSQL, Dovecot...): those are the workload's to start, with its
configuration, as in the VMs, whose init starts none."""
SYSTEMD = "lib/systemd/systemd"
READY = [
    "sh", "-c", "until [ -S /run/systemd/private ]; do sleep 0.02; done; "
    "exec systemctl is-system-running --wait",
]  # fmt: skip
"""A booted container is ready once its init answers on its socket and has reached its target
(``running``)."""


@dataclass(frozen=True)
class Tree:
    """What every platform of the guest tree resolves once for its run: the tree, unpacked,
    every instance's root (read-only) or the source of its engine's image; or for a system
    container, the Debian root filesystem image, mounted read-only, under each instance's own
    overlay, booted with its own init."""

    root: Path
    key: str
    """The guest image's key in the cache."""
    manifest: dict
    """The guest image's manifest: what the tree holds."""
    rootfs: dict | None = None
    """The root filesystem image's summary where the instances boot it, else None."""

    @property
    def booted(self) -> bool:
        return self.rootfs is not None

    def described(self) -> str:
        """What the report's provenance says of the instances' root."""
        if self.booted:
            return (
                "the Debian root filesystem image, read-only, under an overlayfs of each "
                f"instance's own, booted with its own init (systemd, {BOOT_TARGET}); commands "
                "start in /tmp, a tmpfs"
            )
        return "the guest image's tree, unpacked, read-only; commands start in /tmp, a tmpfs"


@dataclass
class TreeInstance(CgroupContainer):
    """One container of the tree driver's; its program's command line (``cli``) is what each
    driver's ``command`` starts a command in it with."""

    cli: tuple[str, ...] = ()

    def host_pids(self) -> list[int]:
        """The container's processes and its program's that serve it (``platform_pids``)."""
        return sorted({*super().host_pids(), *self.platform_pids()})

    def platform_pids(self) -> list[int]:
        """The program's processes for this container: its monitor, the init's parents short of
        PID 1 and hvbench's own (containerd's shim, conmon, LXC's monitor, systemd-nspawn)."""
        if self.init is None:
            return []
        ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found: list[int] = []
        with contextlib.suppress(psutil.Error):
            for parent in self.init.parents():
                if parent.pid == 1 or parent.pid in ours:
                    break
                found.append(parent.pid)
        return sorted({pid for pid in found if psutil.pid_exists(pid)})

    def kill_commands(self) -> None:
        """Its cgroup's processes but the init and its spawner."""
        kill_but_init(self.init, cgroup_procs(self.cgroups_path))


OS = TypeVar("OS", bound=OsLevelSettings)
I = TypeVar("I", bound=TreeInstance)  # noqa: E741 (the usual name of a type variable)
TR = TypeVar("TR", bound=Tree)


class TreeDriver(Driver[OS, I, TR]):
    """A driver whose instances are containers of the guest image's tree, made by a program of
    the host's (an engine, nspawn, LXC) in a cgroup parent of the platform's own."""

    kernel: ClassVar[Kernel] = "host"
    engine_name: ClassVar[str]
    """The program that makes the containers, as the report names it."""
    instance_class: ClassVar[type[TreeInstance]]
    modes: ClassVar[tuple[str, ...]]
    """What ``mode`` in the report's label can say."""
    host_dirs: ClassVar[tuple[str, ...]] = ()
    """Directories the program makes where they are fixed, whatever its flags say, children
    first: those the run made are removed after, where empty."""

    @classmethod
    @abstractmethod
    def binary(cls) -> str | None:
        """The program's command, or None if it is not installed."""

    def mode(self) -> str:
        """The report's label for what ran (``rootless, slirp4netns``)."""
        return self.ran_by_settings(self.settings).mode or ""

    @classmethod
    def version(cls) -> str:
        """The program's ``--version``, its first line."""
        binary = cls.binary() or cls.engine_name
        out = probe([binary, "--version"])
        return (out.stdout.strip() or f"{binary}: version unknown").splitlines()[0]

    @classmethod
    def check(cls) -> Availability:
        if cls.binary() is None:
            return Availability(False, f"{cls.engine_name} is not installed", SETUP_HINT)
        lacks = cls.lacks()
        return Availability(True, cls.version() + (f"; lacks: {'; '.join(lacks)}" if lacks else ""))

    @classmethod
    def lacks(cls) -> list[str]:
        """What of the program's this host lacks, short of running it (a checkpoint, a mode)."""
        return []

    @property
    def cgroup_parent(self) -> str:
        """The containers' cgroup parent: one of the platform's own, removed with the run."""
        return f"/{resource_name(self.ledger.run_id, self.platform)}"

    def no_userland(self) -> str | None:
        """Why the platform cannot boot the Debian root filesystem image, or None where it
        can (a system container's driver)."""
        return (
            f"the {self.name} driver runs the guest image's tree; workloads that need a full "
            "userland (consolidation, kernbench) run on lxc and nspawn, which boot the Debian "
            "root's own init"
        )

    def _resolve_tree(self) -> Tree:
        """The guest tree unpacked (or the root filesystem image mounted, for a system
        container), and what the run must remove of the program's after."""
        verdict = self.check()
        if not verdict.ok:
            raise HvbenchError(f"platform {self.platform}: {verdict.detail}; {verdict.fix}")
        why = self.no_userland() if self.needs.userland else None
        if why:
            raise HvbenchError(f"platform {self.platform}: {why}")
        image = guest_image.build(self.needs.tools)
        if made := [d for d in self.host_dirs if not Path(d).exists()]:
            rmdir = ["rmdir", "--ignore-fail-on-non-empty", *made]
            self.resources.append(self.ledger.add("command", f"{self.name} dirs", argv=rmdir))
        self.resources += add_to_ledger(self.ledger, self.cgroup_parent)
        if self.needs.userland:
            built = userland.build(self.needs.tools, image, self.needs.packages)
            root = mount_userland(self, built)
            if not (root / SYSTEMD).exists():
                raise HvbenchError(
                    f"platform {self.platform}: the root filesystem image has no /{SYSTEMD} "
                    "to boot (none of the workloads' packages brought systemd)"
                )
            return Tree(root, image.key, image.manifest, built.summary())
        dest = self.workdir / f"{self.platform}-tree"
        root = rootfs.unpack(image, dest, self.ledger, self.resources)
        (root / DATA_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
        return Tree(root, image.key, image.manifest)

    def instance_root(self, home: Path, made: list[Resource]) -> Path:
        """The instance's root: the platform's read-only tree, or for a system container an
        overlay of its own (under ``home``) over the root filesystem image."""
        tree = self.opened
        return overlay_root(self, tree.root, home, made) if tree.booted else tree.root

    def ready(self, inst: TreeInstance, deadline: float) -> None:
        """Wait until the instance's init runs its first commands (``wait_spawner``), or a
        booted one's has reached its target; InstanceError with what it said otherwise."""
        if not self.opened.booted:
            wait_spawner(inst, deadline)
            return
        probe = inst.exec(READY, timeout=time_left(deadline))
        if not probe.ok:
            said = probe.text().strip() or probe.describe_failure()
            raise InstanceError(f"{inst.name}: its init did not reach {BOOT_TARGET}: {said}")

    def _instance(self, index: int) -> I:
        s = self.settings
        return self.instance_class(self.platform, index, s.vcpus, s.memory >> 20)  # type: ignore[return-value]

    def _stopped(self, instances: list[I]) -> None:
        for inst in instances:
            inst.init = None

    def facts(self) -> dict[str, object]:
        """What the program says it is and does, for ``describe``: its version first."""
        return {"version": self.version()}

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        info["resolved"] = {
            "engine": self.engine_name,
            **self.facts(),
            "mode": self.mode(),
            "cgroup": {"parent": self.cgroup_parent, **self.settings.limits.described()},
        }
        tree = self.opened
        info["image"] = tree.manifest
        if tree.rootfs is not None:
            info["rootfs"] = tree.rootfs
        return info
