"""Docker (``driver: docker``): Debian's docker.io, as its users run it, with its defaults.

A private dockerd for the platform's run: its own ``--data-root`` (images, overlay2 layers,
volumes: under the platform's directory in the run's work directory), ``--exec-root``,
``--pidfile``, unix socket and ``--config-file`` (so the host's /etc/docker is neither read nor
written), started with ``nsenter --net`` in the engine's host namespace (``engine.py``): its
docker0 bridge, its NAT (MASQUERADE for what leaves, DNAT and docker-proxy for published ports),
its iptables chains and ip_forward are there, never in the host's namespace. ``ip netns exec``
does not work for it: it remounts /sys, which hides the cgroup v1 mounts ("Devices cgroup isn't
mounted"). The docker CLI beside that dockerd (the same package's) drives it over the socket.

Settings, Docker's defaults first:

- ``network: bridge``: the container on docker0 behind NAT, so the net workload's traffic to the
  peer is masqueraded on the way out and de-NATed on the way back; ``host``: the container in the
  engine host's namespace itself;
- ``publish: false``: no port published; ``true``: the ports hvbench's servers listen on inside
  an instance (``PUBLISHED``) published on the instance's own address on the engine's host
  (a docker-proxy each, and DNAT rules);
- ``storage: overlay2``: the disk workloads write to DATA_MOUNT in the container's root, whose
  upper layer is overlay2's in dockerd's data-root (on the host's filesystem of the run's work
  directory); ``volume``: the instance's data disk (ext4 on a loop device with direct I/O, as on
  the other container platforms) as a Docker volume of the local driver bound to it.

Snapshot: refused. Docker's ``checkpoint`` is experimental (dockerd's ``--experimental``, off
in its defaults); tried with it and CRIU 4.1, ``docker checkpoint create`` worked but ``docker
start --checkpoint`` failed 3 times in 9 ("failed to upload checkpoint to containerd: commit
failed: content ... already exists", moby#42900, Docker 20.10; starting it again failed alike).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import psutil
from pydantic import model_validator

from hvbench.drivers.base import DataDisk
from hvbench.drivers.disks import DATA_MOUNT
from hvbench.drivers.engine import EngineCli, EngineDriver, EngineInstance
from hvbench.drivers.footprint import Pace
from hvbench.drivers.last_words import last_words
from hvbench.drivers.oslevel import OsLevelSettings
from hvbench.errors import HvbenchError
from hvbench.host.network import PREFIX
from hvbench.host.process import checked, which
from hvbench.host.resources import resource_name
from hvbench.store import WhatRan

PUBLISHED = (80, 143, 5432)
"""The ports hvbench's servers listen on inside an instance (consolidation's web, imap and db
roles): what ``publish: true`` publishes."""
DAEMON_READY_S = 60.0
NO_CHECKPOINT = (
    "docker checkpoint with Debian 12's Docker 20.10 fails its restore now and then (moby#42900: "
    '"failed to upload checkpoint to containerd: commit failed: content ... already exists", '
    "3 of 9 here with an experimental dockerd and CRIU 4.1)"
)
HOST_DIRS = (
    "/run/docker/plugins", "/run/docker", "/run/containerd/s", "/run/containerd",
    "/opt/containerd/bin", "/opt/containerd/lib", "/opt/containerd",
)  # fmt: skip
"""Where dockerd and its containerd make directories whatever their flags say (plugin sockets,
shim sockets, containerd's opt plugin), children first."""
PACE = Pace(slowdown=1.0, io_slowdown=1.2, start_s=0.8, core_s=0.7)
"""runc under the engine: compute at native speed, as the container platform's. The engine's
run and rm of a group in parallel (issue 53): a group of 1 took 0.76 s to start and stop, groups
of 8, 64 and 256 0.37, 0.34 and 0.31 s an instance on the 2 cores of the development host
(``bench/storm_overhead.py --drivers docker,podman --counts 1,8,64 --repeat 2``, medians, and
``--counts 256 --repeat 1``, 2026-12-07; ``docker run``/``rm`` by hand 0.27-0.33 s), so 0.7
core-seconds each."""


class DockerSettings(OsLevelSettings):
    driver: Literal["docker"]
    network: Literal["bridge", "host"] = "bridge"
    """bridge: docker0 behind NAT (Docker's default); host: the engine host's namespace."""
    publish: bool = False
    """Publish the servers' ports (``PUBLISHED``) on the instance's address (``docker run -p``)."""
    storage: Literal["overlay2", "volume"] = "overlay2"
    """Where the disk workloads write: the container's overlay2 root, or a volume on the data
    disk."""

    @model_validator(mode="after")
    def _published_on_a_bridge(self) -> DockerSettings:
        if self.publish and self.network == "host":
            raise ValueError(
                "network: bridge where publish is true (the host network has no ports to publish)"
            )
        return self

    no_lifecycle: ClassVar[str] = f"has no migration or snapshot: {NO_CHECKPOINT}"

    def pace(self, kvm: bool) -> Pace:
        return PACE


class DockerDriver(EngineDriver[DockerSettings]):
    name: ClassVar[str] = "docker"
    settings_model = DockerSettings
    engine_name: ClassVar[str] = "docker"
    modes: ClassVar[tuple[str, ...]] = ("bridge", "bridge, published", "host")
    packages: ClassVar[tuple[str, ...]] = ("docker.io",)
    host_dirs = HOST_DIRS
    companions = ("docker-proxy",)

    @classmethod
    def binary(cls) -> str | None:
        """dockerd, where its package's CLI is there too (``client``)."""
        dockerd = which("dockerd")
        return dockerd if dockerd and cls.client(dockerd) else None

    @staticmethod
    def client(dockerd: str) -> str | None:
        """The docker CLI of dockerd's package (sbin/dockerd, bin/docker), not another docker
        on PATH, which may be newer than the daemon."""
        where = Path(dockerd).parent
        found = [c for c in (where / "docker", where.parent / "bin" / "docker") if c.exists()]
        return str(found[0]) if found else None

    @classmethod
    def ran_by_settings(cls, settings: DockerSettings) -> WhatRan:
        published = ", published" if settings.publish else ""
        return WhatRan(mode=settings.network + published, modes=cls.modes)

    @classmethod
    def lacks(cls) -> list[str]:
        return ["checkpoint: Docker 20.10's restore fails now and then (moby#42900)"]

    def _start_engine(self, netns: str, home: Path) -> EngineCli:
        """A dockerd of the run's own in the engine's namespace, until its socket answers."""
        dockerd = self.binary() or "dockerd"
        state = self._state
        self.resources.append(self.ledger.add("path", str(state)))
        state.mkdir()
        config = home / "daemon.json"  # the host's /etc/docker/daemon.json is not read
        # its trust key beside it, not in /etc/docker (a daemon.json key only, no flag)
        config.write_text(json.dumps({"deprecated-key-path": str(home / "key.json")}))
        socket = state / "docker.sock"
        # dockerd bind-mounts its own network namespace there for host-network containers, and
        # leaves it at its exit
        self.resources.append(self.ledger.add("mount", str(state / "exec" / "netns" / "default")))
        cli = [self.client(dockerd) or "docker", "--config", str(home / "cli"),
               "--host", f"unix://{socket}"]  # fmt: skip
        argv = [
            "nsenter", f"--net=/run/netns/{netns}", "--", dockerd,
            "--data-root", str(home / "data"), "--exec-root", str(state / "exec"),
            "--pidfile", str(state / "dockerd.pid"), "--host", f"unix://{socket}",
            "--config-file", str(config), "--exec-opt", "native.cgroupdriver=cgroupfs",
            "--log-level", "warn",
        ]  # fmt: skip
        log = home / "dockerd.log"
        # containerd, started by dockerd with dockerd's environment, writes its stacks into
        # TMPDIR when dockerd finds it unresponsive and kills it (under load: the host's /tmp
        # kept a containerd.<pid>.stacks.log after the full test suite); the run's home is removed
        tmp = home / "tmp"
        tmp.mkdir()
        t0 = time.monotonic()
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "TMPDIR": str(tmp)})  # fmt: skip
        self.resources.append(self.ledger.add_process(proc.pid))
        while True:
            version = subprocess.run([*cli, "version", "--format", "{{.Server.Version}}"],
                                     capture_output=True, check=False)  # fmt: skip
            if version.returncode == 0:
                return EngineCli(cli, round(time.monotonic() - t0, 3))
            if proc.poll() is not None or time.monotonic() - t0 > DAEMON_READY_S:
                words = last_words(proc.poll(), output=log)
                raise HvbenchError(f"platform {self.platform}: dockerd did not start ({words})")
            time.sleep(0.1)

    @property
    def _state(self) -> Path:
        """dockerd's state (its exec-root, socket, pidfile): short, for containerd's socket is
        under it, and a unix socket's path has 108 bytes."""
        return Path("/run", resource_name(self.ledger.run_id, self.platform, prefix="hvbd"))

    def _shared_pids(self) -> list[int]:
        """dockerd (its pidfile) and what it runs but the docker-proxies (containerd)."""
        try:
            dockerd = psutil.Process(int((self._state / "dockerd.pid").read_text()))
            below = dockerd.children(recursive=True)
        except (OSError, ValueError, psutil.Error):
            return []
        with contextlib.suppress(psutil.Error):
            below = [p for p in below if p.name() not in self.companions]
        return [dockerd.pid, *(p.pid for p in below)]

    def _facts(self, cli: Sequence[str]) -> dict[str, str]:
        out = subprocess.run([*cli, "info", "--format", "{{json .}}"], capture_output=True,
                             text=True, check=False)  # fmt: skip
        info = json.loads(out.stdout or "{}")
        return {
            "version": str(info.get("ServerVersion")),
            "runtime": str(info.get("DefaultRuntime")),
            "storage_driver": str(info.get("Driver")),
            "cgroup_driver": str(info.get("CgroupDriver")),
            "network": self.settings.network,
            "published": f"ports {', '.join(map(str, PUBLISHED))} on the instance's address: "
            "DNAT, and a docker-proxy each"
            if self.settings.publish
            else "none",
        }

    def data_disk_how(self) -> str:
        return "a Docker volume (local driver) bound to it"

    def _run_flags(self, inst: EngineInstance, data: Path | None) -> list[str]:
        s, engine = self.settings, self.engine()
        flags = ["--network", s.network]
        if s.publish:
            address = self.network.address(inst.index)
            ip = ["ip", "-n", engine.netns, "addr"]
            here = [f"{address}/{PREFIX}", "dev", "eth0"]
            inst.resources.append(self.ledger.add("command", address, argv=[*ip, "del", *here]))
            checked([*ip, "add", *here])
            flags += [f"--publish={address}:{port}:{port}" for port in PUBLISHED]
        if data is not None:
            bound = f"volume-opt=type=none,volume-opt=o=bind,volume-opt=device={data}"
            volume = f"type=volume,source={inst.name}-data,target={DATA_MOUNT},{bound}"
            flags += ["--mount", volume]
        elif self.needs.data_disk:
            inst.data_disk = DataDisk(
                "overlay2",
                DATA_MOUNT,
                f"a directory of the container's root: overlay2's upper layer in the private "
                f"dockerd's data-root, on the host's filesystem of {self.workdir}",
            )
        return flags

    @property
    def wants_data_disk(self) -> bool:
        return self.settings.storage == "volume"
