"""The qemu and libvirt drivers under KVM for real, in the nested KVM lab (lab.py).

This host's /dev/kvm is PVM and runs no stock guest (PLATFORMS.md), so KVM runs one level down:
an L1 under QEMU TCG with AMD's SVM and nested paging, kvm_amd loaded, hvbench running there as
checked out. The lab boots once per session and runs doctor and one ``--quick`` study in that
boot (the run stores its results only, ``--no-report``: the host analyses and reports them);
the tests read what it left in the exchange directory. Figures from it are functional
only (guest code runs at TCG speed): they carry ``nested`` in their provenance. Huge pages are
tested on the host (test_qemu.py), not here: in one of two lab boots L1's kernel hung
(khugepaged blocked) once the run gave its 2M pages back. Each platform runs what only it
tests here, as L1's every minute is TCG's: QEMU's pc its vhost-net queues and NVMe disk,
libvirt its domain, and the microVMs every workload (cpu on them only: the guest's code runs on
the same nested vCPU whichever QEMU machine holds it), Cloud Hypervisor its live migration too
(QEMU's is tested on the host, test_workload_lifecycle.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace
from datetime import UTC, datetime
from types import ModuleType

import bench_scripts
import lab as nested
import pytest
import yaml
from builders import RunBuilder
from consolidation_checks import every_role_served
from vmm_binaries import missing_reason, vmm_binary

from hvbench.store import PlatformState, SampleRecord, Store
from hvbench.study import parse_study

STUDY = """\
name: kvm-lab
description: the qemu, libvirt and microVM drivers under KVM, nested in a TCG guest with SVM
baseline: cloud-hypervisor
platforms:
  microvm-auto: {driver: qemu, accel: auto, machine: microvm, memory: 256M,
                 disk: {bus: virtio-blk, size: 256M, queues: 2}}
  libvirt-kvm: {driver: libvirt, accel: kvm, machine: q35, memory: 256M, vcpus: 2, nic: e1000,
                disk: {bus: virtio-blk, size: 256M}}
  firecracker: {driver: firecracker, binary: FIRECRACKER, memory: 256M,
                disk: {size: 256M, io_engine: Async}}
  cloud-hypervisor: {driver: cloud-hypervisor, binary: CLOUD_HYPERVISOR, memory: 256M, vcpus: 2,
                     disk: {size: 256M, num_queues: 2}, net: {num_queues: 4}}
  # pc-kvm last: in four boots of L1 (2026-11-25 to 28), L1 or a guest hung in or after the
  # cells of pc-kvm's guest, the one with vhost-net
  pc-kvm: {driver: qemu, accel: kvm, machine: pc, memory: 256M, vcpus: 2, nic: virtio-net,
           vhost: true, queues: 2, disk: {bus: nvme, size: 256M}}
workloads:
  - {name: boot, platforms: [microvm-auto, firecracker, cloud-hypervisor]}
  - {name: memory, platforms: [microvm-auto, firecracker, cloud-hypervisor]}
  - {name: cpu, suite: micro, integer: {duration: 2}, float: {duration: 2}, memory: {duration: 2},
     branchy: {duration: 2}, memory_block: 4M, platforms: [microvm-auto, firecracker,
     cloud-hypervisor]}
  - {name: disk, tool: dd, size: 32M}
  - {name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 2}
  - {name: snapshot, platforms: [microvm-auto, firecracker, cloud-hypervisor]}
  - {name: migration, dirty_rate: 4M, platforms: [cloud-hypervisor]}
instances: [1]
repetitions: 1
"""
ROOTFS_STUDY = """\
name: kvm-lab-rootfs
description: kernbench and one set of real servers in microVMs booted from the root filesystem
baseline: cloud-hypervisor
platforms:
  firecracker: {driver: firecracker, binary: FIRECRACKER, memory: 512M, boot_timeout: 1200}
  cloud-hypervisor: {driver: cloud-hypervisor, binary: CLOUD_HYPERVISOR, memory: 512M,
                     boot_timeout: 1200}
workloads:
  - {name: kernbench}
  - {name: consolidation, sets: 1}
