"""The QEMU driver: settings, command line, and real guests under TCG (no mocks of QEMU)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from guest_fixtures import GUEST_TOOLS, GuestRun
from polling import wait_for
from pydantic import ValidationError
from qemu.qmp.legacy import QEMUMonitorProtocol

from hvbench import plan
from hvbench.drivers import DRIVERS, qemu_machine
from hvbench.drivers.base import Needs
from hvbench.drivers.disks import find_disk, guest_disks
from hvbench.drivers.last_words import last_words
from hvbench.drivers.qemu import QemuDriver, QemuInstance
from hvbench.drivers.qemu_devices import AGENT_PORT, AGENT_PORT_NR, QEMU, Disk, opts
from hvbench.drivers.qemu_machine import QemuSettings
from hvbench.drivers.qemu_process import Guest, kvm_verdict
from hvbench.errors import CommandTimeout, InstanceError, StudyError
from hvbench.host import hugepages
from hvbench.host.inventory import PVM_ONLY, kvm_is_pvm_only
from hvbench.host.kvm import AccelVerdict
from hvbench.host.process import executable
from hvbench.host.storage import make_image
from hvbench.study import parse_study

CACHES = ("none", "writeback", "writethrough", "directsync", "unsafe")
FORMATS = ("raw", "qcow2")
NIC_DRIVERS = {"virtio-net": {"virtio_net"}, "e1000": {"e1000"}, "rtl8139": {"8139cp", "8139too"}}
"""The guest driver that must be bound to eth0 for each NIC model."""
WRITE_READ = (
    'for dev in "$@"; do dd if=/tmp/pattern of="$dev" bs=65536 conv=fsync 2>/dev/null'
    ' && blockdev --flushbufs "$dev" && dd if="$dev" bs=65536 count=1 2>/dev/null | sha256sum;'
    " done"
)
"""Guest side of the disk check: write the pattern, drop the guest's buffers, read it back."""


HUGE_STUDY = """\
name: v
platforms:
  v: {driver: qemu, hugepages: 1G, memory: 16G, instances: [2]}
workloads: [{name: cpu}]
"""
VERSIONS_STUDY = """\
name: versions
platforms:
  qemu72: {driver: qemu, accel: tcg}
  qemu10: {driver: qemu, accel: tcg, binary: qemu-system-x86_64-backports}
workloads: [{name: boot}]
"""
HOLD_PAGES = """\
import time
from hvbench.host import hugepages
from hvbench.host.resources import Ledger
ledger = Ledger("20261122-hugepages")
ledger.claim()
hugepages.reserve(ledger, "2M", 3, "test")
print("reserved", flush=True)
time.sleep(60)
"""


def settings(**kw) -> QemuSettings:
    return QemuSettings(**{"driver": "qemu", "memory": "256M", **kw})


def driver(run: GuestRun, needs: Needs | None = None, **kw) -> QemuDriver:
    needs = needs or Needs(tools=GUEST_TOOLS)
    return QemuDriver("q", settings(**kw), needs, run.ledger, run.network, run.workdir)


def deadline(seconds: float = 240) -> float:
    return time.monotonic() + seconds


# settings and command line (no guest) ------------------------------------------------------


