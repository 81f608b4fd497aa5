"""libvirt: domain XML from the qemu driver's typed model, settings, doctor, and a real guest run
through a real libvirtd started by the suite, with nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import guest_fixtures
import libvirt
import pytest
from conftest import require
from guest_fixtures import GuestRun
from pydantic import ValidationError
from test_runner import leftovers

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.libvirt import LibvirtDriver, LibvirtSettings, domain_xml
from hvbench.drivers.qemu_devices import AGENT_PORT, Boot, Disk, Machine, Nic
from hvbench.host.resources import Ledger
from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study

guest_image = guest_fixtures.guest_image  # fixtures, until conftest imports guest_fixtures
guest_run = guest_fixtures.guest_run

DAEMONS = r"""
set -e
# state, logs, caches, configuration and pid files of this libvirtd are its own (tmpfs in a
# private mount namespace); only its sockets, in $1, are visible outside
for d in /run /var/lib/libvirt /var/log/libvirt /var/cache/libvirt /etc/libvirt; do
    mkdir -p "$d"
    mount -t tmpfs hvbench-libvirt "$d"
done
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
        deadline = time.monotonic() + 60
        while True:
            assert daemons.poll() is None, (sockets / "daemons.log").read_text()[-2000:]
            try:
                libvirt.open(uri).close()
                break
            except libvirt.libvirtError:
                assert time.monotonic() < deadline, "libvirtd did not come up"
                time.sleep(0.2)
        yield uri
    finally:
        os.killpg(daemons.pid, signal.SIGTERM)
        try:
            daemons.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(daemons.pid, signal.SIGKILL)
            daemons.wait()


def _machine() -> Machine:
    return Machine(
        type="q35",
        accel="tcg",
        cpu="max",
        vcpus=2,
        memory_mib=384,
        boot=Boot("/k/vmlinux", "/k/initrd.cpio", "console=ttyS0 hvbench.ip=198.18.0.10/24"),
        agent_socket="/w/a.sock",
        qmp_socket="",
        name="hvb-x-p-0",
        nics=[Nic("e1000", "hvl1t0", "52:54:00:14:00:00")],
        disks=[Disk("data", "/w/d.qcow2", "ahci", "qcow2", "writeback", "threads", "ser,ial")],
    )


def test_domain_xml_is_the_typed_machine():
    dom = ET.fromstring(domain_xml(_machine(), "qemu", "/w/c.sock", pins=[1, 0]))
    assert dom.get("type") == "qemu"
    assert dom.findtext("memory") == "384" and dom.find("memory").get("unit") == "MiB"
    assert dom.findtext("vcpu") == "2"
    assert [p.get("cpuset") for p in dom.iterfind("cputune/vcpupin")] == ["1", "0"]
    assert dom.find("os/type").get("machine") == "q35"
    assert dom.findtext("os/kernel") == "/k/vmlinux"
    cmdline = dom.findtext("os/cmdline").split()
    assert "hvbench.ip=198.18.0.10/24" in cmdline
    assert "hvbench.modules=virtio_pci,virtio_console,e1000,ahci,sd_mod" in cmdline
    assert dom.find("features/acpi") is not None
    assert dom.find("cpu").get("mode") == "maximum"
    channel = dom.find("devices/channel")
    assert channel.find("source").get("path") == "/w/a.sock"
    assert channel.find("target").get("name") == AGENT_PORT
    disk = dom.find("devices/disk")
    assert disk.find("driver").attrib == {
        "name": "qemu",
        "type": "qcow2",
        "cache": "writeback",
        "io": "threads",
    }
    assert disk.find("target").get("bus") == "sata"
    assert disk.findtext("serial") == "ser,ial"  # a value, not an option list
    assert dom.find("devices/controller").get("type") == "sata"
    nic = dom.find("devices/interface")
    assert nic.get("type") == "ethernet" and nic.find("target").get("dev") == "hvl1t0"
    assert nic.find("model").get("type") == "e1000"
    assert dom.find("seclabel").get("relabel") == "no"


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"uri": "xen:///system"}, "only QEMU connections"),
        ({"uri": "qemu+ssh://elsewhere/system"}, "remote host"),
        ({"machine": "microvm"}, "microvm"),
        ({"disk": {"bus": "nvme"}}, "nvme"),
        ({"machine": "q35", "disk": {"bus": "ide"}}, "use ahci"),
        ({"vcpus": 0}, "greater than 0"),
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
  - {{name: cpu, integer: {{duration: 1}}, float: {{duration: 1}}, memory: {{duration: 1}},
     branchy: {{duration: 1}}}}
  - {{name: disk, tool: dd, size: 16M}}
  - {{name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 2}}
instances: [1]
repetitions: 1
"""


@pytest.mark.guest
def test_cpu_disk_and_net_run_in_a_libvirt_domain_and_nothing_is_left(libvirt_uri):
    store = Store()
    runner = Runner.create(parse_study(STUDY.format(uri=libvirt_uri), "t"), store, quick=True)
    assert runner.run() == "finished", [s.error for s in store.samples(runner.run_id)]
    names = {r[3] for r in store.metric_rows(runner.run_id)}
    assert "cpu.branchy.primes_events_per_s" in names
    assert any(n.startswith("disk.dd.") for n in names)
    assert {"net.iperf3.inbound_gbps", "net.iperf3.outbound_gbps"} <= names
    assert leftovers(runner.run_id) == []
    conn = libvirt.open(libvirt_uri)
    try:
        assert conn.listAllDomains() == []
    finally:
        conn.close()
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "hvl" not in root_links  # the taps lived in the run's namespace, now gone


@pytest.mark.guest
def test_a_killed_runs_domain_is_destroyed_by_its_ledger(libvirt_uri, guest_run: GuestRun):
    """What ``hvbench cleanup`` does after a SIGKILL: the ledger, read back from its journal,
    destroys the domain (and its tap goes with the run's namespace)."""
    settings = LibvirtSettings(driver="libvirt", uri=libvirt_uri, memory="192M")
    needs = Needs(tools=guest_fixtures.GUEST_TOOLS)
    run = guest_run
    driver = LibvirtDriver("k", settings, needs, run.ledger, run.network, run.workdir)
    (inst,) = driver.start(1, time.monotonic() + 240)
    name = inst.domain.name()
    assert inst.host_pids() and inst.exec(["true"], timeout=30).ok
    journal = Ledger(run.ledger.run_id)  # a fresh reader of the journal, as cleanup is
    for res in reversed(journal.live):
        journal.release(res)
    conn = libvirt.open(libvirt_uri)
    try:
        assert name not in [d.name() for d in conn.listAllDomains()]
    finally:
        conn.close()
    assert not inst.alive()
    driver.stop([inst])