repetitions: 1
"""
ROOTFS = os.environ.get("HVBENCH_KVM_LAB_ROOTFS") == "1"
"""Opt-in: a second run in the lab's boot (``ROOTFS_STUDY``), kernbench and consolidation in
Firecracker's and Cloud Hypervisor's guests booted from the Debian root filesystem on a root
drive, as their workloads need. Under two levels of emulation it takes longer than CI's whole
budget for the lab."""
VMMS_MISSING = missing_reason()
"""Why the lab runs without Firecracker and Cloud Hypervisor (their release binaries are not on
PATH), or None: their cells, their tests and the opt-in rootfs run are opt-in then; QEMU's and
libvirt's cells run either way."""
LAB_TIMEOUT = 2400 + (3600 if ROOTFS and not VMMS_MISSING else 0)
"""The limit of the lab's boots (s), all of them together (``nested.BOOTS``)."""

pytestmark = pytest.mark.timeout(LAB_TIMEOUT + 200)  # the first test waits for the boots

VMMS = ("firecracker", "cloud-hypervisor")
MICROVMS = ("microvm-auto", *VMMS)
"""The microVM VMMs and QEMU's microvm machine, which the lab compares on boot, memory and
snapshot besides cpu, disk and net. The baseline is Cloud Hypervisor, the one platform that runs
every workload of the study (a workload's platforms must hold the baseline): migration runs on
it alone."""

LAB_COMMANDS = (
    nested.LIBVIRTD_KVM
    + """\
set -x
{hvbench} run /lab/study.yaml --quick --no-report --db sqlite:////var/tmp/hvbench/results.db
echo "hvbench-run-exit $?"
# after the run, whose accel: auto made the KVM probe with L1 to itself: doctor's other
# probes at the same time leave a guest under two levels of emulation short of its 25 s; qemu's
# alone, the one the tests read
{hvbench} doctor qemu --json > /lab/doctor.json
cp /var/tmp/hvbench/results.db /lab/results.db
"""
    + nested.MORE_RUN
    + nested.CONSOLIDATION_PEER
    + """\
more_run rootfs
echo "qemus: $(pgrep -c qemu-system)"
echo "vmms: $(pgrep -c -f '(^|/)(firecracker|cloud-hypervisor) ')"
echo "netns: $(ip netns list | wc -l)"
echo "ledgers: $(ls -d /run/hvbench/*/ 2>/dev/null | wc -l)"
echo "libvirt-domains: $(virsh -c qemu:///system list --all --name | grep -c hvb-)"
"""
)


def lab_boot() -> nested.Boot:
    """The lab's one boot (conftest.py boots it from the session's start): L1 with kvm_amd,
    STUDY and doctor run in it, then ROOTFS_STUDY where asked (``ROOTFS``)."""
    with_vmms = not VMMS_MISSING
    return nested.Boot(
        nested.KVM,
        _with_binaries(STUDY) if with_vmms else without_vmms(STUDY),
        LAB_COMMANDS,
        LAB_TIMEOUT,
        {"rootfs": _with_binaries(ROOTFS_STUDY)} if ROOTFS and with_vmms else {},
        # five 512M guests at once for consolidation, each on its own copy of the root
        # filesystem (2.4 GiB allocated: raw drives, no copy-on-write format). One vCPU, as in
        # CI: with two, the opt-in run lost two microVMs to vCPU errors, a third to a reset,
        # and L1 to a reset (2026-11-29); with one, its four cells but Firecracker's
        # consolidation passed
        memory_mib=6144 if ROOTFS else 4096,
        scratch_size=(20 if ROOTFS else 4) << 30,
    )


@pytest.fixture(scope="module")
def kvm_lab(labs) -> nested.LabRun:
    return labs.booted(__name__)


def _with_binaries(study: str) -> str:
    """A study of the lab's with the VMMs' binaries where it names them."""
    return study.replace("FIRECRACKER", vmm_binary("firecracker")).replace(
        "CLOUD_HYPERVISOR", vmm_binary("cloud-hypervisor")
    )


def without_vmms(study: str) -> str:
    """The lab's study without Firecracker and Cloud Hypervisor: QEMU's microvm its baseline,
    each workload on the platforms left to it, those left with none (migration) dropped."""
    data = yaml.safe_load(study)
    for vmm in VMMS:
        del data["platforms"][vmm]
    data["baseline"] = "microvm-auto"
    workloads = []
    for workload in data["workloads"]:
        if "platforms" in workload:
            workload["platforms"] = [p for p in workload["platforms"] if p not in VMMS]
        if workload.get("platforms", True):
            workloads.append(workload)
    data["workloads"] = workloads
    return yaml.safe_dump(data, sort_keys=False)


