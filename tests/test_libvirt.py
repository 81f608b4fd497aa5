"""libvirt: domain XML from the qemu driver's typed model, settings, doctor, and a real guest run
through a real libvirtd started by the suite, with nothing left behind."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import guest_fixtures
import libvirt
import psutil
import pytest
import sshd
from conftest import require
from consolidation_checks import every_role_served, quick_run
from guest_fixtures import GuestRun
from polling import wait_for
from pydantic import ValidationError
from run_checks import leftovers
from workload_env import run_workload

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.disks import DATA_SERIAL
from hvbench.drivers.libvirt import LibvirtDriver, LibvirtSettings, Source, domain_xml, volume_xml
from hvbench.drivers.qemu_devices import AGENT_PORT, Disk, KernelBoot, Machine, Nic
from hvbench.drivers.qemu_machine import data_device, nic_device
from hvbench.guest.image import cache_root
from hvbench.host.network import PEER_ADDRESS
from hvbench.host.resources import Ledger
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads.snapshot import Snapshot, SnapshotSettings

DAEMONS = r"""
set -e
# state, logs, caches, configuration and pid files of this libvirtd are its own (tmpfs in a
# private mount namespace); only its sockets, in $1, are visible outside
for d in /run /var/lib/libvirt /var/log/libvirt /var/cache/libvirt /etc/libvirt; do
    mkdir -p "$d"
    mount -t tmpfs hvbench-libvirt "$d"
done
mkdir /run/lock  # where libvirt locks a console's pty while a stream reads it
printf 'user = "root"\ngroup = "root"\n' > /etc/libvirt/qemu.conf
# libvirt 9 resolves its default QEMU user before reading qemu.conf: give it one, privately
cp /etc/passwd /etc/group "$1/"
echo 'libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin' >> "$1/passwd"
echo 'libvirt-qemu:x:64055:' >> "$1/group"
mount --bind "$1/passwd" /etc/passwd
mount --bind "$1/group" /etc/group
printf 'unix_sock_dir = "%s"\nauth_unix_rw = "none"\nauth_unix_ro = "none"\n' "$1" \
    > "$1/libvirtd.conf"
