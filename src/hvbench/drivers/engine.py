"""What the container engines' drivers share (``docker``, ``podman``; ``nspawn`` and ``lxc``
the parts of it that are not an engine's command line: ``TreeDriver``): each driven as its users
drive it, over the very tree every other platform runs.

- the image: the guest image's tree (what ``container`` and ``gvisor`` run), unpacked once per
  platform and imported (``<engine> import``): no registry is reached;
- the engine's host: a network namespace of the platform's own on the run's bridge
  (``RunNetwork.add_engine_netns``) that every engine command enters with ``nsenter --net``
  (``ip netns exec`` would remount /sys and hide the cgroup v1 mounts), so that the engine's
  bridge, NAT, iptables chains and ip_forward stay there and go with it;
- cgroup limits equal to the platform's ``vcpus`` (``--cpus``, and ``--cpuset-cpus`` when
  pinned) and ``memory`` (``--memory`` and ``--memory-swap`` alike: no swap, as in a VM), under a
  cgroup parent of the platform's own that goes with the run;
- the data disk: the OCI drivers' ext4 on a loop device with direct I/O, formatted and mounted on
  the host (``oslevel.host_data_disk``), given to the container the way the engine gives one;
- the container's PID 1 is oslevel's INIT, and the control channel ``<engine> exec``, which puts
  each command in the container's namespaces and cgroup;
- for the workloads that need a userland, the system containers (LXC, nspawn) boot the guests'
  Debian root filesystem image, read-only under an overlay of each instance's own, with its own
  init (systemd, to BOOT_TARGET); the engines refuse them;
- the engine's own processes (each container's monitor and companions, the platform's daemon
  once) are the instance's ``platform_pids``: host CPU and memory the platform costs.

Everything the engine makes lives under the platform's directory in the run's work directory (a
daemon's data and state, the storage of images and containers) or in the engine's namespace,
and everything is in the run's ledger before it exists, so ``hvbench cleanup`` removes what a
killed run left.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import subprocess
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple, TypeVar

import psutil

from hvbench.drivers.base import (
    Availability,
    Driver,
    Kernel,
    Lifecycle,
    MigrationPlan,
    OperationReport,
)
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.oslevel import (
    CFS_PERIOD_US,
    INIT,
    WORKDIR,
    CgroupContainer,
    OsLevelSettings,
    cgroup_procs,
    cgroup_version,
    host_data_disk,
    kill_but_init,
    mount_userland,
    overlay_root,
    pinned_cpus,
    wait_exited,
    wait_spawner,
)
from hvbench.errors import HvbenchError, InstanceError
from hvbench.guest import image as guest_image
from hvbench.guest import rootfs, userland
from hvbench.host.process import processes, time_left
from hvbench.host.resources import Resource

SETUP_HINT = "./setup.sh --with-engines"
"""What installs every engine (Debian's docker.io, podman and what they need)."""
CGROUPS = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Engine:
    """What ``open`` resolved for the platform's whole run: how to reach the engine, and what
    it is."""

    cli: tuple[str, ...]
    """The engine's command line up to the subcommand, entering its namespace."""
    image: str
    """The imported image of the guest tree."""
    netns: str
    """The engine's host: a network namespace of the platform's own."""
    address: str
    """The engine host's address on the run's bridge."""
    facts: dict[str, str]
    """What the engine says it is: version, runtime, network and storage drivers."""
    started_s: float | None
    """How long the engine's daemon took to answer (None: it has none)."""


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
class EngineInstance(CgroupContainer):
    """One container of the engine's."""

    cli: tuple[str, ...] = ()
    shared: tuple[int, ...] = ()
    """The platform's daemon (dockerd and its containerd, rootless Podman's pause process): on
    the first instance of a group only, so that it is counted once."""
    companions: tuple[str, ...] = ()
    """Programs of the engine's that serve one container each beside its monitor
    (slirp4netns, fuse-overlayfs, docker-proxy)."""
    ties: tuple[str, ...] = ()
    """What names this container in a companion's command line (its network namespace's
    path, its root's mount point, its address)."""

    def lifecycle(self) -> Lifecycle | None:
        """The driver's operations on it, where it has them (Podman's and Docker's
        checkpoint)."""
        return self.driver.lifecycle(self) if isinstance(self.driver, TreeDriver) else None

    def host_pids(self) -> list[int]:
        """The container's processes and the engine's that serve it (``platform_pids``)."""
        return sorted({*super().host_pids(), *self.platform_pids()})

    def platform_pids(self) -> list[int]:
        """The engine's processes for this container: its monitor (the init's parents short of
        PID 1 and hvbench's own: containerd's shim, conmon, LXC's monitor, systemd-nspawn), its
        companions, and the platform's daemon where this instance holds it."""
        if self.init is None:
            return []
        ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found = [*self.shared]
        with contextlib.suppress(psutil.Error):
            for parent in self.init.parents():
                if parent.pid == 1 or parent.pid in ours:
                    break
                found.append(parent.pid)
        if self.ties:
            for proc in processes(["name", "cmdline"]):
                line = " ".join(proc.info["cmdline"] or ())
                if proc.info["name"] in self.companions and any(t in line for t in self.ties):
                    found.append(proc.pid)
        return sorted({pid for pid in found if psutil.pid_exists(pid)})

    def command(self, argv: Sequence[str], stdin: bool) -> list[str]:
        """argv run in the container, in /tmp: the engine's ``exec`` (which passes ``stdin``
        on where asked)."""
        interactive = ["--interactive"] if stdin else []
        return [*self.cli, "exec", *interactive, "--workdir", WORKDIR, self.container_id, *argv]

    def kill_commands(self) -> None:
        """Its cgroup's processes but the init and its spawner."""
        kill_but_init(self.init, cgroup_procs(self.cgroups_path))


class EngineCli(NamedTuple):
    """How to reach an engine once started (``EngineDriver._start_engine``)."""

    cli: list[str]
    """Its command line up to the subcommand."""
    started_s: float | None
    """How long its daemon took to answer (None: it has none)."""


@dataclass(frozen=True)
class EngineTree(Tree):
    """What an engine's platform resolves: the tree, and the engine that imported it."""

    engine: Engine = field(kw_only=True)


OS = TypeVar("OS", bound=OsLevelSettings)
I = TypeVar("I", bound=EngineInstance)  # noqa: E741 (the usual name of a type variable)
TR = TypeVar("TR", bound=Tree)


class TreeDriver(Driver[OS, I, TR]):
    """A driver whose instances are containers of the guest image's tree, made by a program of
    the host's (an engine, nspawn, LXC) in a cgroup parent of the platform's own."""

    kernel: ClassVar[Kernel] = "host"
    engine_name: ClassVar[str]
    instance_class: ClassVar[type[EngineInstance]] = EngineInstance
    modes: ClassVar[tuple[str, ...]]
    """What ``mode`` in the report's label can say."""
    host_dirs: ClassVar[tuple[str, ...]] = ()
    """Directories the engine makes where they are fixed, whatever its flags say, children
    first: those the run made are removed after, where empty."""

    @classmethod
    @abstractmethod
    def binary(cls) -> str | None:
        """The engine's command, or None if it is not installed."""

    def mode(self) -> str:
        """The report's label for what ran (``rootless, slirp4netns``)."""
        return self.ran_by_settings(self.settings).mode or ""

    @classmethod
    def version(cls) -> str:
        """The engine's ``--version``, its first line."""
        binary = cls.binary() or cls.engine_name
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
        return (out.stdout.strip() or f"{binary}: version unknown").splitlines()[0]

    @classmethod
    def check(cls) -> Availability:
        if cls.binary() is None:
            return Availability(False, f"{cls.engine_name} is not installed", SETUP_HINT)
        lacks = cls.lacks()
        return Availability(True, cls.version() + (f"; lacks: {'; '.join(lacks)}" if lacks else ""))

    @classmethod
    def lacks(cls) -> list[str]:
        """What of the engine's this host lacks, short of running it (a checkpoint, a mode)."""
        return []

    @property
    def cgroup_parent(self) -> str:
        """The containers' cgroup parent: one of the platform's own, removed with the run."""
        return f"/hvb-{self.ledger.run_id[-8:]}-{self.platform}"

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
        container), and what the run must remove of the engine's after."""
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
        cgroup_parent(self, self.cgroup_parent)
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

    def ready(self, inst: EngineInstance, deadline: float) -> None:
        """Wait until the instance's init runs its first commands (``wait_spawner``), or a
        booted one's has reached its target; InstanceError with what it said otherwise."""
        if not self.opened.booted:
            wait_spawner(inst, deadline)
            return
        probe = inst.exec(READY, timeout=time_left(deadline))
        if not probe.ok:
            said = probe.text().strip() or probe.describe_failure()
            raise InstanceError(f"{inst.name}: its init did not reach {BOOT_TARGET}: {said}")

    def lifecycle(self, inst: EngineInstance) -> Lifecycle | None:
        """The platform's operations on a running instance (none by default: ``refuses``
        says why before a run)."""
        return None

    def _instance(self, index: int) -> I:
        s = self.settings
        return self.instance_class(self.platform, index, s.vcpus, s.memory >> 20)  # type: ignore[return-value]

    def _stopped(self, instances: list[I]) -> None:
        for inst in instances:
            inst.init = None

    def facts(self) -> dict[str, object]:
        """What the engine says it is and does, for ``describe``: its version first."""
        return {"version": self.version()}

    def describe(self) -> dict:
        info = super().describe()
        if not self.is_open:
            return info
        s = self.settings
        info["resolved"] = {
            "engine": self.engine_name,
            **self.facts(),
            "mode": self.mode(),
            "cgroup": {
                "parent": self.cgroup_parent,
                "cpu": f"CFS quota {s.vcpus * CFS_PERIOD_US} us per {CFS_PERIOD_US} us"
                + (" and a cpuset of as many cores" if s.pin else ""),
                "memory": f"{s.memory} bytes, no swap",
            },
        }
        tree = self.opened
        info["image"] = tree.manifest
        if tree.rootfs is not None:
            info["rootfs"] = tree.rootfs
        return info