def _needs_vmms() -> None:
    """Skip (opt-in) a test of the lab's Firecracker and Cloud Hypervisor cells without them."""
    if VMMS_MISSING:
        pytest.skip(VMMS_MISSING)


def test_the_lab_study_loads():
    """The study the lab runs is one hvbench takes, checked here in a second: in the lab's
    fixture, a study refused shows only after the image builds. Without the VMMs it keeps
    every cell of QEMU's and libvirt's."""
    study = parse_study(STUDY, "kvm-lab.yaml")
    assert study.baseline == "cloud-hypervisor"
    assert parse_study(ROOTFS_STUDY, "rootfs.yaml").baseline == "cloud-hypervisor"
    alone = parse_study(without_vmms(STUDY), "kvm-lab.yaml")
    assert alone.baseline == "microvm-auto"
    assert sorted(alone.platforms) == ["libvirt-kvm", "microvm-auto", "pc-kvm"]
    kept = {(c.platform, c.workload) for c in alone.cells()}
    full = {(c.platform, c.workload) for c in study.cells() if c.platform not in VMMS}
    assert kept == full


@pytest.mark.guest
def test_lab_doctor_says_kvm_is_usable(kvm_lab):
    findings = json.loads((kvm_lab.exchange / "doctor.json").read_text())
    qemu = next(f for f in findings if f["kind"] == "driver" and f["name"] == "qemu")
    assert qemu["ok"] and qemu["detail"].startswith("accel auto -> kvm: a stock guest"), qemu


@pytest.mark.guest
def test_lab_runs_cpu_disk_and_net_under_kvm(kvm_lab):
    store = kvm_lab.store()
    cells = {c.id: c for c in store.cells(kvm_lab.run_id)}
    samples = {
        (cells[s.cell_id].platform, cells[s.cell_id].workload_name): (s.status, s.error)
        for s in store.samples(kvm_lab.run_id)
    }
    vmms = () if VMMS_MISSING else VMMS
    platforms = ("pc-kvm", "microvm-auto", "libvirt-kvm", *vmms)
    want = {(p, w): ("ok", None) for p in platforms for w in ("disk", "net")}
    microvms = ("microvm-auto", *vmms)
    want |= {(p, w): ("ok", None) for p in microvms for w in ("boot", "memory", "cpu", "snapshot")}
    if vmms:
        want[("cloud-hypervisor", "migration")] = ("ok", None)
    assert samples == want, kvm_lab.result.output[-3000:]
    by_platform = {c.platform: c for c in cells.values()}
    for platform in platforms:
        resolved = by_platform[platform].platform_settings["resolved"]
        assert resolved["accel"] == "kvm" and resolved["nested"] is True, resolved
    pc = by_platform["pc-kvm"].platform_settings
    assert pc["vhost"] and pc["queues"] == 2
    assert pc["resolved"]["net_queues"] == {"pc-kvm-0": "2 of 2 active"}
    # vhost-net on (pc) and off (microvm, libvirt's e1000 has none): both moved iperf3's bytes
    assert not by_platform["microvm-auto"].platform_settings["vhost"]


@pytest.mark.guest
def test_lab_leaves_nothing_in_l1(kvm_lab):
    assert "hvbench-run-exit 0" in kvm_lab.result.output
    assert kvm_lab.count("qemus") == 0
    assert kvm_lab.count("vmms") == 0
    assert kvm_lab.count("netns") == 0
    assert kvm_lab.count("ledgers") == 0
    assert kvm_lab.count("libvirt-domains") == 0


@pytest.mark.guest
def test_l1_beat_until_its_commands_ended(kvm_lab):
    """L1's userspace wrote its heartbeat through the boot (what lets a silence of two minutes
    mean stuck): its last one came as L1 powered off, after the run."""
    heartbeat = kvm_lab.exchange / "heartbeat"
    uptime = float(heartbeat.read_text().split()[0])
    assert uptime > 60, uptime
    assert heartbeat.stat().st_mtime >= (kvm_lab.exchange / "exit-code").stat().st_mtime - 10