def test_registered():
    assert DRIVERS["qemu"] is QemuDriver


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"disk": {"aio": "native", "cache": "writeback"}}, "aio: native needs cache"),
        ({"disk": {"backing": "block"}}, "needs a path"),
        ({"disk": {"backing": "block", "path": "/dev/x", "format": "qcow2"}}, "format: raw"),
        ({"machine": "microvm", "nic": "e1000"}, "no PCI bus"),
        ({"machine": "microvm", "disk": {"bus": "ide"}}, "no PCI bus"),
        ({"kernel": "cloud-amd64", "nic": "rtl8139"}, "no rtl8139 driver"),
        ({"accel": "xen"}, "accel"),
        ({"disk": {"bus": "floppy"}}, "bus"),
        ({"memory": "64M"}, "at least 128M"),
        ({"nic": "virtio-net", "bogus": 1}, "bogus"),
        ({"nic": "e1000", "vhost": True}, "virtio-net's"),
        ({"nic": "e1000", "queues": 2}, "virtio-net's"),
        ({"disk": {"bus": "nvme", "queues": 2}}, "only virtio-blk"),
        ({"hugepages": "2M", "memory": "255M"}, "multiple of the 2M"),
        ({"hugepages": "4M"}, "hugepages"),
        ({"accel": "tcg", "cpu": "host"}, "cpu: host needs KVM"),
        ({"binary": "/no/such/qemu"}, "an installed QEMU: a path, or a program"),
    ],
)
def test_settings_rejected(fields, complaint):
    with pytest.raises(ValidationError, match=complaint):
        settings(**fields)


def test_missing_backports_qemu_is_refused_in_one_line_naming_the_fix(monkeypatch):
    """A study naming QEMU 10.0 where it is not installed fails to load (study check, run)."""
    monkeypatch.setattr(qemu_machine, "executable", lambda name: None)
    with pytest.raises(StudyError) as refused:
        parse_study(VERSIONS_STUDY, "versions.yaml")
    assert str(refused.value) == (
        "versions.yaml:4: platforms.qemu10.binary: expected an installed QEMU "
        "(./setup.sh --with-qemu-backports installs this one), found 'qemu-system-x86_64-backports'"
    )


def test_host_refusals_are_one_line_each_before_anything_starts():
    """What this host cannot give is named before a run starts: vhost-net without its device,
    more huge pages than the host has memory, a CPU model QEMU does not know."""
    big = settings(hugepages="1G", memory="8G", vhost=True, cpu="EPYC-NoSuchModel")
    lines = big.host_misfits(count=4)  # 32 GiB of 1G pages: more than this host's memory
    vhost = [ln for ln in lines if ln.startswith("vhost")]
    assert vhost == ([] if os.path.exists("/dev/vhost-net") else [
        "vhost: on needs /dev/vhost-net, which this host lacks (modprobe vhost_net, or set "
        "vhost: off)"
    ])  # fmt: skip
    assert any(ln.startswith("hugepages: 1G: 32 pages need 32768 MiB") for ln in lines), lines
    assert "cpu: EPYC-NoSuchModel is no CPU model of this QEMU" in " ".join(lines)
    assert settings(cpu="EPYC,+svm", hugepages="2M").host_misfits(1) == []
    study = parse_study(HUGE_STUDY, "vhost.yaml")
    misfits = plan.misfits(study, plan.this_host())
    assert any(m.startswith("platform v: ") and "hugepages: 1G" in m for m in misfits), misfits