virtlogd &
exec libvirtd --config "$1/libvirtd.conf"
"""
UNSHARE = ("unshare", "--mount", "--propagation", "private", "--")


@pytest.fixture(scope="session")
def libvirt_uri(tmp_path_factory) -> Iterator[str]:
    """A libvirtd (with its virtlogd) of the suite's own, without systemd; stopped after."""
    require(Path("/usr/sbin/libvirtd").exists(), "libvirtd (apt-get install libvirt-daemon)")
    sockets = tmp_path_factory.mktemp("libvirt")
    uri = f"qemu:///system?socket={sockets}/libvirt-sock"
    with (sockets / "daemons.log").open("wb") as log:
        daemons = subprocess.Popen(
            [*UNSHARE, "sh", "-c", DAEMONS, "sh", str(sockets)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _until_answering(uri, daemons, sockets / "daemons.log", 60, "libvirtd up")
        yield uri
    finally:
        os.killpg(daemons.pid, signal.SIGTERM)
        try:
            daemons.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(daemons.pid, signal.SIGKILL)
            daemons.wait()


def _until_answering(
    uri: str, daemon: subprocess.Popen, log: Path, timeout: float, what: str
) -> None:
    """Wait until libvirtd answers at ``uri``, through ``daemon`` (libvirtd, or an sshd before
    it), whose ``log`` tells why not."""
    wait_for(
        lambda: _answers(uri, daemon, log),
        timeout,
        what,
        interval=0.2,
        detail=lambda: log.read_text()[-2000:],
    )


def _answers(uri: str, daemon: subprocess.Popen, log: Path) -> bool:
    """Whether libvirtd answers at ``uri``; a daemon that ended fails at once, with its log."""
    assert daemon.poll() is None, log.read_text()[-2000:]
    try:
        libvirt.open(uri).close()
    except libvirt.libvirtError:
        return False
    return True


REMOTE_POOL = "hvbench-remote"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ssh_uri(libvirt_uri: str, tmp_path_factory) -> Iterator[str]:
    """The suite's libvirtd as a remote host sees it: ``qemu+ssh://`` through an sshd of the
    suite's own on loopback (its keys, host key and known_hosts in a temporary directory), with
    a transient directory pool for the uploaded image and the data disks."""
    require(shutil.which("nc") is not None, "nc (apt-get install netcat-openbsd)")
    d = tmp_path_factory.mktemp("ssh")
    sshd.keys(d)
    port = _free_port()
    (d / "ssh").write_text(f'#!/bin/sh\nexec ssh -F {d}/ssh_config "$@"\n')
    (d / "ssh").chmod(0o755)
    sockets = Path(urlsplit(libvirt_uri).query.removeprefix("socket=")).parent
    uri = (
        f"qemu+ssh://root@127.0.0.1:{port}/system?socket={sockets}/libvirt-sock"
        f"&command={d}/ssh&proxy=netcat"
    )
    daemon = sshd.start(d, "sshd", "127.0.0.1", port)
    pool_dir = d / "pool"
    pool_dir.mkdir()
    conn = libvirt.open(libvirt_uri)
    pool = conn.storagePoolCreateXML(
        f"<pool type='dir'><name>{REMOTE_POOL}</name><target><path>{pool_dir}</path></target>"
        "</pool>"
    )
    try:
        _until_answering(uri, daemon, d / "sshd.log", 30, "libvirtd through sshd")
        yield uri
    finally:
        pool.destroy()
        conn.close()
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(15)


def _machine() -> Machine:
    return Machine(
        type="q35",
        accel="tcg",
        cpu="max",
        vcpus=2,
        memory_mib=384,
        boot=KernelBoot("/k/vmlinux", "/k/initrd.cpio", "console=ttyS0 hvbench.ip=198.18.0.10/24"),
        agent_socket="/w/a.sock",
        qmp_socket="",
        name="hvb-x-p-0",
        nics=[Nic("e1000", "hvl1t0", "52:54:00:14:00:00")],
        disks=[Disk("data", "/w/d.qcow2", "ahci", "qcow2", "writeback", "threads", "ser,ial")],
    )


def test_domain_xml_is_the_typed_machine():
    machine = _machine()
    machine.disks.insert(0, Disk("root", "/w/r.qcow2", "virtio-blk", "qcow2", "writeback"))
    sources = {
        "root": Source("file", {"file": "/w/r.qcow2"}),
        "data": Source("volume", {"pool": "p", "volume": "v"}),
    }
    dom = ET.fromstring(domain_xml(machine, "qemu", sources, pins=[1, 0]))
    assert dom.get("type") == "qemu"
    assert dom.findtext("memory") == "384" and dom.find("memory").get("unit") == "MiB"
    assert dom.findtext("vcpu") == "2"
    assert [p.get("cpuset") for p in dom.iterfind("cputune/vcpupin")] == ["1", "0"]
    assert dom.find("os/type").get("machine") == "q35"
    assert dom.findtext("os/kernel") == "/k/vmlinux"
    cmdline = dom.findtext("os/cmdline").split()
    assert "hvbench.ip=198.18.0.10/24" in cmdline
    assert "hvbench.modules=virtio_pci,virtio_console,e1000,virtio_blk,ahci,sd_mod" in cmdline
    assert dom.find("features/acpi") is not None
    assert dom.find("cpu").get("mode") == "maximum"
    channel = dom.find("devices/channel")
    assert channel.find("source").attrib == {"mode": "bind"}  # libvirt's own, for its agent API
    assert channel.find("target").get("name") == AGENT_PORT
    assert channel.find("address").get("port") == "1" and "hvbench.agent_port=1" in cmdline
    assert dom.find("devices/serial").get("type") == "pty"
    root, disk = dom.iterfind("devices/disk")
    assert root.get("type") == "file" and root.find("target").attrib == {
        "dev": "vda",
        "bus": "virtio",
    }
    assert disk.get("type") == "volume"
    assert disk.find("source").attrib == {"pool": "p", "volume": "v"}
    assert disk.find("driver").attrib == {
        "name": "qemu",
        "type": "qcow2",
        "cache": "writeback",
        "io": "threads",
    }
    assert disk.find("target").attrib == {"dev": "sda", "bus": "sata"}
    assert disk.findtext("serial") == "ser,ial"  # a value, not an option list
    assert dom.find("devices/controller").get("type") == "sata"
    nic = dom.find("devices/interface")
    assert nic.get("type") == "ethernet" and nic.find("target").get("dev") == "hvl1t0"
    assert nic.find("model").get("type") == "e1000"
    assert dom.find("seclabel").get("relabel") == "no"


def test_kvm_users_settings_map_to_the_domain():
    """vhost-net, queues, huge pages and a named CPU model, as libvirt spells them."""
    machine = replace(
        _machine(),
        cpu="EPYC",
        hugepages="2M",
        nics=[Nic("virtio-net", "hvl1t0", "52:54:00:14:00:00", vhost=True, queues=2)],
        disks=[Disk("data", "", "virtio-blk", queues=4)],
    )
    dom = ET.fromstring(domain_xml(machine, "kvm", {"data": Source("file", {"file": "/d"})}))
    assert dom.get("type") == "kvm"
    assert dom.find("memoryBacking/hugepages/page").attrib == {"size": "2048", "unit": "KiB"}
    assert dom.find("memoryBacking/source").get("type") == "memfd"
    assert dom.find("cpu").get("mode") == "custom" and dom.findtext("cpu/model") == "EPYC"
    assert dom.find("devices/interface/driver").attrib == {"name": "vhost", "queues": "2"}
    assert dom.find("devices/disk/driver").get("queues") == "4"
    plain = replace(machine, hugepages=None, nics=[Nic("virtio-net", "t", "52:54:00:14:00:01")])
    dom = ET.fromstring(domain_xml(plain, "qemu", {"data": Source("file", {"file": "/d"})}))
    assert dom.find("memoryBacking") is None
    assert dom.find("devices/interface/driver").attrib == {"name": "qemu"}  # no vhost-net


def test_a_platforms_nic_and_disk_settings_reach_the_domain():
    """The devices libvirt's guests get are the qemu driver's (``nic_device``, ``data_device``):
    vhost-net and queues were once dropped on the way, and a study's setting silently ignored."""
    settings = LibvirtSettings(
        driver="libvirt", nic="virtio-net", queues=2, disk={"bus": "virtio-blk", "queues": 4}
    )
    machine = replace(
        _machine(),
        nics=[nic_device(settings, "hvl1t0", "52:54:00:14:00:00")],
        disks=[data_device(settings, "")],
    )
    dom = ET.fromstring(domain_xml(machine, "kvm", {"data": Source("file", {"file": "/d"})}))
    assert dom.find("devices/interface/driver").attrib == {"name": "qemu", "queues": "2"}
    assert dom.find("devices/disk/driver").get("queues") == "4"
    assert dom.find("devices/disk/serial").text == DATA_SERIAL


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"uri": "lxc:///system"}, "only QEMU .* and Xen"),
        ({"uri": "qemu+ssh://h/system", "nic": "none", "hugepages": "2M"}, "this host only"),
        ({"uri": "qemu+ssh://elsewhere/system"}, "set nic: none"),
        ({"uri": "qemu+ssh://elsewhere/system", "nic": "none", "disk": {"path": "/d"}}, "volume"),
        ({"machine": "microvm"}, "microvm"),
        ({"disk": {"bus": "nvme"}}, "nvme"),
        ({"machine": "q35", "disk": {"bus": "ide"}}, "use ahci"),
        ({"vcpus": 0}, "greater than 0"),
        ({"binary": "qemu-system-x86_64"}, "use driver: qemu to choose one"),
    ],
)
def test_settings_rejected(fields, complaint):
    assert DRIVERS["libvirt"] is LibvirtDriver
    with pytest.raises(ValidationError, match=complaint):
        LibvirtSettings(driver="libvirt", **fields)