@pytest.mark.guest
def test_lab_runs_the_microvm_vmms_through_their_own_apis(kvm_lab):
    """Firecracker and Cloud Hypervisor booted, measured and snapshotted, Cloud Hypervisor
    live-migrated: each VMM's own start and Firecracker's boot time beside QEMU's phases, the
    VMM's memory beyond its guest's RAM, Firecracker's diff snapshot beside its full one, and
    the version that ran."""
    _needs_vmms()
    store = kvm_lab.store()
    cells = {c.id: c for c in store.cells(kvm_lab.run_id)}
    figures: dict[tuple[str, str], float | None] = {
        (cells[m.cell_id].platform, m.name): m.value for m in store.metric_rows(kvm_lab.run_id)
    }
    for vmm in ("firecracker", "cloud-hypervisor"):
        phases = [figures[(vmm, f"boot.{p}_s")] for p in ("api", "kernel", "init", "ready")]
        assert all(p is not None and p > 0 for p in phases), (vmm, phases)
        assert phases[0] < phases[2] < phases[3], (vmm, phases)
        assert 0 < figures[(vmm, "boot.start_to_init_s")] < phases[2]
        # the guest's RAM is told apart from the VMM's own memory
        assert figures[(vmm, "memory.guest_ram_mib")] > 10, vmm
        assert 0 < figures[(vmm, "memory.overhead_mib")] < 100, vmm
        assert figures[(vmm, "snapshot.restore_s")] > 0 and figures[(vmm, "snapshot.size_mib")] > 0
    assert ("microvm-auto", "boot.start_to_init_s") not in figures  # QEMU has no such call
    # live migration to a second Cloud Hypervisor: the guest wrote on throughout, and every
    # page it wrote arrived
    assert figures[("cloud-hypervisor", "migration.total_s")] > 0
    assert figures[("cloud-hypervisor", "migration.dirty_rate_mib_s")] > 0
    assert figures[("cloud-hypervisor", "migration.wrong_pages")] == 0
    # without track_dirty_pages the diff is mincore's: every page resident, which the full
    # snapshot's copy made all of them (with it, nested, the guest slowed past the sample's time)
    full, diff = (figures[("firecracker", f"snapshot.{f}_mib")] for f in ("size", "diff_size"))
    assert 0 < diff <= full * 1.01, (diff, full)
    by_platform = {c.platform: c for c in cells.values()}
    assert str(by_platform["firecracker"].provenance.vmm).startswith("Firecracker v1.")
    assert str(by_platform["cloud-hypervisor"].provenance.vmm).startswith("cloud-hypervisor v")


@pytest.mark.guest
@pytest.mark.skipif(not ROOTFS, reason="opt-in: HVBENCH_KVM_LAB_ROOTFS=1")
def test_lab_runs_kernbench_and_real_servers_in_the_vmms_root_filesystem(kvm_lab):
    """kernbench's compile, cold and warm, and one set of real servers in --quick (web, imap,
    app, db, idle: five guests at once), each VMM's guests booted from the Debian root
    filesystem: every active role's requests counted against those due, an SLO verdict each."""
    _needs_vmms()
    store, run_id = kvm_lab.more("rootfs")
    cells = {c.id: c for c in store.cells(run_id)}
    samples = {
        (cells[s.cell_id].platform, cells[s.cell_id].workload_name): (s.status, s.error)
        for s in store.samples(run_id)
    }
    vmms = ("firecracker", "cloud-hypervisor")
    assert samples == {(p, w): ("ok", None) for p in vmms for w in ("kernbench", "consolidation")}
    got: dict[str, dict[tuple[int, str], float]] = {p: {} for p in vmms}
    for row in store.metric_rows(run_id):
        got[cells[row.cell_id].platform][(row.instance, row.name)] = row.value
    for vmm in vmms:
        print(f"kvm lab, {vmm}: {dict(sorted(got[vmm].items()))}")
        assert got[vmm][(0, "kernbench.cold.elapsed_s")] > 0
        assert got[vmm][(0, "kernbench.warm.user_s")] > 0
        consolidation = {k: v for k, v in got[vmm].items() if k[1].startswith("consolidation.")}
        every_role_served(consolidation, vmm, all_done=False)
    for cell in cells.values():
        packages = cell.platform_settings["rootfs"]["packages"]
        assert "nginx" in packages and "build-essential" in packages, cell.platform


