"""The engine driver: what the container engines' drivers share (``docker``, ``podman``), on the
tree driver's (``tree.py``), each driven as its users drive it.

- the image: the guest image's tree, unpacked once per platform and imported (``<engine>
  import``): no registry is reached;
- the engine's host: a network namespace of the platform's own on the run's bridge
  (``RunNetwork.add_engine_netns``) that every engine command enters with ``nsenter --net``
  (``ip netns exec`` would remount /sys and hide the cgroup v1 mounts), so that the engine's
  bridge, NAT, iptables chains and ip_forward stay there and go with it;
- the limits of a VM of the platform's size as the engine's own flags (``--cpu-quota``, and
  ``--cpuset-cpus`` when pinned; ``--memory`` and ``--memory-swap`` alike: no swap), under the
  platform's cgroup parent;
- the data disk given to the container the way the engine gives one;
- the control channel ``<engine> exec``, which puts each command in the container's namespaces
  and cgroup;
- the engines refuse the workloads that need a userland (the system containers boot one);
- the engine's own processes (each container's monitor and companions, the platform's daemon
  once) are the instance's ``platform_pids``.

A daemon's data and state and the storage of images and containers live under the platform's
directory in the run's work directory, or in the engine's namespace, all in the run's ledger
before they exist.
"""

from __future__ import annotations

import subprocess
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

import psutil

from hvbench.drivers.base import BootPhases, Lifecycle, MigrationPlan, OperationReport
from hvbench.drivers.oslevel import INIT, WORKDIR, host_data_disk, wait_exited
from hvbench.drivers.tree import OS, Tree, TreeDriver, TreeInstance
from hvbench.errors import HvbenchError, InstanceError
from hvbench.host.cgroup import cgroup_of
from hvbench.host.process import failed, output_tail, processes, time_left
from hvbench.host.resources import resource_name


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


@dataclass
class EngineInstance(TreeInstance):
    """One container of the engine's."""

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
        """Its engine's checkpoint, where it has one (Podman's); refused before a run where it
        has none."""
        return EngineLifecycle(self.driver, self) if isinstance(self.driver, EngineDriver) else None

    def platform_pids(self) -> list[int]:
        """Its monitor (the tree driver's), its companions, and the platform's daemon where
        this instance holds it."""
        if self.init is None:
            return []
        found = [*self.shared, *super().platform_pids()]
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


class EngineDriver(TreeDriver[OS, EngineInstance, EngineTree]):
    """Runs each instance as a container of an engine that holds the platform's run: its
    command line's ``import``, ``run``, ``exec``, ``inspect`` and ``rm``."""

    instance_class = EngineInstance

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
    remove: ClassVar[tuple[str, ...]] = ("rm", "--force")
    """The engine's command that ends and removes a container at once: a disposable instance
    needs no grace period."""

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

    def engine_command(self, inst: EngineInstance, argv: list[str], deadline: float) -> str:
        """One engine command on the instance; its output (InstanceError if it failed)."""
        proc = subprocess.run([*inst.cli, *argv], capture_output=True, text=True,
                              timeout=time_left(deadline), check=False)  # fmt: skip
        if proc.returncode != 0:
            raise InstanceError(
                failed(f"{inst.name}: {self.engine_name} {' '.join(argv[:2])}", proc)
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
            what = f"platform {self.platform}: {self.engine_name} import of the guest tree"
            raise HvbenchError(failed(what, imported))
        engine = Engine(tuple(cli), tag, netns.name, address, self._facts(cli), started_s)
        return EngineTree(**vars(tree), engine=engine)

    def limit_flags(self, inst: EngineInstance) -> list[str]:
        """The limits of a VM of the platform's size (``OsLevelSettings.limits``) in the
        engine's flags, under the platform's cgroup parent."""
        return [
            *self.settings.limits.engine_flags(inst.index),
            f"--cgroup-parent={self.cgroup_parent}",
        ]

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
        inst.container_id = resource_name(self.ledger.run_id, inst.name)
        remove = [*engine.cli, *self.remove, inst.container_id]
        made.append(self.ledger.add("command", inst.container_id, argv=remove))
        argv = self.run_argv(inst, data)
        t0 = time.monotonic()  # boot is the engine's run until the init runs its commands
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=time_left(deadline))  # fmt: skip
        if proc.returncode != 0:
            raise InstanceError(failed(f"{inst.name}: {self.engine_name} run", proc))
        self._inspect(inst)
        self.ready(inst, deadline)
        inst.boot = BootPhases.ready_since(t0)

    def run_argv(self, inst: EngineInstance, data: Path | None) -> list[str]:
        """The engine's ``run`` of the instance's container (named ``inst.container_id``),
        detached, with the data disk mounted at ``data`` on the host where given."""
        inst.cli = self._instance_cli(inst)
        return [
            *inst.cli, "run", "--detach", "--name", inst.container_id,
            "--hostname", inst.name, *self.limit_flags(inst),
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
            inst.cgroups_path = cgroup_of(inst.init.pid)
        except (ValueError, OSError, psutil.Error):
            raise InstanceError(
                f"{inst.name}: {self.engine_name} inspect gave no running init: {output_tail(out)}"
            ) from None
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