def test_doctor_names_the_fix_without_a_daemon(monkeypatch, tmp_path):
    monkeypatch.setenv("LIBVIRT_DEFAULT_URI", f"qemu:///system?socket={tmp_path}/none")
    found = LibvirtDriver.check()
    assert not found.ok and "cannot connect" in found.detail and "libvirtd" in found.fix


def test_doctor_sees_a_running_daemon(monkeypatch, libvirt_uri):
    monkeypatch.setenv("LIBVIRT_DEFAULT_URI", libvirt_uri)
    found = LibvirtDriver.check()
    assert found.ok and found.detail.startswith("libvirt 9.") and "QEMU" in found.detail


STUDY = """\
name: libvirt-test
platforms:
  lv: {{driver: libvirt, uri: "{uri}", memory: 256M, disk: {{size: 256M}}}}
workloads:
  - {{name: cpu, suite: micro, integer: {{duration: 1}}, float: {{duration: 1}},
     memory: {{duration: 1}}, branchy: {{duration: 1}}}}
  - {{name: disk, tool: dd, size: 16M}}
  - {{name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 2}}
instances: [1]
repetitions: 1
"""


def _run(study: str) -> tuple[Store, RunSession, set[str]]:
    """Run a study to its end with every sample ok; the metric names it stored."""
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(study, "t"), quick=True))
    assert session.run().status == "finished", [s.error for s in store.samples(session.run_id)]
    names = {r.name for r in store.metric_rows(session.run_id)}
    assert "cpu.branchy.primes_events_per_s" in names
    assert any(n.startswith("disk.dd.") for n in names)
    assert leftovers(session.run_id) == []
    return store, session, names


