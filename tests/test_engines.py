"""The container engines' drivers for real: a private dockerd per platform, real containers of
the guest tree, a cpu, disk and net study through the runner, and the host as it was before (its
iptables, ip_forward, links, mounts, users), after a run and after ``hvbench cleanup`` following
a SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import require
from consolidation_checks import every_role_served, quick_run
from oslevel_checks import (
    EXPECTED,
    container_leftovers,
    failures,
    killed_run_is_cleaned_up,
    metric_values,
    run_study,
    runtime_runs,
    started_run,
)
from polling import wait_for

from hvbench.drivers import DRIVERS, docker, podman
from hvbench.drivers.docker import DockerDriver
from hvbench.drivers.lxc import LxcDriver
from hvbench.drivers.nspawn import NspawnDriver
from hvbench.drivers.oslevel import criu
from hvbench.drivers.podman import PodmanDriver
from hvbench.errors import StudyError
from hvbench.host.packages import listed, refusals
from hvbench.host.process import processes
from hvbench.host.resources import resource_name
from hvbench.plan import needed_packages
from hvbench.store import Store
from hvbench.study import parse_study

ENGINE_PROCESSES = (
    "dockerd", "containerd", "docker-proxy", "podman", "conmon", "slirp4netns", "fuse-overlayfs",
    "systemd-nspawn", "lxc-start",
)  # fmt: skip


def host_state() -> dict[str, object]:
    """What an engine would change on the host: the host namespace's iptables and ip_forward,
    its links, users and id ranges, the directories engines make where they are fixed, and
    the mounts and processes of engines (other engineers' runs mount and run beside ours)."""

    def out(*argv: str) -> str:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("#"))

    mounts = Path("/proc/mounts").read_text().splitlines()
    links = sorted(line.split(":")[1].strip() for line in out("ip", "-o", "link").splitlines())
    engines = [
        " ".join(argv)
        for argv in (p.info["cmdline"] or [""] for p in processes(["cmdline"]))
        if Path(argv[0]).name in ENGINE_PROCESSES or argv[0].startswith("[lxc monitor]")
    ]
    return {
        "iptables": out("iptables-save"),
        "ip6tables": out("ip6tables-save"),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "links": [link for link in links if not link.startswith("hv") or link.startswith(OURS)],
        "users": out("getent", "passwd"),
        "subids": [
            Path(f).read_text() if Path(f).exists() else "" for f in ("/etc/subuid", "/etc/subgid")
        ],
        "dirs": [d for d in ENGINE_DIRS if Path(d).exists()],
        "acls": out("getfacl", "--skip-base", "--absolute-names", "/dev/net/tun", "/dev/fuse"),
        "mounts": [m for m in mounts if any(w in m for w in ENGINE_MOUNTS)],
        "engines": engines,
        "cgroups": sorted(
            str(p)
            for name in ("libpod_parent", "payload", "docker")
            for p in Path("/sys/fs/cgroup").glob(f"*/{name}")
        ),
    }


ENGINE_DIRS = (
    *docker.HOST_DIRS, *podman.HOST_DIRS, *NspawnDriver.host_dirs, "/etc/docker/key.json",
    "/run/lxc",
)  # fmt: skip
OURS = ("hve", "hvl", "hvv")
"""Links of the engines' drivers (engine hosts, LXC's veths, instances'): other drivers' links
(``hv...``) come and go with the other runs on this host."""
ENGINE_MOUNTS = ("docker", "containerd", "hvbd-", "hvbp-", "containers", "fuse", "netns-")


@pytest.fixture(scope="module")
def _engines() -> None:
    for driver in (DockerDriver, PodmanDriver, NspawnDriver, LxcDriver):
        verdict = driver.check()
        require(verdict.ok, f"{driver.name}: {verdict.detail}; {verdict.fix}")


