"""Podman (``driver: podman``): Debian's podman 4.3, rootful or rootless, with its defaults.

No daemon: every command is ``podman`` with the platform's own storage (``--root``,
``--runroot``, ``--tmpdir``, ``--network-config-dir``, and ``CONTAINERS_CONF`` naming a
containers.conf of the platform's), entering the engine's host namespace (``engine.py``) with
``nsenter --net``, so that the CNI bridge, its iptables chains and ip_forward are made there.
Run in the host's namespace, its bridge's rules stayed in the host's nat and filter tables after
the container was gone. ``--runtime runc``: crun fails on this host's hybrid cgroup layout.
``--ulimit nofile=N:N --ulimit nproc=N:N`` within the host's hard limits: Podman's defaults
(1048576, 4194304) fail ("error setting rlimit type 7").

``rootless: true`` runs every command as a user made for the platform (``useradd``, with
subordinate uid and gid ranges of its own, and ACLs on /dev/net/tun for slirp4netns and on
/dev/fuse for fuse-overlayfs, both mode 0600 here), all in
the run's ledger before it exists and removed after: the user's processes (Podman's pause
process, conmon, slirp4netns), the ACL, the id ranges, the user. Podman rootless sets no cgroup
limits on cgroup v1 ("not supported and ignored") and none without systemd on v2: there the
driver makes each instance's cgroup itself, with the same limits, and every ``podman run`` and
``exec`` starts inside it, so the container (and conmon beside it) stays within them.

Settings, Podman's defaults first (unset: what Podman chooses, recorded from ``podman info``):
``rootless: false`` (hvbench runs as root); ``network``: ``bridge`` (CNI) rootful,
``slirp4netns`` rootless (user-space TCP/IP), or ``host`` (the engine host's namespace);
``storage``: ``overlay`` (kernel overlayfs, rootless too on this kernel), ``fuse-overlayfs`` (the
overlay driver through the FUSE program), ``vfs`` (full copies). The data disk is bind-mounted
(``--volume``), owned by the container's root (the user, rootless).

Snapshot (rootful): ``podman container checkpoint --export`` to a file and ``podman container
restore --import`` of it, through runc and CRIU 4.1 (``./setup.sh --with-criu``; Debian 12's
3.17 fails ``criu check`` on kernels from 6.13 on: "vdso: Unexpected rt vDSO area bounds"), which
Podman finds on PATH and runc is told (``--runtime-flag criu=PATH``). Rootless Podman cannot
checkpoint (CRIU needs root); there is no migration: both refused before a run.
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal, get_args

from hvbench.drivers.base import Operation, OperationReport, operation_path
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.engine import EngineCli, EngineDriver, EngineInstance, no_criu
from hvbench.drivers.footprint import Pace
from hvbench.drivers.oslevel import OsLevelSettings, criu
from hvbench.errors import InstanceError
from hvbench.host.cgroup import own_cgroup
from hvbench.host.process import checked, which
from hvbench.host.resources import resource_name
from hvbench.host.subids import subordinate_ids
from hvbench.store import WhatRan

Network = Literal["slirp4netns", "bridge", "host"]
Storage = Literal["overlay", "fuse-overlayfs", "vfs"]
NPROC_MAX = 32768
"""Podman runs conmon with at most this many processes, and runc cannot raise the container's
limit above its caller's ("error setting rlimit type 6")."""
HOST_DIRS = ("/var/lib/containers", "/var/cache/containers", "/var/lib/cni")
"""What rootful Podman makes whatever its flags say: the blob cache of an import, the
short-name aliases' lock, CNI's address leases; removed where the run made them."""
NO_CRIU = no_criu("podman container checkpoint")
PACE = Pace(slowdown=1.0, io_slowdown=1.2, start_s=0.5, core_s=0.7)
"""runc under the engine: compute at native speed, as the container platform's. The engine's
run and rm of a group in parallel (issue 53), rm without a grace period (``remove``): a group of
1 took 0.47 s to start and stop, groups of 8 and 64 0.29 and 0.38 s an instance on the 2 cores
of the development host, so 0.6-0.8 core-seconds each (``bench/storm_overhead.py --drivers
podman --counts 1,8,64 --repeat 2``, medians, 2026-12-07; 10.8 s for a group of 1 before
``--time 0``, of which 10.4 s its stop)."""