def _domains(uri: str) -> list[str]:
    conn = libvirt.open(uri)
    try:
        return [d.name() for d in conn.listAllDomains()]
    finally:
        conn.close()


@pytest.mark.guest
def test_cpu_disk_and_net_run_in_a_libvirt_domain_and_nothing_is_left(libvirt_uri):
    _, _, names = _run(STUDY.format(uri=libvirt_uri))
    assert {"net.iperf3.inbound_gbps", "net.iperf3.outbound_gbps"} <= names
    assert _domains(libvirt_uri) == []
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "hvl" not in root_links  # the taps lived in the run's namespace, now gone


REMOTE_STUDY = """\
name: libvirt-remote
platforms:
  far: {{driver: libvirt, uri: "{uri}", pool: hvbench-remote, accel: tcg, nic: none,
        memory: 256M, disk: {{size: 256M, format: qcow2}}}}
workloads:
  - {{name: boot}}
  - {{name: cpu, suite: micro, integer: {{duration: 1}}, float: {{duration: 1}},
     memory: {{duration: 1}}, branchy: {{duration: 1}}}}
  - {{name: disk, tool: dd, size: 16M}}
instances: [1]
repetitions: 1
"""


def _volumes(uri: str) -> list[str]:
    conn = libvirt.open(uri)
    try:
        return conn.storagePoolLookupByName(REMOTE_POOL).listVolumes()
    finally:
        conn.close()


@pytest.mark.guest
def test_cpu_and_disk_run_on_a_remote_host_over_ssh_and_nothing_is_left(ssh_uri):
    """A remote URI: the image goes up as volumes, the data disk is a volume, the agent and the
    console come through the connection; afterwards the pool is empty again."""
    store, session, names = _run(REMOTE_STUDY.format(uri=ssh_uri))
    # the console was read from the first line: the kernel's own timestamps date its start
    assert {"boot.kernel_s", "boot.init_s", "boot.ready_s"} <= names
    resolved = store.cells(session.run_id)[-1].platform_settings["resolved"]
    assert resolved["uri"] == ssh_uri and resolved["host"] and resolved["host_cores"] >= 1
    # host CPU is that host's, as libvirt reads it there, and the domain's own CPU time
    cpu = store.samples(session.run_id)[-1].host_cpu
    assert cpu.host == resolved["host"] and cpu.busy_s > 0 and cpu.instances_s[0] > 0
    disk = [s.platform_state for s in store.samples(session.run_id)]
    assert {s.host_cores for s in disk} == {resolved["host_cores"]}  # that host's cores
    assert "volume hvb-" in str(disk) and "in pool hvbench-remote of 127.0.0.1" in str(disk)
    assert _volumes(ssh_uri) == [] and _domains(ssh_uri) == []


@pytest.mark.guest
def test_a_domain_is_saved_and_restored_with_what_it_held(libvirt_uri, guest_run: GuestRun):
    """The snapshot workload on libvirt (virDomainSave, virDomainRestoreFlags): a new QEMU runs
    the same domain with what its memory held, its tap back on the run's bridge, and the save
    file gone."""
    settings = LibvirtSettings(driver="libvirt", uri=libvirt_uri, memory="192M")
    run = guest_run
    driver = LibvirtDriver("s", settings, Needs(tools=guest_fixtures.GUEST_TOOLS), run.ledger,
                           run.network, run.workdir)  # fmt: skip
    (inst,) = driver.start(1, time.monotonic() + 240).instances
    try:
        assert inst.exec(["sh", "-c", "echo kept > /tmp/probe"], timeout=30).ok
        first = inst.qemu_pid
        (restored,) = run_workload(Snapshot(SnapshotSettings(name="snapshot")), [inst],
                                   run.network)  # fmt: skip
        s = {m.name: m.value for m in restored.metrics}
        assert inst.qemu_pid not in (None, first) and not psutil.pid_exists(first)
        assert 10 < s["snapshot.size_mib"] < 192 and s["snapshot.save_s"] > 0
        assert s["snapshot.restore_s"] > 0
        assert not list(run.workdir.glob("*.save*")), "the save file goes once restored"
        assert inst.exec(["cat", "/tmp/probe"], timeout=30).text() == "kept\n"
        assert inst.exec(["ping", "-c", "1", "-W", "5", PEER_ADDRESS], timeout=30).ok
        assert [r.kind for r in run.ledger.live if r.kind in ("domain", "link")] == [
            "domain",
            "link",
        ]
    finally:
        driver.stop([inst])
    assert _domains(libvirt_uri) == []