def test_cleanup_gives_back_a_killed_runs_huge_pages(tmp_path):
    """Pages a run added to the host's pool are in its ledger first: after the run is
    SIGKILLed, ``hvbench cleanup`` shrinks the pool back."""
    pool = hugepages.pool("2M")
    before = int(pool.read_text())
    env = {**os.environ, "HVBENCH_STATE_DIR": str(tmp_path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_PAGES], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "reserved"
        assert int(pool.read_text()) == before + 3
    finally:
        holder.kill()
        holder.wait()
    cleanup = subprocess.run(
        [sys.executable, "-m", "hvbench", "cleanup", "--json"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cleanup.returncode == 0, cleanup.stderr
    assert "20261122-hugepages" in [r["run"] for r in json.loads(cleanup.stdout)]
    assert int(pool.read_text()) == before


def test_options_are_escaped_not_pasted():
    assert (
        opts("file", path="/a,b", server=True, wait=False) == "file,path=/a,,b,server=on,wait=off"
    )
    disk = Disk("d0", "/img,format=qcow2", bus="nvme", cache="unsafe", serial="s")
    argv = disk.args("pc")
    assert argv[1] == "if=none,id=d0,file=/img,,format=qcow2,format=raw,cache=unsafe,aio=threads"
    assert argv[-1] == "nvme,drive=d0,serial=s"


def test_kvm_is_pvm_only_where_no_hardware_module_is_loaded(tmp_path: Path):
    """kvm_pvm beside kvm_intel (a bare-metal host with both) leaves the probe to decide."""
    (tmp_path / "module/kvm_pvm").mkdir(parents=True)
    assert kvm_is_pvm_only(tmp_path)
    (tmp_path / "module/kvm_intel").mkdir()
    assert not kvm_is_pvm_only(tmp_path)
    assert not kvm_is_pvm_only(tmp_path / "nothing")


def test_accel_auto_verdict_on_this_host(tmp_path: Path):
    """Here /dev/kvm is PVM and cannot run a stock guest: the verdict must say TCG and why,
    without a probe guest's 25 s (a first run on a fresh host waited for it)."""
    binary = executable(QEMU)
    assert binary is not None
    verdict = kvm_verdict(binary)
    assert verdict is not None
    assert verdict.reason
    if kvm_is_pvm_only():
        assert verdict.accel == "tcg"
        assert "kvm_pvm" in verdict.reason
        made = kvm_verdict(binary, cache=tmp_path)
        assert made == AccelVerdict("tcg", "/dev/kvm " + PVM_ONLY)
        assert [p.suffix for p in tmp_path.iterdir()] == [".json"]  # no probe guest's image
    assert QemuDriver.check().detail.startswith(f"accel auto -> {verdict.accel}")


# real guests ------------------------------------------------------------------------------


@pytest.mark.guest
@pytest.mark.parametrize("nic", ["virtio-net", "e1000", "rtl8139"])
def test_nic_passes_traffic(guest_run: GuestRun, nic: str):
    """An iperf3 client in the guest sends to the peer through the NIC model under test."""
    d = driver(guest_run, nic=nic)
    server = guest_run.network.peer_start(
        ["iperf3", "-s", "-1", "-B", "198.18.0.1"], guest_run.workdir / "iperf3.log"
    )
    try:
        [inst] = d.start(1, deadline()).instances
        assert inst.boot.kernel < inst.boot.init < inst.boot.ready
        out = inst.exec(["iperf3", "-c", "198.18.0.1", "-t", "1", "-J"], timeout=60)
        assert out.ok, out.describe_failure()
        received = json.loads(out.stdout)["end"]["sum_received"]["bytes"]
        assert received > 100_000
        link = inst.exec(["readlink", "/sys/class/net/eth0/device/driver"], 30).text()
        assert link.strip().rsplit("/", 1)[-1] in NIC_DRIVERS[nic]
        d.stop([inst])
    finally:
        server.kill()
        server.wait()


@pytest.mark.guest
def test_no_nic_means_no_address(guest_run: GuestRun):
    """Also: the port the guest took by its number, before its name came, is the agent's."""
    d = driver(guest_run, nic="none")
    [inst] = d.start(1, deadline()).instances
    assert inst.address is None
    links = inst.exec(["ip", "-o", "link"], 30).text()
    assert "eth0" not in links
    conf = inst.exec(["cat", "/etc/qemu/qemu-ga.conf"], 30).text()
    port = next(ln.removeprefix("path=") for ln in conf.splitlines() if ln.startswith("path="))
    assert "method=virtio-serial" in conf and port.endswith(f"p{AGENT_PORT_NR}"), conf
    name = inst.exec(["cat", f"/sys/class/virtio-ports/{port.removeprefix('/dev/')}/name"], 30)
    assert name.text().strip() == AGENT_PORT
    d.stop([inst])


def _disk_matrix(bus: str) -> list[tuple[str, str, str]]:
    return [(bus, fmt, cache) for fmt in FORMATS for cache in CACHES]


def _attach_and_check(run: GuestRun, combos: list[tuple[str, str, str]], extra: list[Disk] = ()):
    """One guest with one small data disk per combination; each gets a write and a read in the
    guest, and the write is then found in the image on the host after QEMU quits."""
    d = driver(run, nic="none")
    builder = d.open()
    prefix = run.workdir / f"disks-{combos[0][0]}"
    machine = builder.machine(0, prefix, None)
    disks = list(extra)
    for i, (bus, fmt, cache) in enumerate(combos):
        path = run.workdir / f"{bus}-{fmt}-{cache}.{fmt}"
        run.ledger.add("path", str(path))
        make_image(path, fmt, 16 << 20)
        serial = f"{fmt[:2]}-{cache}"
        disks.append(Disk(f"d{i}", str(path), bus, fmt, cache, "threads", serial, slot=i))
    machine.disks.extend(disks)
    for sock in (machine.agent_socket, machine.qmp_socket):
        run.ledger.add("path", sock)
    guest = Guest.launch(machine, prefix, run.ledger, netns=None)
    inst = QemuInstance("q", 0, 1, 256, guest=guest)
    pattern = os.urandom(65536)
    try:
        guest.wait_ready(deadline())
        find_disk(inst, disks[-1].serial)  # the last one probed; then all are there
        found = guest_disks(inst)
        devices = [found[disk.serial] for disk in disks]
        assert inst.exec(["dd", "of=/tmp/pattern"], 30, stdin=pattern).ok
        check = inst.exec(["sh", "-c", WRITE_READ, "sh", *devices], 120)
        assert check.ok, check.describe_failure()
        want = hashlib.sha256(pattern).hexdigest()
        read = [line.split()[0] for line in check.text().splitlines()]
        assert read == [want] * len(disks), list(zip(disks, read, strict=False))
    finally:
        guest.kill()
    for disk in disks:
        data = _read_device(disk.path) if disk.path.startswith("/dev/") else _host_bytes(disk)
        assert data == pattern, f"{disk}: the write did not reach the backing"


def _read_device(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(65536)


def _host_bytes(disk: Disk) -> bytes:
    path = Path(disk.path)
    if disk.format == "raw":
        with path.open("rb") as f:
            return f.read(65536)
    raw = path.with_suffix(".check.raw")
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(path), str(raw)], check=True)
    try:
        with raw.open("rb") as f:
            return f.read(65536)
    finally:
        raw.unlink()


@pytest.mark.guest
@pytest.mark.parametrize("bus", ["virtio-blk", "virtio-scsi", "ahci", "nvme"])
def test_disk_bus_format_cache(guest_run: GuestRun, bus: str):
    """Every format x cache combination on this bus accepts a write and a read (one guest, ten
    disks)."""
    extra: list[Disk] = []
    if bus == "virtio-blk":
        # the AIO engines and a block-device backing, on a loop device
        for aio in ("native", "io_uring"):
            path = guest_run.workdir / f"aio-{aio}.raw"
            guest_run.ledger.add("path", str(path))
            make_image(path, "raw", 16 << 20)
            extra.append(Disk(f"a{aio[:2]}", str(path), bus, "raw", "none", aio, f"aio-{aio}"))
        extra.append(_loop_disk(guest_run))
    _attach_and_check(guest_run, _disk_matrix(bus), extra)


@pytest.mark.guest
@pytest.mark.parametrize("part", [0, 1, 2])
def test_disk_ide_format_cache(guest_run: GuestRun, part: int):
    """IDE on pc takes four disks per guest: the ten combinations over three guests."""
    combos = _disk_matrix("ide")
    _attach_and_check(guest_run, combos[part * 4 : part * 4 + 4])


def _loop_disk(run: GuestRun) -> Disk:
    backing = run.workdir / "loop-backing.img"
    run.ledger.add("path", str(backing))
    make_image(backing, "raw", 16 << 20)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    run.ledger.add("loop", device)
    return Disk("lp", device, "virtio-blk", "raw", "none", "native", "block-loop")


@pytest.mark.guest
def test_driver_data_disk_on_block_device(guest_run: GuestRun):
    """``backing: block`` formats and mounts the named device through the driver's own path."""
    loop = _loop_disk(guest_run)
    needs = Needs(tools=GUEST_TOOLS, data_disk=True)
    d = driver(
        guest_run, needs, nic="none", disk={"backing": "block", "path": loop.path, "bus": "ahci"}
    )
    [inst] = d.start(1, deadline()).instances
    assert inst.data_disk is not None
    assert loop.path in inst.data_disk.description
    df = inst.exec(["df", inst.data_disk.mountpoint], 30)
    assert df.ok and inst.data_disk.device in df.text()
    d.stop([inst])


@pytest.mark.guest
def test_four_instances_pass_the_barrier_together(guest_run: GuestRun):
    d = driver(guest_run, nic="virtio-net")
    instances = d.start(4, deadline(400)).instances
    try:
        assert [i.address for i in instances] == [f"198.18.0.{10 + i}" for i in range(4)]
        barrier = threading.Barrier(4, timeout=60)
        released: list[float] = []
        results = []

        def one(inst):
            barrier.wait()
            released.append(time.monotonic())
            results.append(inst.exec(["ping", "-c", "1", "198.18.0.1"], 60))

        threads = [threading.Thread(target=one, args=(i,)) for i in instances]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(released) == 4 and max(released) - min(released) < 1.0
        assert all(r.ok for r in results), [r.describe_failure() for r in results]
        resolved = d.describe()["resolved"]
        assert resolved["accel"] in ("tcg", "kvm") and resolved["accel_reason"]
        ran = d.what_ran()  # what the analysis reads: the accelerator the probe chose, and why
        assert (ran.mode, ran.mode_reason) == (resolved["accel"], resolved["accel_reason"])
    finally:
        d.stop(instances)


@pytest.mark.guest
def test_pinning_records_vcpu_threads(guest_run: GuestRun):
    d = driver(guest_run, nic="none", vcpus=2, pin=True)
    [inst] = d.start(1, deadline()).instances
    try:
        pins = d.describe()["resolved"]["pinning"]["q-0"]
        assert pins == [0, 1 % (os.cpu_count() or 1)]
        threads = inst.guest.vcpu_threads()
        assert [next(iter(os.sched_getaffinity(t))) for t in threads] == pins
    finally:
        d.stop([inst])


@pytest.mark.guest
def test_killed_qemu_fails_the_command_cleanly(guest_run: GuestRun):
    d = driver(guest_run, nic="virtio-net")
    [inst] = d.start(1, deadline()).instances
    errors: list[BaseException] = []

    def workload():
        try:
            inst.exec(["sleep", "120"], timeout=300)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=workload)
    t.start()
    # the agent answers one request at a time: a ps goes between the sleep's status polls
    wait_for(lambda: "sleep 120" in inst.exec(["ps"], 30).text(), 60, "sleep 120 in the guest")
    os.kill(inst.guest.proc.pid, signal.SIGKILL)
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], InstanceError)
    # QEMU's last words: how it ended, and what it and the guest said last
    message = str(errors[0])
    assert "QEMU died during sleep (killed by SIGKILL; stderr: " in message, message
    assert "hvbench: agent" in message.split("console: ")[1], message
    assert not inst.alive()
    with pytest.raises(InstanceError, match=r"not running any more \(killed by SIGKILL"):
        inst.exec(["true"], 10)
    d.stop([inst])