class PodmanSettings(OsLevelSettings):
    driver: Literal["podman"]
    rootless: bool = False
    """Run the engine as an unprivileged user of the platform's own."""
    network: Network | None = None
    """Unset: Podman's default (bridge rootful, slirp4netns rootless)."""
    storage: Storage | None = None
    """Unset: Podman's default storage driver (overlay here)."""

    def pace(self, kvm: bool) -> Pace:
        return PACE

    def refuses(self, operation: Operation) -> str | None:
        if operation == "migrate":
            return "the podman driver has no migration: Podman restores a checkpoint, on one host"
        if self.rootless:
            return "podman container checkpoint needs root: rootless: false"
        return None if criu() else NO_CRIU


class PodmanDriver(EngineDriver[PodmanSettings]):
    name: ClassVar[str] = "podman"
    settings_model = PodmanSettings
    engine_name: ClassVar[str] = "podman"
    packages: ClassVar[tuple[str, ...]] = (
        "podman", "slirp4netns", "fuse-overlayfs", "uidmap", "acl",
    )  # fmt: skip
    modes: ClassVar[tuple[str, ...]] = tuple(
        f"{who}, {net}" for who in ("rootful", "rootless") for net in get_args(Network)
    )
    companions = ("slirp4netns", "fuse-overlayfs", "rootlessport")
    remove = ("rm", "--force", "--time", "0")
    """``rm --force`` alone stops the container first, waiting 10 s for an init that takes no
    SIGTERM before it kills it."""

    @classmethod
    def binary(cls) -> str | None:
        return which("podman")

    @classmethod
    def ran_by_settings(cls, settings: PodmanSettings) -> WhatRan:
        return WhatRan(mode=_mode(settings.rootless, network_of(settings)), modes=cls.modes)

    @classmethod
    def lacks(cls) -> list[str]:
        missing = [p for p in ("slirp4netns", "fuse-overlayfs", "newuidmap", "setfacl")
                   if which(p) is None]  # fmt: skip
        return [f"{', '.join(missing)} not installed"] * bool(missing) + [NO_CRIU] * (
            criu() is None
        )

    @classmethod
    def version(cls) -> str:
        found = criu()
        checkpoint = f"; checkpoint with CRIU {found.version} (rootful)" if found else ""
        return super().version() + checkpoint

    def _start_engine(self, netns: str, home: Path) -> EngineCli:
        """Podman's storage and configuration under ``home`` (short paths for its sockets
        under /run), and for rootless its user; no daemon to start."""
        s = self.settings
        run = self._run_dir(netns)
        self.resources.append(self.ledger.add("path", str(run)))
        run.mkdir(mode=0o700)
        if not s.rootless:
            for made in [d for d in HOST_DIRS if not Path(d).exists()]:
                self.resources.append(self.ledger.add("path", made))
        conf = home / "containers.conf"
        conf.write_text(
            '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
            f'events_logfile_path = "{run}/events.log"\n'
        )
        env = [f"CONTAINERS_CONF={conf}", f"XDG_RUNTIME_DIR={run}"]
        who: list[str] = []
        if s.rootless:
            # the user's mount namespace (its pause process's) is made once and sees the host's
            # later mounts (the data disks) only from a shared mount: "/" is not one here
            self.resources.append(self.ledger.add("mount", str(home)))
            checked(["mount", "--bind", str(home), str(home)])
            checked(["mount", "--make-rshared", str(home)])
            user = self._user_name(netns)
            uid = self._make_user(user, home / "user")
            os.chown(run, uid, uid)
            os.chown(home, uid, uid)
            env.append(f"HOME={home / 'user'}")
            who = ["runuser", "-u", user, "--"]
        storage = ["--root", str(home / "storage"), "--runroot", str(run / "storage")]
        if s.storage:
            storage += ["--storage-driver", "vfs" if s.storage == "vfs" else "overlay"]
        if s.storage == "fuse-overlayfs":
            storage += ["--storage-opt", f"overlay.mount_program={which('fuse-overlayfs')}"]
        podman = self.binary() or "podman"
        checkpoint: list[str] = []
        found = criu()
        if found and not s.rootless:  # Podman looks for criu on PATH, runc is told which
            env.append(f"PATH={Path(found.path).parent}:{os.environ.get('PATH', '')}")
            checkpoint = ["--runtime-flag", f"criu={found.path}"]
        cli = [
            "nsenter", f"--net=/run/netns/{netns}", "--", *who, "env", *env, podman,
            *storage, "--tmpdir", str(run / "libpod"), "--network-config-dir", str(home / "net"),
            "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
            *checkpoint,
        ]  # fmt: skip
        return EngineCli(cli, None)

    def snapshot(self, inst: EngineInstance, deadline: float) -> OperationReport:
        """``podman container checkpoint --export`` of the running container to a file (CRIU
        dumps its processes, which stops it), ``rm``, then ``podman container restore
        --import`` of the file: the container anew, of the same name, the instance from then
        on, once it answers. The file is in the ledger before it exists, and goes after."""
        if not inst.alive():
            raise InstanceError(f"{inst.name}: the container is not running any more")
        file = operation_path(self.workdir / self.platform, inst, "checkpoint").with_suffix(".tar")
        made = self.ledger.add("path", str(file))
        try:
            t0 = time.monotonic()
            save = self.engine_command(inst, ["container", "checkpoint", "--export", str(file),
                                              inst.container_id], deadline)  # fmt: skip
            save_s = time.monotonic() - t0
            size = file.stat().st_size
            self.engine_command(inst, [*self.remove, inst.container_id], deadline)
            self.stopped_by_checkpoint(inst, deadline)
            t1 = time.monotonic()
            restore = self.engine_command(
                inst, ["container", "restore", "--import", str(file)], deadline
            )
            self._inspect(inst)
            self.ready(inst, deadline)
            restore_s = time.monotonic() - t1
        finally:
            self.ledger.release(made)
        figures = {"save_s": save_s, "size_mib": size / (1 << 20), "restore_s": restore_s}
        raw = json.dumps({"checkpoint": save, "restore": restore, "file_bytes": size,
                          "steps": {"checkpoint_s": save_s, "rm_s": t1 - t0 - save_s,
                                    "restore_s": restore_s}})  # fmt: skip
        return OperationReport(figures, raw)

    def _run_dir(self, netns: str) -> Path:
        """Podman's runtime directory (XDG_RUNTIME_DIR): short, for its sockets."""
        return Path("/run", resource_name(self.ledger.run_id, _host_of(netns), prefix="hvbp"))

    def _shared_pids(self) -> list[int]:
        """Rootless: the user's pause process, which holds its namespaces for every container
        (rootful Podman has no process but each container's)."""
        pause = self._run_dir(self.engine().netns) / "libpod" / "pause.pid"
        if not self.settings.rootless or not pause.exists():
            return []
        return [int(pause.read_text().strip() or 0)]

    def _make_user(self, user: str, home: Path) -> int:
        """The rootless user, its id ranges and its ACLs on the devices it opens, each in the ledger
        before it is made; its uid. Its processes are killed before it is removed."""
        ledger, made = self.ledger, self.resources
        # --force: the SIGKILL of its processes (released first) is sent, not awaited, and a plain
        # userdel refuses a user whose last process has yet to exit (a leftover user, once in CI)
        made.append(ledger.add("command", user, argv=["userdel", "--force", user]))
        checked(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                  str(home), "--shell", "/usr/sbin/nologin", user])  # fmt: skip
        subordinate_ids(ledger, made, user)
        devices = ["/dev/net/tun"] * (network_of(self.settings) != "host")
        devices += ["/dev/fuse"] * (self.settings.storage == "fuse-overlayfs")
        for device in devices:  # mode 0600 here: slirp4netns's tap, fuse-overlayfs's mounts
            acl = subprocess.run(["getfacl", "--skip-base", "--absolute-names", device],
                                 capture_output=True, text=True, check=False)  # fmt: skip
            # no ACL before: remove it whole (removing one entry would leave a mask behind)
            undo = ["-x", f"u:{user}"] if acl.stdout.strip() else ["-b"]
            made.append(ledger.add("command", f"{user} {device}", argv=["setfacl", *undo, device]))
            checked(["setfacl", "-m", f"u:{user}:rw", device])
        made.append(ledger.add("command", f"{user} processes", argv=["pkill", "-KILL", "-u", user]))
        uid = pwd.getpwnam(user).pw_uid
        home.mkdir()
        os.chown(home, uid, uid)
        return uid

    def _facts(self, cli: Sequence[str]) -> dict[str, str]:
        out = subprocess.run([*cli, "info", "--format", "json"], capture_output=True, text=True,
                             check=False)  # fmt: skip
        info = json.loads(out.stdout or "{}")
        host, store = info.get("host", {}), info.get("store", {})
        options = store.get("graphOptions") or {}
        program = options.get("overlay.mount_program", {}).get("Executable")
        return {
            "version": str(info.get("version", {}).get("Version")),
            "runtime": str(host.get("ociRuntime", {}).get("name")),
            "storage_driver": str(store.get("graphDriverName"))
            + (f" through {program}" if program else ""),
            "network": network_of(self.settings),
            "network_backend": str(host.get("networkBackend")),
            "rootless": str(host.get("security", {}).get("rootless")).lower(),
            "cgroup_manager": str(host.get("cgroupManager")),
        }

    def limit_flags(self, inst: EngineInstance) -> list[str]:
        """Rootful: Podman's flags; rootless: none (Podman would ignore them), the container
        stays in the instance's own cgroup (``_instance_cli``), which holds them."""
        return [] if self.settings.rootless else super().limit_flags(inst)

    def _instance_cli(self, inst: EngineInstance) -> tuple[str, ...]:
        """Rootless: the engine's command started inside the instance's own cgroup, with the
        limits Podman would set."""
        cli = super()._instance_cli(inst)
        if not self.settings.rootless:
            return cli
        own = own_cgroup(f"{self.cgroup_parent}/{inst.name}", self.settings.limits, inst.index)
        return (*own, *cli)

    def _run_flags(self, inst: EngineInstance, data: Path | None) -> list[str]:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # the host's hard limits
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], NPROC_MAX)
        flags = ["--network", network_of(self.settings), "--ulimit", f"nofile={nofile}:{nofile}",
                 "--ulimit", f"nproc={nproc}:{nproc}"]  # fmt: skip
        if data is not None:
            if self.settings.rootless:  # the container's root is the user
                uid = pwd.getpwnam(self._user_name(self.engine().netns)).pw_uid
                os.chown(data, uid, uid)
            flags += ["--volume", f"{data}:{DATA_MOUNT}"]
        return flags

    def _user_name(self, netns: str) -> str:
        """The rootless user: the run's and its engine host's."""
        return resource_name(self.ledger.run_id, prefix=f"hvb{_host_of(netns)}")


def network_of(settings: PodmanSettings) -> Network:
    """The network the platform runs: the one set, else Podman's default for its mode."""
    return settings.network or ("slirp4netns" if settings.rootless else "bridge")


def _host_of(netns: str) -> str:
    """The engine host's number in its namespace's name (``<run netns>-e<n>``)."""
    return netns.rpartition("-e")[2]


def _mode(rootless: bool, network: str) -> str:
    return f"{'rootless' if rootless else 'rootful'}, {network}"