@pytest.mark.guest
def test_lab_report_names_the_vmms_nested(kvm_lab):
    _needs_vmms()
    out = subprocess.run(
        [str(nested.HVBENCH), "report", kvm_lab.run_id, "--db", kvm_lab.db, "--format", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    samples = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    labels = {s.get("metadata", {}).get("label") for s in samples}
    assert {"firecracker [kvm, nested]", "cloud-hypervisor [kvm, nested]"} <= labels, labels


@pytest.mark.guest
def test_lab_report_says_the_figures_are_nested(kvm_lab):
    out = kvm_lab.report()
    assert out.returncode == 0, out.stderr
    nested_ones = "libvirt-kvm, microvm-auto, pc-kvm"
    if not VMMS_MISSING:
        nested_ones = f"cloud-hypervisor, firecracker, {nested_ones}"
    assert f"{nested_ones}: KVM nested in a virtual machine" in out.stdout


def test_a_panicked_locked_up_or_silent_l1_is_taken_for_stuck(tmp_path):
    console = tmp_path / "console.log"
    console.write_bytes(b"lab: root ready\r\n[  86.4] kvm [731]: vcpu0, Unhandled WRMSR\r\n")
    assert nested._stuck(tmp_path) is None
    lockup = b"[ 300.1] watchdog: BUG: soft lockup - CPU#1 stuck for %ds! [CPU 0/KVM:1465]\r\n"
    console.write_bytes(console.read_bytes() + lockup % 22)
    assert nested._stuck(tmp_path) is None  # a short one can be the host's load
    console.write_bytes(console.read_bytes() + lockup % 64)
    assert nested._stuck(tmp_path) == "soft lockup - CPU#1 stuck for 64s! [CPU 0/KVM:1465]"
    console.write_bytes(
        b"[ 386.5] BUG: TASK stack guard page was hit at 000000000c847719\r\n"
        b"[ 389.0] Kernel panic - not syncing: corrupted stack end detected inside scheduler\r\n"
        b"[ 389.0] Kernel Offset: disabled\r\n"
    )
    assert nested._stuck(tmp_path) == (
        "Kernel panic - not syncing: corrupted stack end detected inside scheduler"
    )
    console.write_bytes(b"lab: root ready\n")
    past = time.time() - nested.BOOT_SILENT_FOR - 5
    os.utime(console, (past, past))
    assert nested._stuck(tmp_path) == (
        f"no word from L1 for {nested.BOOT_SILENT_FOR} s, before its first heartbeat"
    )
    # once L1's userspace beats, its silence is taken for stuck sooner, whatever else it wrote
    heartbeat = tmp_path / "heartbeat"
    heartbeat.write_text("812.47 790.02\n1.02 0.97 0.88 2/97 1234\n")
    assert nested._stuck(tmp_path) is None
    past = time.time() - nested.SILENT_FOR - 5
    os.utime(heartbeat, (past, past))
    assert nested._stuck(tmp_path) == (
        f"no heartbeat from L1 for {nested.SILENT_FOR} s (the last: L1 up 812 s, load 1.02)"
    )
    assert nested.SILENT_FOR <= 120


def test_a_silence_says_whether_l1_spun_or_waited():
    """Over a silence, L1's QEMU's CPU time tells a vCPU looping (in L1's kernel or an L2
    guest) from a QEMU that waited."""
    trace = nested.CpuTrace(0, [(0.0, 10.0), (60.0, 70.0), (120.0, 130.0)])
    assert trace.over(120, 1) == "L1's QEMU used 120 CPU-s in the last 120 s on 1 vCPU(s): spinning"
    trace = nested.CpuTrace(0, [(0.0, 10.0), (60.0, 11.0), (120.0, 12.5)])
    assert trace.over(60, 1) == "L1's QEMU used 2 CPU-s in the last 60 s on 1 vCPU(s): waiting"
    assert nested.CpuTrace(0).over(120, 1) == "L1's QEMU's CPU time not sampled"


def test_a_boots_message_says_the_last_cell_l1_finished(tmp_path):
    """Where a boot set aside got to: the last cell hvbench in L1 finished, as its run printed
    it, without the outcome (a failure's line can be long)."""
    output = (
        "run 20261129-085929-51dd\n"
        "rep 1 microvm-auto × 1 boot: ok\n"
        "rep 1 cloud-hypervisor × 1 migration-precopy-4M: failed: a long line: more\n"
    )
    result = nested.LabResult(None, output, "", 440.0, "no word from L1 for 360 s", 1.2)
    assert result.why(tmp_path) == (
        f"the boot's files: {tmp_path}; the last cell done: rep 1 cloud-hypervisor × 1 "
        f"migration-precopy-4M; host load up to 1.2 on {nested.CPUS} CPUs"
    )
    assert replace(result, output="run 20261129-085929-51dd\n").last_cell() == "none"


def test_a_boots_console_logs_and_stores_are_kept(tmp_path):
    """What L1 left on its scratch disk (a guest's console, a store) is copied off it before
    the disk goes, the guests' disks are not; a boot set aside for a retry keeps all of it."""
    scratch, exchange = tmp_path / "var-tmp.raw", tmp_path / "exchange"
    with scratch.open("wb") as f:
        f.truncate(16 << 20)
    nested._salvage(scratch, exchange / "scratch")  # a disk L1 never formatted
    assert not (exchange / "scratch").exists()
    subprocess.run(["mkfs.ext4", "-q", "-F", str(scratch)], check=True)
    (tmp_path / "console").write_text("Kernel panic\n")
    (tmp_path / "disk").write_bytes(b"\0" * 4096)
    for request in (
        "mkdir 20261126-1",
        f"write {tmp_path / 'console'} 20261126-1/pc-kvm-0.console.log",
        f"write {tmp_path / 'disk'} 20261126-1/pc-kvm-0.data.raw",
        f"write {tmp_path / 'disk'} results.db",
    ):
        subprocess.run(["debugfs", "-w", "-R", request, str(scratch)], check=True)
    nested._salvage(scratch, exchange / "scratch")
    kept = sorted(str(p.relative_to(exchange)) for p in exchange.rglob("*") if p.is_file())
    assert kept == ["scratch/20261126-1/pc-kvm-0.console.log", "scratch/results.db"]
    assert (exchange / "scratch/20261126-1/pc-kvm-0.console.log").read_text() == "Kernel panic\n"
    for name in ("study.yaml", "stage2.sh", "console.log", "output.log"):
        (exchange / name).write_text(name)
    aside = nested._set_aside(exchange, "boot-1")
    assert sorted(p.name for p in exchange.iterdir()) == ["boot-1", "stage2.sh", "study.yaml"]
    assert sorted(p.name for p in aside.iterdir()) == ["console.log", "output.log", "scratch"]


def test_a_failed_run_boots_again_only_where_the_emulation_faulted(tmp_path):
    (tmp_path / "console.log").write_bytes(
        b"lab: root ready\r\n[  86.4] kvm [731]: vcpu0, Unhandled WRMSR(0xc0010007) = 0xffff\r\n"
    )
    failed = nested.LabResult(0, "run 20261126-1\nhvbench-run-exit 1\nqemus: 0\n", "", 300.0)
    assert nested._emulation_failed(tmp_path, failed) is None  # hvbench's own failure
    guest = tmp_path / "scratch" / "20261126-1" / "libvirt-kvm-0.console.log"
    guest.parent.mkdir(parents=True)
    guest.write_bytes(b"[   3.1] general protection fault, probably for non-canonical address\r\n")
    assert nested._emulation_failed(tmp_path, failed) == (
        "hvbench-run failed where the emulation faulted: general protection fault, probably for"
        " non-canonical address (scratch/20261126-1/libvirt-kvm-0.console.log)"
    )
    passed = nested.LabResult(0, "hvbench-run-exit 0\nsnapshot-exit: 0\n", "", 300.0)
    assert nested._emulation_failed(tmp_path, passed) is None
    more = nested.LabResult(0, "hvbench-run-exit 0\nsnapshot-exit: 2\n", "", 300.0)
    assert nested._emulation_failed(tmp_path, more).startswith("snapshot failed where")
    stuck = nested.LabResult(None, "", "", 900.0, stuck="no word from L1 for 600 s")
    assert nested._emulation_failed(tmp_path, stuck) == "L1 stuck (no word from L1 for 600 s)"
    # seen in the opt-in run (2026-11-29): QEMU gone 36 min in, the console quiet to its end
    reset = nested.LabResult(None, "", "lab: root ready\r\n", 2180.0, ended=0)
    assert nested._emulation_failed(tmp_path, reset) == (
        "L1's QEMU ended by itself (status 0) before L1's commands did: L1 reset (a triple "
        "fault, or a panic: its console's end says which)"
    )
    assert nested._emulation_failed(tmp_path, replace(reset, ended=None)) is None  # out of time


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        # libvirt's log of the domain: the guest shut it down (a reset: on_reboot destroys)
        ("libvirt-kvm-0: the domain died during iperf3 (console: hvbench: up; qemu log: ... | "
         "2026-11-27 23:35:55.400+0000: shutting down, reason=shutdown)", True),
        # ... as it booted, and again in the cell's second try, where its agent stayed silent
        ("start: libvirt-kvm-0: the domain exited (console: [ 9.1] shpchp 0000:01:00.0: Slot "
         "initialization failed; qemu log: ... | 2026-11-28 15:41:34.234+0000: shutting down, "
         "reason=shutdown); tried again: libvirt-kvm-0: the guest hangs (libvirt-kvm-0: Guest "
         "agent is not responding: Guest agent not available for now); the domain stopped",
         True),
        # QEMU runs with -no-reboot: a reset ends it with status 0
        ("pc-kvm-0: QEMU died during iperf3 (exit status 0; stderr: (empty); console: ...)", True),
        ("pc-kvm-0: the guest hangs (pc-kvm-0: no answer from the guest agent in time); QEMU "
         "stopped", True),
        ("pc-kvm-0: QEMU died during iperf3 (killed by SIGKILL; stderr: (empty))", False),
        ("libvirt-kvm-0: the domain died during iperf3 (qemu log: ... shutting down, "
         "reason=destroyed)", False),
        ("start: libvirt-kvm-0: the domain exited (console: ...; qemu log: ... shutting down, "
         "reason=destroyed)", False),
        ("pc-kvm-0: iperf3 exited 1: unable to connect to server", False),
    ],
)  # fmt: skip
def test_a_guest_lost_is_the_emulations_failure(tmp_path, error, lost):
    """A failed sample whose guest stopped answering, or reset itself at boot or mid-command,
    with nothing on its console (a triple fault): a second boot; one that hvbench's own stop or
    a tool's error failed: none."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    cell = RunBuilder(store).cell("libvirt-kvm", "net")
    store.add_sample(
        cell,
        SampleRecord(1, "failed", error, datetime.now(UTC), 9.0, PlatformState(), None, [], []),
    )
    (tmp_path / "console.log").write_bytes(b"lab: root ready\r\n")
    failed = nested.LabResult(0, "run run-a\nhvbench-run-exit 1\nqemus: 0\n", "", 300.0)
    assert nested._emulation_failed(tmp_path, failed) == (
        "hvbench-run failed where the emulation faulted: libvirt-kvm's guest lost in net "
        "(results.db)"
        if lost
        else None
    )


def test_a_microvm_stopped_on_its_vcpus_error_in_a_run_l1_never_copied_is_lost(tmp_path):
    """Firecracker stopping a microVM on its vCPU's error, in the opt-in run's store that L1 died
    before copying (salvaged from its scratch disk): a second boot."""
    store = Store(f"sqlite:///{tmp_path / 'scratch' / 'rootfs.db'}")
    cell = RunBuilder(store).cell("firecracker", "kernbench")
    error = (
        "firecracker-0: Firecracker died during cp (exit status 1; stderr: Error: "
        "RunWithApi(MicroVMStoppedWithError(GenericError)); log: ...)"
    )
    store.add_sample(
        cell,
        SampleRecord(1, "failed", error, datetime.now(UTC), 9.0, PlatformState(), None, [], []),
    )
    failed = nested.LabResult(0, "hvbench-run-exit 0\nrootfs-exit: 1\n", "", 300.0)
    assert nested._emulation_failed(tmp_path, failed) == (
        "rootfs failed where the emulation faulted: firecracker's guest lost in kernbench "
        "(scratch/rootfs.db)"
    )


FAKE_LAB = """
import warnings