@pytest.mark.guest
def test_multiqueue_hugepages_and_cpu_model_reach_the_guest(guest_run: GuestRun):
    """Two virtio-net queue pairs and two virtio-blk queues, enabled in the guest; guest memory
    on 2M pages the driver added to the host's pool and gave back; a named CPU model."""
    pool = hugepages.pool("2M")
    before = int(pool.read_text())
    needs = Needs(tools=GUEST_TOOLS, data_disk=True)
    d = driver(guest_run, needs, vcpus=2, queues=2, hugepages="2M", cpu="EPYC",
               disk={"queues": 2, "size": "64M"})  # fmt: skip
    [inst] = d.start(1, deadline()).instances
    try:
        assert int(pool.read_text()) == before + 128  # 256M in 2M pages
        argv = inst.guest.machine.argv()
        assert "memory-backend-memfd,id=ram,size=256M,hugetlb=on,hugetlbsize=2M" in argv
        assert any("mq=on,vectors=6" in a for a in argv)
        queues = inst.exec(["ls", "/sys/class/net/eth0/queues"], 30).text().split()
        assert sorted(queues) == ["rx-0", "rx-1", "tx-0", "tx-1"]
        device = inst.data_disk.device.removeprefix("/dev/")
        assert inst.exec(["ls", f"/sys/block/{device}/mq"], 30).text().split() == ["0", "1"]
        cpuinfo = inst.exec(["cat", "/proc/cpuinfo"], 30).text()
        assert "AMD EPYC" in cpuinfo
        ping = inst.exec(["ping", "-c", "1", "198.18.0.1"], 60)
        assert ping.ok, ping.describe_failure()
        resolved = d.describe()["resolved"]
        assert resolved["cpu"] == "EPYC" and resolved["net_queues"] == {"q-0": "2 of 2 active"}
        assert resolved["memory_backing"].startswith("hugetlbfs 2M pages")
        assert d.describe()["queues"] == 2 and d.describe()["disk"]["queues"] == 2
    finally:
        d.stop([inst])
    assert int(pool.read_text()) == before
    assert not [r for r in guest_run.ledger.live if r.kind == "hugepages"]