class EngineDriver(TreeDriver[OS, EngineInstance, EngineTree]):
    """Runs each instance as a container of an engine that holds the platform's run: its
    command line's ``import``, ``run``, ``exec``, ``inspect`` and ``rm``."""

    @abstractmethod
    def _start_engine(self, netns: str, home: Path) -> EngineCli:
        """Make what the engine needs for the run under ``home`` (in ``resources`` before it
        exists) and start its daemon in ``netns`` where it has one; the command line up to the
        subcommand, and how long the daemon took to answer."""

    @abstractmethod
    def _facts(self, cli: Sequence[str]) -> dict[str, str]:
        """What the engine says it is (``info``): version, runtime, network, storage."""

    @abstractmethod
    def _run_flags(self, inst: EngineInstance, data: Path | None) -> list[str]:
        """The engine's own ``run`` flags for the instance: its network, the data disk mounted
        at ``data`` on the host given at DATA_MOUNT, what the engine needs here."""

    companions: ClassVar[tuple[str, ...]] = ()
    """The engine's programs that serve one container each (``EngineInstance.companions``)."""

    def _shared_pids(self) -> list[int]:
        """The platform's daemon processes, which serve every container (none by default)."""
        return []

    def _started(self, instances: list[EngineInstance]) -> None:
        """The daemon counted with the group's first instance, once."""
        instances[0].shared = tuple(self._shared_pids())

    def snapshot(self, inst: EngineInstance, deadline: float) -> OperationReport:
        """Checkpoint the container to its engine's storage and restore it from there (the
        engines that have a checkpoint override this; the others are refused before a run)."""
        raise InstanceError(f"{inst.name}: the {self.name} driver has no snapshot")

    def lifecycle(self, inst: EngineInstance) -> Lifecycle | None:
        return EngineLifecycle(self, inst)

    def engine_command(self, inst: EngineInstance, argv: list[str], deadline: float) -> str:
        """One engine command on the instance; its output (InstanceError if it failed)."""
        proc = subprocess.run([*inst.cli, *argv], capture_output=True, text=True,
                              timeout=time_left(deadline), check=False)  # fmt: skip
        if proc.returncode != 0:
            raise InstanceError(
                f"{inst.name}: {self.engine_name} {' '.join(argv[:2])} failed: "
                f"{(proc.stderr or proc.stdout).strip()[-300:]}"
            )
        return (proc.stdout + proc.stderr).strip()

    def stopped_by_checkpoint(self, inst: EngineInstance, deadline: float) -> None:
        """Wait for the checkpointed container's init to go (CRIU ended it)."""
        wait_exited(inst.init, time_left(deadline))

    def engine(self) -> Engine:
        """The engine ``open`` resolved (DriverNotOpen before it)."""
        return self.opened.engine

    def _resolve(self) -> EngineTree:
        """The engine's host, its storage and daemon, and the guest tree imported as an image."""
        tree = self._resolve_tree()
        netns, address = self.network.add_engine_netns()
        self.resources.append(netns)
        home = self.workdir / self.platform
        self.resources.append(self.ledger.add("path", str(home)))
        home.mkdir()
        cli, started_s = self._start_engine(netns.name, home)
        tag = f"hvbench-guest:{tree.key[:12].lower()}"
        tar = subprocess.Popen(["tar", "-C", str(tree.root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [*cli, "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True,
            timeout=600, check=False,
        )  # fmt: skip
        tar.wait()
        if imported.returncode != 0:
            raise HvbenchError(
                f"platform {self.platform}: {self.engine_name} import of the guest tree failed: "
                f"{imported.stderr.strip()[-300:]}"
            )
        engine = Engine(tuple(cli), tag, netns.name, address, self._facts(cli), started_s)
        return EngineTree(**vars(tree), engine=engine)

    def limits(self, inst: EngineInstance) -> list[str]:
        """The cgroup limits of a VM of the same size (``vcpus`` CPUs, ``memory`` and no swap),
        in the platform's cgroup parent."""
        s = self.settings
        flags = [
            f"--cpu-period={CFS_PERIOD_US}",
            f"--cpu-quota={s.vcpus * CFS_PERIOD_US}",
            f"--memory={s.memory}",
            f"--memory-swap={s.memory}",
            f"--cgroup-parent={self.cgroup_parent}",
        ]
        if s.pin:
            flags.append(f"--cpuset-cpus={pinned_cpus(inst.index, s.vcpus)}")
        return flags

    def _start_one(self, inst: EngineInstance, deadline: float) -> None:
        engine, made = self.engine(), inst.resources
        home = self.workdir / self.platform / inst.name
        made.append(self.ledger.add("path", str(home)))
        home.mkdir()
        data = None
        if self.needs.data_disk and self.wants_data_disk:
            data = home / "data"
            host_data_disk(self, self.settings.disk, inst, data, self.data_disk_how(), made)
        inst.companions = self.companions
        inst.container_id = f"hvb-{self.ledger.run_id[-8:]}-{inst.name}"
        remove = [*engine.cli, "rm", "--force", inst.container_id]
        made.append(self.ledger.add("command", inst.container_id, argv=remove))
        argv = self.run_argv(inst, data)
        t0 = time.monotonic()  # boot is the engine's run until the init runs its commands
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=time_left(deadline))  # fmt: skip
        if proc.returncode != 0:
            raise InstanceError(
                f"{inst.name}: {self.engine_name} run failed: {proc.stderr.strip()[-300:]}"
            )
        self._inspect(inst)
        self.ready(inst, deadline)
        inst.boot = {"ready": round(time.monotonic() - t0, 3)}

    def run_argv(self, inst: EngineInstance, data: Path | None) -> list[str]:
        """The engine's ``run`` of the instance's container (named ``inst.container_id``),
        detached, with the data disk mounted at ``data`` on the host where given."""
        inst.cli = self._instance_cli(inst)
        return [
            *inst.cli, "run", "--detach", "--name", inst.container_id,
            "--hostname", inst.name, *self.limits(inst),
            # as in the guests, where rc mounts tmpfs there: scratch space lives in memory
            "--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777", "--tmpfs", "/run:rw,nosuid,nodev,mode=755",
            "--workdir", WORKDIR, *self._run_flags(inst, data), self.engine().image, *INIT,
        ]  # fmt: skip

    def _inspect(self, inst: EngineInstance) -> None:
        """The container's init on the host, its cgroup, its address (its own on the engine's
        network, else the engine host's), and what names it in its companions' command lines
        (its network namespace, its root's mount point, its address)."""
        out = subprocess.run(
            [*inst.cli, "inspect", "--format",
             "{{.State.Pid}}|{{.NetworkSettings.SandboxKey}}|{{.GraphDriver.Data.MergedDir}}|"
             "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
             inst.container_id],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        pid, netns, root, listed = [*out.stdout.strip().split("|"), "", "", ""][:4]
        addresses = listed.split()
        named = [netns, root, *(f"-container-ip {a} " for a in addresses)]
        # what inspect gave: a path or the flag, not "" or "<no value>"
        inst.ties = tuple(t for t in named if t.startswith(("/", "-")))
        try:
            inst.init = psutil.Process(int(pid))
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except (ValueError, OSError, psutil.Error):
            raise InstanceError(
                f"{inst.name}: {self.engine_name} inspect gave no running init: "
                f"{(out.stdout + out.stderr).strip()[-200:]}"
            ) from None
        inst.cgroups_path = cgroup_of(cgroups)
        inst.address = next((a for a in addresses if a), self.engine().address)

    def _instance_cli(self, inst: EngineInstance) -> tuple[str, ...]:
        """The command line that runs and execs the instance's container: the engine's."""
        return self.engine().cli

    @property
    def wants_data_disk(self) -> bool:
        """Whether the disk workloads get the data disk (else the engine's own storage)."""
        return True

    def data_disk_how(self) -> str:
        """How the container gets the data disk, in the words of the report's provenance."""
        return "bind-mounted"

    def facts(self) -> dict[str, object]:
        engine = self.engine()
        return {
            **engine.facts,
            "engine_start_s": engine.started_s,
            "engine_host": f"network namespace {engine.netns} ({engine.address}) on the run's "
            "bridge: the engine's bridge, NAT and iptables rules are in it",
            "image": f"{engine.image}: the guest image's tree, imported with "
            f"{self.engine_name} import (no registry); commands start in /tmp, a tmpfs",
            "control": f"{self.engine_name} exec (the container's namespaces and cgroup)",
        }


snapshots = itertools.count()
"""Numbers each checkpoint of the run's, so that none is written twice."""


def no_criu(what: str) -> str:
    """Why ``what`` (an engine's checkpoint) cannot run here: no CRIU of CRIU_MIN or later."""
    return (
        f"{what} needs CRIU 4.1 or later (Debian 12's 3.17 fails `criu check` on kernels from "
        "6.13 on), not found here: ./setup.sh --with-criu"
    )


class EngineLifecycle(Lifecycle):
    """Snapshot and restore of one container through its engine's checkpoint (the driver's
    ``snapshot``); no migration (refused before a run, by the settings' ``refuses``)."""

    def __init__(self, driver: EngineDriver, inst: EngineInstance) -> None:
        self.driver, self.inst = driver, inst

    def migrate(self, plan: MigrationPlan, deadline: float) -> OperationReport:
        raise InstanceError(f"{self.inst.name}: the {self.driver.name} driver has no migration")

    def snapshot(self, deadline: float) -> OperationReport:
        return self.driver.snapshot(self.inst, deadline)


V1_JOINED = ("cpu", "cpuacct", "memory", "pids", "systemd", "unified")
"""The hierarchies of a legacy or hybrid layout that an instance of its own cgroup joins: its
limits', its accounting's, and systemd's and the unified one (where nspawn makes its payload's
cgroup, beside its own)."""


def joined(path: str) -> list[Path]:
    """The directories of the cgroup ``path`` that a process joins (``V1_JOINED``, or the
    unified hierarchy's)."""
    path = path.lstrip("/")
    if cgroup_version() == 2:
        return [CGROUPS / path]
    return [CGROUPS / h / path for h in V1_JOINED if (CGROUPS / h).is_dir()]


def own_cgroup(path: str, settings: OsLevelSettings) -> tuple[str, ...]:
    """Make the cgroup ``path`` (under the platform's parent) with the limits of a VM of the
    settings' size, for an engine that sets none itself (rootless Podman, nspawn without
    systemd); the argv prefix that starts a command inside it (the shell moves itself in, then
    execs the command)."""
    if settings.pin:
        raise HvbenchError(f"pin: true is not supported where hvbench makes the cgroup ({path})")
    quota, memory = settings.vcpus * CFS_PERIOD_US, str(settings.memory)
    path = path.lstrip("/")
    dirs = joined(path)
    if cgroup_version() == 2:
        parent = dirs[0].parent
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text("+cpu +memory")
        limits = {dirs[0] / "cpu.max": f"{quota} {CFS_PERIOD_US}", dirs[0] / "memory.max": memory,
                  dirs[0] / "memory.swap.max": "0"}  # fmt: skip
    else:
        cpu, mem = CGROUPS / "cpu" / path, CGROUPS / "memory" / path
        limits = {
            cpu / "cpu.cfs_period_us": str(CFS_PERIOD_US),
            cpu / "cpu.cfs_quota_us": str(quota),
            mem / "memory.limit_in_bytes": memory,
            mem / "memory.memsw.limit_in_bytes": memory,
        }
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for knob, value in limits.items():
        knob.write_text(value)
    join = " ".join(f"echo $$ > {shlex.quote(str(d))}/cgroup.procs;" for d in dirs)
    return ("sh", "-c", f'{join} exec "$@"', "sh")


def cgroup_parent(driver: Driver, parent: str) -> None:
    """Put the platform's cgroup parent in every hierarchy into the driver's resources, before
    anything makes it: its release removes it, children first."""
    hierarchies = [CGROUPS] if cgroup_version() == 2 else sorted(CGROUPS.iterdir())
    for hierarchy in hierarchies:
        where = hierarchy / parent.lstrip("/")
        driver.resources.append(driver.ledger.add("cgroup", str(where)))


def cgroup_of(text: str) -> str:
    """The container's cgroup path from its init's /proc/PID/cgroup: v1's cpuacct hierarchy's
    (where oslevel reads the processes), or v2's."""
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(",") or (cgroup_version() == 2 and controllers == ""):
            return path
    return ""


SUBIDS = 65536
"""Subordinate ids of a user of an engine's: what useradd gives a user by default."""


def checked(argv: list[str]) -> None:
    """Run a command of the host's administration; HvbenchError with its words if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HvbenchError(f"{argv[0]} failed: {proc.stderr.strip()[-300:]}")


def subordinate_ids(driver: Driver, user: str) -> int:
    """A range of SUBIDS subordinate uids and gids of ``user``'s own (rootless Podman's user;
    root, for LXC's unprivileged containers, which insists on them where newuidmap is
    installed), in the driver's resources before it is made: its line is removed from
    /etc/subuid and /etc/subgid after (``usermod --del-subuids`` refuses root while it runs
    anything). Its first id."""
    first = _free_subids()
    line = f"{user}:{first}:{SUBIDS}"
    undo = ["sed", "-i", f"/^{line}$/d", "/etc/subuid", "/etc/subgid"]
    driver.resources.append(driver.ledger.add("command", f"{user} ids", argv=undo))
    ids = f"{first}-{first + SUBIDS - 1}"
    checked(["usermod", "--add-subuids", ids, "--add-subgids", ids, user])
    return first


def _free_subids() -> int:
    """The first subordinate id after every range /etc/subuid and /etc/subgid give out (and
    after 100000, where useradd starts)."""
    ends = [100000]
    for table in ("/etc/subuid", "/etc/subgid"):
        path = Path(table)
        for line in path.read_text().splitlines() if path.exists() else []:
            fields = line.split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                ends.append(int(fields[1]) + int(fields[2]))
    return max(ends)