import pytest

def test_booted():
    warnings.warn("kvm lab: L1 stuck (no word from L1 for 360 s) after 212 s; booted again (x)")
    warnings.warn(
        "kvm lab: L1 stuck (a soft lockup) after 301 s; booted again (the boot's files: x; "
        "the last cell done: rep 1 pc-kvm × 1 boot; host load up to 1.1 on 2 CPUs)"
    )

def test_passed():
    pass

def test_failed():
    assert 1 == 2, "the lab's run failed"

@pytest.mark.skipif(True, reason="opt-in: HVBENCH_FAKE_LAB_MORE=1")
def test_more():
    pass
"""


def test_the_pass_rate_bench_reads_a_session_as_its_tests_left_it(tmp_path):
    """bench/lab_boots.py's reading of one pytest session: its failed tests with their first
    line, each boot set aside for another, counted as a failed boot, and a skip, which fails
    the session unless it is an opt-in's."""
    module = tmp_path / "test_fake_lab.py"
    module.write_text(FAKE_LAB)
    with bench_scripts.load("lab_boots") as bench:
        failed = bench.run_session(module, tmp_path / "session-1")
        module.write_text(FAKE_LAB.replace("1 == 2", "2 == 2"))
        passed = bench.run_session(module, tmp_path / "session-2")
        module.write_text(FAKE_LAB.replace("1 == 2", "2 == 2").replace("opt-in: ", "no "))
        skipped = bench.run_session(module, tmp_path / "session-3")
    assert failed.passed == 2 and failed.failed == {
        "test_failed": "AssertionError: the lab's run failed"
    }
    assert failed.retried == [
        "L1 stuck (no word from L1 for 360 s) after 212 s",
        "L1 stuck (a soft lockup) after 301 s, the last cell done: rep 1 pc-kvm × 1 boot",
    ]
    assert not failed.ok and failed.boots == [False, False, False]
    assert passed.ok and passed.boots == [False, False, True]
    assert passed.skipped == {"test_more": "opt-in: HVBENCH_FAKE_LAB_MORE=1"}
    assert not skipped.ok and skipped.left_out == {"test_more": "no HVBENCH_FAKE_LAB_MORE=1"}
    assert (tmp_path / "session-2" / "pytest.log").exists()