@pytest.mark.guest
def test_qemu_refusing_its_command_line_says_why(guest_run: GuestRun):
    """A setting QEMU itself refuses (more vCPUs than the machine takes): the error carries
    QEMU's exit status and its own message."""
    d = driver(guest_run, nic="none", vcpus=999)
    with pytest.raises(InstanceError) as failed:
        d.start(1, deadline())
    message = str(failed.value)
    assert "QEMU exited" in message and "exit status 1" in message, message
    assert "maximum" in message.lower() or "max cpus" in message.lower(), message


def test_last_words_name_the_signal_and_the_cause(tmp_path):
    """The cause line before a dump is kept with the last lines; signals are named."""
    log = tmp_path / "stderr"
    dump = "".join(f"RAX={i:016x}\n" for i in range(40))
    script = f"echo 'KVM internal error. Suberror: 1' >&2; printf '{dump}' >&2; kill -SEGV $$"
    with log.open("wb") as err:
        proc = subprocess.run(["sh", "-c", script], stderr=err, check=False)
    words = last_words(proc.returncode, stderr=log, console=tmp_path / "missing")
    assert words.startswith("killed by SIGSEGV; stderr: KVM internal error. Suberror: 1 | ... |")
    assert words.endswith(f"RAX={39:016x}; console: (no log)"), words
    assert last_words(3) == "exit status 3" and last_words(-999) == "killed by signal 999"


@pytest.mark.guest
def test_hung_guest_is_killed_at_the_command_timeout(guest_run: GuestRun):
    """A guest whose vCPUs stop (QMP ``stop``) never answers: its command times out and QEMU is
    killed, so the next cell starts a fresh guest."""
    d = driver(guest_run, nic="none")
    [inst] = d.start(1, deadline()).instances
    qmp = QEMUMonitorProtocol(inst.guest.machine.qmp_socket)
    qmp.connect()
    qmp.cmd("stop")
    qmp.close()
    start = time.monotonic()
    with pytest.raises(CommandTimeout, match="hangs"):
        inst.exec(["true"], timeout=3)
    assert time.monotonic() - start < 15
    assert not inst.alive()
    d.stop([inst])