@pytest.mark.guest
@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_killed_runs_domain_is_destroyed_by_its_ledger(where, request, guest_run: GuestRun):
    """What ``hvbench cleanup`` does after a SIGKILL: the ledger, read back from its journal,
    destroys the domain (its tap goes with the run's namespace) and, on a remote host, deletes
    the volumes of the image and the data disk."""
    if where == "local":
        uri = request.getfixturevalue("libvirt_uri")
        settings = LibvirtSettings(driver="libvirt", uri=uri, memory="192M")
        needs = Needs(tools=guest_fixtures.GUEST_TOOLS)
    else:
        uri = request.getfixturevalue("ssh_uri")
        settings = LibvirtSettings(
            driver="libvirt", uri=uri, memory="192M", nic="none", pool=REMOTE_POOL, accel="tcg"
        )
        needs = Needs(tools=guest_fixtures.GUEST_TOOLS, data_disk=True)
    run = guest_run
    driver = LibvirtDriver("k", settings, needs, run.ledger, run.network, run.workdir)
    (inst,) = driver.start(1, time.monotonic() + 240).instances
    name = inst.domain.name()
    assert inst.exec(["true"], timeout=30).ok
    assert bool(inst.host_pids()) == (where == "local")  # a remote host's QEMU is not ours
    if where == "remote":
        assert len(_volumes(uri)) == 3  # kernel, initramfs, data disk
    journal = Ledger(run.ledger.run_id)  # a fresh reader of the journal, as cleanup is
    for res in reversed(journal.live):
        journal.release(res)
    assert name not in _domains(uri)
    if where == "remote":
        assert _volumes(uri) == []
    assert not inst.alive()
    driver.stop([inst])


CONSOLIDATION = """\
name: consolidation-libvirt
platforms:
  libvirt: {{driver: libvirt, uri: "{uri}", accel: tcg, memory: 512M}}
workloads:
  - {{name: consolidation, sets: 1, mix: {{web: 1, imap: 1, app: 1, db: 1, idle: 1, nfs: 1}}}}
repetitions: 1
"""


@pytest.mark.guest
@pytest.mark.alone
def test_one_set_of_real_servers_in_domains_booted_from_their_overlays(libvirt_uri):
    """``Needs.userland`` (the consolidation's servers): six domains boot the Debian root
    filesystem from copy-on-write overlays of the cached image (its first disk), and one set
    runs in --quick across the run's bridge: every role's requests counted, an SLO verdict
    each, the NFS server serving web; nothing of the run is left, the cached image untouched."""
    images = sorted(cache_root().glob("rootfs-*/root.ext4"))
    before = {p: p.stat().st_mtime_ns for p in images}
    store, session, _ = quick_run(CONSOLIDATION.format(uri=libvirt_uri), "libvirt", cells=1)
    got = {(r.instance, r.name): r.value for r in store.metric_rows(session.run_id)}
    every_role_served(got, "libvirt")
    assert got[(5, "consolidation.nfs.ops")] > got[(5, "consolidation.nfs.calls")] >= 7
    [cell] = store.cells(session.run_id)
    described = cell.platform_settings["rootfs"]
    assert "nginx" in described["packages"]
    rootfs = cache_root() / f"rootfs-{described['key']}/root.ext4"
    assert before.get(rootfs, rootfs.stat().st_mtime_ns) == rootfs.stat().st_mtime_ns
    assert _domains(libvirt_uri) == []
    assert leftovers(session.run_id) == []


def test_a_volume_is_sparse_and_of_the_disk_format():
    vol = ET.fromstring(volume_xml("hvb-x-data", 256 << 20, "qcow2"))
    assert vol.findtext("name") == "hvb-x-data"
    assert vol.findtext("capacity") == str(256 << 20) and vol.findtext("allocation") == "0"
    assert vol.find("target/format").get("type") == "qcow2"