def test_a_lab_boots_again_while_the_emulation_fails_up_to_boots_times(tmp_path, monkeypatch):
    """Each boot that the nested emulation failed is set aside and L1 booted again, in the time
    the boots before it left, ``BOOTS`` times at most; the module's fixture (``Labs.booted``)
    says each boot set aside as a warning."""
    stuck = nested.LabResult(None, "", "", 300.0, stuck="soft lockup - CPU#0 stuck for 71s!")
    passed = nested.LabResult(0, "run 20261128-1\nhvbench-run-exit 0\n", "", 600.0)
    limits: list[float] = []

    def boot(files, exchange, script, timeout, *size, stop, cpus):
        assert cpus == nested.L1_CPUS  # one: the other tests keep the host's other CPU
        limits.append(timeout)
        (exchange / "console.log").write_text(f"boot {len(limits)}\n")
        return results.pop(0)

    monkeypatch.setattr(nested, "build_images", lambda study, name: None)
    monkeypatch.setattr(nested, "prepare", lambda hv: None)
    monkeypatch.setattr(nested, "run", boot)
    results = [stuck, stuck, passed]
    module = ModuleType("test_fake_lab")
    module.lab_boot = lambda: nested.Boot(nested.KVM, "study", "{hvbench}", timeout=2400)
    labs = nested.Labs()
    labs.start(module, tmp_path)
    with pytest.warns(UserWarning, match="kvm lab: L1 stuck .* after 300 s; booted again") as w:
        lab = labs.booted("test_fake_lab")
    assert lab.run_id == "20261128-1" and len(w) == 2
    assert limits == [2400, 2100, 1800]
    assert (tmp_path / "boot-2" / "console.log").read_text() == "boot 2\n"
    assert (tmp_path / "study.yaml").read_text() == "study"
    results, limits[:] = [stuck] * nested.BOOTS, []
    (tmp_path / "again").mkdir()
    again = nested.Boot(nested.KVM, "study", "{hvbench}", timeout=2400)
    with pytest.raises(AssertionError, match="L1 did not finish"):
        nested.run_study(again, None, tmp_path / "again")
    assert len(limits) == nested.BOOTS
    labs.close()


def test_a_lab_that_cannot_boot_here_is_its_tests_outcome_and_the_session_goes_on(tmp_path):
    """A lab module's skip (a VMM missing outside CI) or failure, raised as its boot is asked
    for at the session's start, is raised again in its own fixture, not in the session's: the
    other tests run. A session that ends stops the boot under way."""
    skipping, failing = ModuleType("test_skipping"), ModuleType("test_failing")
    skipping.lab_boot = lambda: pytest.skip("no firecracker")
    failing.lab_boot = lambda: pytest.fail("no firecracker under CI")
    labs = nested.Labs()
    labs.start(skipping, tmp_path)
    labs.start(failing, tmp_path)
    with pytest.raises(pytest.skip.Exception, match="no firecracker"):
        labs.booted("test_skipping")
    with pytest.raises(pytest.fail.Exception, match="under CI"):
        labs.booted("test_failing")
    labs.close()
    assert labs.stop.is_set()