def one_line_refusal(platform: str) -> str:
    with pytest.raises(StudyError) as refused:
        parse_study(
            f"name: t\nplatforms:\n  p: {platform}\nworkloads:\n  - {{name: boot}}\n", "t.yaml"
        )
    text = str(refused.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_malformed_settings_are_refused_in_one_line_naming_the_choices():
    assert DRIVERS["docker"] is DockerDriver and DRIVERS["podman"] is PodmanDriver
    assert DRIVERS["nspawn"] is NspawnDriver and DRIVERS["lxc"] is LxcDriver
    assert "privileged" in one_line_refusal("{driver: lxc, privileged: maybe}")
    assert "private_network" in one_line_refusal("{driver: nspawn, private_network: maybe}")
    network = one_line_refusal("{driver: docker, network: e1000}")
    assert "network" in network and "'bridge'" in network and "'host'" in network
    storage = one_line_refusal("{driver: docker, storage: zfs}")
    assert "'overlay2'" in storage and "'volume'" in storage
    assert "publish" in one_line_refusal("{driver: docker, publish: maybe}")
    assert "network: bridge where publish is true" in one_line_refusal(
        "{driver: docker, network: host, publish: true}"
    )
    assert "rootless" in one_line_refusal("{driver: podman, rootless: maybe}")
    network = one_line_refusal("{driver: podman, network: e1000}")
    assert all(f"'{n}'" in network for n in ("slirp4netns", "bridge", "host"))
    storage = one_line_refusal("{driver: podman, storage: btrfs}")
    assert all(f"'{n}'" in storage for n in ("overlay", "fuse-overlayfs", "vfs"))
    no_snapshot = {
        "docker": "docker checkpoint with Debian 12's Docker 20.10 fails its restore",
        "podman, rootless: true": "podman container checkpoint needs root: rootless: false",
        "nspawn": "nspawn has no checkpoint",
        "lxc": "lxc-checkpoint",
    }
    for driver, why in no_snapshot.items():
        snapshot = f"{{driver: {driver}}}\nworkloads:\n  - {{name: snapshot}}\n"
        with pytest.raises(StudyError, match=why):
            parse_study(f"name: t\nplatforms:\n  p: {snapshot}", "t.yaml")


def test_a_missing_engine_is_refused_naming_with_engines():
    study = parse_study(
        "name: t\nplatforms:\n  d: {driver: docker}\n  p: {driver: podman, rootless: true}\n"
        "workloads:\n  - {name: boot}\n",
        "t.yaml",
    )
    engines = {"docker.io", "podman", "slirp4netns", "uidmap"}
    assert all("--with-engines" in listed()[name].options for name in engines)
    lines = refusals(needed_packages(study), set(listed()) - engines)
    assert lines == [
        "platform d needs docker.io, not installed: ./setup.sh --with-engines",
        "platform p needs podman, slirp4netns, uidmap, not installed: ./setup.sh --with-engines",
    ]


@pytest.mark.usefixtures("_engines")
def test_doctor_lists_the_engines_with_their_versions():
    out = subprocess.run(
        [sys.executable, "-m", "hvbench", "doctor", "--json", "docker", "podman", "nspawn", "lxc"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = {f["name"]: f for f in json.loads(out.stdout) if f["kind"] == "driver"}
    assert found["docker"]["ok"] and "20.10" in found["docker"]["detail"]
    assert found["podman"]["ok"] and "4.3" in found["podman"]["detail"]
    assert found["nspawn"]["ok"] and "systemd 252" in found["nspawn"]["detail"]
    assert found["lxc"]["ok"] and "LXC 5.0" in found["lxc"]["detail"]
    assert all("checkpoint" in f["detail"] for f in found.values())


ENGINES = (
    "  dk-bridge: {driver: docker, memory: 256M}\n"
    "  dk-host: {driver: docker, memory: 256M, network: host, storage: volume}\n"
    "  dk-pub: {driver: docker, memory: 256M, publish: true, storage: volume}\n"
    "  pm-root: {driver: podman, memory: 256M}\n"
    "  pm-user: {driver: podman, memory: 256M, rootless: true, storage: fuse-overlayfs}\n"
    "  ns-own: {driver: nspawn, memory: 256M}\n"
    "  ns-priv: {driver: nspawn, memory: 256M, private_network: true}\n"
    "  lx-user: {driver: lxc, memory: 256M}\n"
    "  lx-root: {driver: lxc, memory: 256M, privileged: true}\n"
)
"""Docker (its defaults: bridge behind NAT, the overlay2 root; its host network with the data
disk as a volume; published ports), Podman (rootful with its defaults: a CNI bridge, overlay;
rootless through slirp4netns on fuse-overlayfs), nspawn and LXC in both their modes."""


class EnginesRun(NamedTuple):
    store: Store
    run_id: str
    again: str
    """The second run's id, after ``hvbench cleanup``."""
    cleaned: list[dict]
    """What ``hvbench cleanup --json`` said between the runs."""
    states: tuple[dict, dict, dict]
    """The host's state before, between (after the first run and the cleanup), and after the
    second run."""


@pytest.fixture(scope="module")
def engines_run(_engines: None) -> EnginesRun:
    """cpu, disk and net on every engine's platforms, twice, with ``hvbench cleanup`` between,
    as a user runs a study again."""
    before = host_state()
    store, run_id = run_study(ENGINES)
    out = subprocess.run([sys.executable, "-m", "hvbench", "cleanup", "--json"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    between = host_state()
    _, again = run_study(ENGINES)
    return EnginesRun(store, run_id, again, json.loads(out.stdout), (before, between, host_state()))


@pytest.mark.guest
def test_engines_run_cpu_disk_net_and_say_what_ran(engines_run):
    store, run_id = engines_run.store, engines_run.run_id
    assert failures(store, run_id) == []
    assert failures(store, engines_run.again) == []
    values = metric_values(store, run_id)
    for name in EXPECTED:
        assert len(values[name]) == 9 and all(v > 0 for v in values[name]), name
    cells = store.cells(run_id)
    resolved = {c.platform: c.platform_settings["resolved"] for c in cells}
    assert {c.platform: c.ran.mode for c in cells} == {
        "dk-bridge": "bridge",
        "dk-host": "host",
        "dk-pub": "bridge, published",
        "pm-root": "rootful, bridge",
        "pm-user": "rootless, slirp4netns",
        "ns-own": "instance network",
        "ns-priv": "private network",
        "lx-user": "unprivileged",
        "lx-root": "privileged",
    }
    assert resolved["dk-bridge"]["version"].startswith("20.10")
    assert resolved["dk-bridge"]["storage_driver"] == "overlay2"
    assert resolved["dk-bridge"]["engine_start_s"] > 0
    assert resolved["pm-root"]["version"].startswith("4.3")
    assert resolved["pm-root"]["network_backend"] == "cni"
    assert resolved["pm-user"]["rootless"] == "true"
    assert resolved["pm-user"]["storage_driver"].endswith("fuse-overlayfs")
    assert {r.get("runtime") for r in resolved.values()} == {"runc", None}  # nspawn: its own
    assert resolved["ns-priv"]["version"].startswith("systemd 252")
    assert resolved["lx-user"]["version"] == resolved["lx-root"]["version"] == "LXC 5.0.2"
    assert "unprivileged" in resolved["lx-user"]["ids"]


@pytest.mark.guest
def test_engines_leave_the_host_as_it_was_and_run_again(engines_run):
    """A finished run leaves nothing for ``hvbench cleanup``, nor does the second run."""
    before, between, after = engines_run.states
    assert between == before
    assert engines_run.run_id not in [c["run"] for c in engines_run.cleaned]
    assert after == before
    assert container_leftovers(engines_run.run_id) == []
    assert container_leftovers(engines_run.again) == []


def in_run_cgroup(run_id: str, command: str) -> bool:
    """Whether ``command`` runs in a cgroup of the run's platforms (``hvb-<run>-<platform>``):
    in one of its containers, whatever the engine's way in."""
    tag = f":/{resource_name(run_id)}-"
    for proc in processes(["name"]):
        if proc.info["name"] == command:
            with contextlib.suppress(OSError):
                if tag in Path(f"/proc/{proc.pid}/cgroup").read_text():
                    return True
    return False


@pytest.mark.guest
@pytest.mark.usefixtures("_engines")
@pytest.mark.parametrize(
    "platform",
    [
        "{driver: docker, memory: 256M}",
        "{driver: podman, rootless: true}",
        "{driver: nspawn}",
        "{driver: lxc}",
    ],
)
def test_sigkilled_run_is_cleaned_up(platform, tmp_path):
    before = host_state()
    killed_run_is_cleaned_up(platform, tmp_path, runs=in_run_cgroup)
    assert host_state() == before


@pytest.mark.guest
@pytest.mark.usefixtures("_engines")
def test_containerd_dumps_its_stacks_into_the_run_not_into_the_hosts_tmp(tmp_path):
    """dockerd kills a containerd that stops answering its health checks (a loaded host), after
    a SIGUSR1 that has containerd write its stacks into its TMPDIR: the host's /tmp kept a
    containerd.<pid>.stacks.log after a full test suite. They go into the run's directory,
    removed with it."""
    study = tmp_path / "study.yaml"
    study.write_text(
        "name: stacks\nplatforms:\n  p: {driver: docker, memory: 256M}\nworkloads:\n"
        "  - {name: cpu, suite: micro, integer: {duration: 5}, float: {duration: 1},"
        " memory: {duration: 1}, branchy: {duration: 1}}\nrepetitions: 1\n"
    )
    run, run_id = started_run(study)
    try:
        wait_for(lambda: runtime_runs(run_id, "stress-ng"), 600, f"stress-ng in run {run_id}")
        state = f"/run/{resource_name(run_id, 'p', prefix='hvbd')}/"
        [containerd] = [
            p
            for p in processes(["name", "cmdline"])
            if p.info["name"] == "containerd" and state in " ".join(p.info["cmdline"] or [])
        ]
        tmp = Path(containerd.environ().get("TMPDIR", "/tmp"))
        assert tmp != Path("/tmp"), "containerd writes its stacks into the host's /tmp"
        stacks = tmp / f"containerd.{containerd.pid}.stacks.log"
        os.kill(containerd.pid, signal.SIGUSR1)
        wait_for(stacks.exists, 30, f"{stacks} written")
    finally:
        run.communicate(timeout=600)
    assert run.returncode == 0
    assert not tmp.exists()
    assert container_leftovers(run_id) == []


@pytest.mark.guest
@pytest.mark.usefixtures("_engines")
def test_memory_counts_the_engines_own_processes():
    """Two containers of each engine: each one's overhead is its cgroup's kernel memory plus
    the engine's processes that serve it (containerd's shim and docker-proxy; conmon,
    slirp4netns and fuse-overlayfs; LXC's monitor; systemd-nspawn), and the platform's daemon
    (dockerd and containerd; rootless Podman's pause process) is counted once, with the
    first."""
    before = host_state()
    store, run_id = run_study(
        "  dk: {driver: docker, memory: 256M, publish: true}\n"
        "  pm: {driver: podman, memory: 256M, rootless: true, storage: fuse-overlayfs}\n"
        "  lx: {driver: lxc, memory: 256M}\n"
        "  ns: {driver: nspawn, memory: 256M}\n",
        instances="2",
        workloads="  - {name: memory}\n",
    )
    assert failures(store, run_id) == []
    platform = {c.id: c.platform for c in store.cells(run_id)}
    got: dict[tuple[str, int], dict[str, float]] = {}
    for row in store.metric_rows(run_id):
        got.setdefault((platform[row.cell_id], row.instance), {})[row.name] = row.value
    counted = {(platform[r.cell_id], r.instance): r.content for r in store.raw_outputs(run_id)}
    serves = {
        "dk": ("containerd-shim", "docker-proxy"),
        "pm": ("conmon", "slirp4netns", "fuse-overlayfs"),
        "lx": ("lxc-start",),
        "ns": ("systemd-nspawn",),
    }
    daemons = {"dk": ("dockerd", "containerd["), "pm": ("podman pause[",), "lx": (), "ns": ()}
    for (name, index), v in got.items():
        own = counted[(name, index)].split("the platform's own processes (PSS B) ")[1]
        assert all(p in own for p in serves[name]), (name, own)
        assert all((d in own) == (index == 0) for d in daemons[name]), (name, index, own)
        engine = v["memory.overhead_mib"] - v["memory.kernel_mib"]
        assert abs(v["memory.host_pss_mib"] - v["memory.guest_ram_mib"] - engine) <= 0.02
        assert engine > 0.2, f"{name}-{index}: the engine's processes hold memory: {own}"
    assert got[("dk", 0)]["memory.overhead_mib"] > got[("dk", 1)]["memory.overhead_mib"] + 10
    assert host_state() == before


SYSTEM_CONTAINERS = """\
name: consolidation-system-containers
platforms:
  ns: {driver: nspawn, instances: [5]}
  lx: {driver: lxc, privileged: true, instances: [5]}
workloads:
  - {name: consolidation, sets: 1, mix: {web: 1, imap: 1, app: 1, db: 1, idle: 1, nfs: 1}}
repetitions: 1
"""
"""The containers' and TCG tests' mix, so that all use one root filesystem image (nfs's
packages included); five instances: the set without nfs, which the host's kernel serves."""


@pytest.mark.guest
@pytest.mark.alone
@pytest.mark.usefixtures("_engines")
def test_system_containers_boot_the_root_image_and_serve_consolidation():
    """nspawn and LXC boot the Debian root filesystem image with its own init (systemd, under
    an overlay of each instance's own) and one set of real servers runs in them: every active
    role's requests counted against those due, and the host as it was."""
    before = host_state()
    store, session, _ = quick_run(SYSTEM_CONTAINERS, "nspawn + lxc", cells=2)
    rows = store.metric_rows(session.run_id)
    platform = {c.id: c.platform for c in store.cells(session.run_id)}
    for cell in {r.cell_id for r in rows}:
        every_role_served({(r.instance, r.name): r.value for r in rows if r.cell_id == cell},
                          platform[cell])  # fmt: skip
    for cell in store.cells(session.run_id):
        settings = cell.platform_settings
        assert "booted with its own init (systemd" in settings["resolved"]["root"], cell.platform
        assert "nginx" in settings["rootfs"]["requested"], cell.platform
    assert host_state() == before


@pytest.mark.guest
@pytest.mark.usefixtures("_engines")
def test_rootful_podman_snapshots_through_its_checkpoint():
    """podman container checkpoint --export of a running container and restore --import of the
    file: the time of each, the file's size, the restored container answering; the host as it
    was."""
    require(criu() is not None, "CRIU 4.1 or later (./setup.sh --with-criu)")
    before = host_state()
    store, run_id = run_study(
        "  pm: {driver: podman, memory: 256M}\n", workloads="  - {name: snapshot}\n"
    )
    assert failures(store, run_id) == []
    values = {name: v for name, (v,) in metric_values(store, run_id).items()}
    assert 0 < values["snapshot.save_s"] < 30 and 0 < values["snapshot.restore_s"] < 30
    assert 0 < values["snapshot.size_mib"] < 64
    (raw,) = [json.loads(r.content) for r in store.raw_outputs(run_id)]
    assert raw["file_bytes"] > 0 and set(raw["steps"]) == {"checkpoint_s", "rm_s", "restore_s"}
    assert host_state() == before
