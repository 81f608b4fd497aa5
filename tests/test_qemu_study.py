"""QEMU platforms through the runner: a study next to native, a QEMU killed mid-workload, and
Debian 12 backports' QEMU 10.0 migrating a guest under TCG."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import require
from polling import wait_for

from hvbench.drivers.qemu_machine import BACKPORTS
from hvbench.host.process import executable, processes
from hvbench.host.resources import resource_name
from hvbench.session import NewRun, RunSession
from hvbench.store import Store, image_artifact
from hvbench.study import parse_study

STUDY = """\
name: qemu-vs-native
baseline: native
platforms:
  native: {driver: native, disk: {size: 128M}}
  kvm-virtio:
    {driver: qemu, accel: auto, memory: 384M, nic: virtio-net,
     disk: {bus: virtio-blk, format: raw, cache: none, size: 160M}}
  kvm-emulated:
    {driver: qemu, accel: auto, memory: 384M, nic: e1000,
     disk: {bus: ide, format: raw, cache: writeback, size: 160M}}
workloads:
  - {name: boot}
  - {name: disk, tool: dd, size: 32M}
  - {name: net, tool: iperf3, seconds: 2, parallel: 1, directions: [out]}
repetitions: 1
"""


@pytest.mark.guest
def test_study_with_kvm_platforms_falls_back_to_tcg_and_finishes():
    store = Store()
    session = RunSession.preflight(
        store, NewRun(parse_study(STUDY, "qemu-vs-native.yaml"), quick=True)
    )
    assert session.run().status == "finished"
    samples = store.samples(session.run_id)
    assert len(samples) == 9 and all(s.status == "ok" for s in samples)
    cells = {c.platform: c for c in store.cells(session.run_id)}
    for platform in ("kvm-virtio", "kvm-emulated"):
        settings = cells[platform].platform_settings
        resolved = settings["resolved"]
        assert resolved["accel"] in ("kvm", "tcg") and resolved["accel_reason"]
        ran = cells[platform].ran  # what the report reads: what the driver wrote it ran
        assert (ran.mode, ran.mode_reason) == (resolved["accel"], resolved["accel_reason"])
        manifest = store.artifacts(session.run_id)[image_artifact(settings["image"]["key"])]
        assert settings["image"] == {"key": manifest["key"]}  # the manifest is kept once
        assert "qemu-guest-agent" in manifest["packages"]
        assert "/usr/bin/iperf3" in manifest["files"]
    names = {row.name for row in store.metric_rows(session.run_id)}
    assert {"boot.ready_s", "disk.dd.write_mbps", "disk.dd.read_mbps"} <= names


KILL_STUDY = """\
name: qemu-killed
platforms:
  victim: {driver: qemu, accel: tcg, memory: 256M, nic: virtio-net}
workloads:
  - {name: net, tool: iperf3, seconds: 60, parallel: 1, directions: [out]}
  - {name: boot}
repetitions: 1
"""


def _qemu_of(run_id: str) -> psutil.Process | None:
    for proc in processes(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if argv and argv[0].endswith("qemu-system-x86_64") and run_id in " ".join(argv):
            return proc
    return None


def _iperf3_server(run_id: str) -> psutil.Process | None:
    """The net cell's server, on the peer, in the run's own namespace (with the run's QEMU)."""
    try:
        netns = os.stat(f"/run/netns/{resource_name(run_id)}").st_ino
    except OSError:
        return None
    for proc in processes(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if argv and os.path.basename(argv[0]) == "iperf3" and {"-s", "--server"} & set(argv):
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == netns:
                    return proc if _qemu_of(run_id) is not None else None
    return None


SENDING = 4 << 20
"""Bytes received in the server's namespace that only the client's stream brings there."""


def _received(server: psutil.Process) -> int:
    """Bytes received on the interfaces of the server's namespace (its /proc/net/dev)."""
    try:
        lines = Path(f"/proc/{server.pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return 0
    return sum(int(line.split(":")[1].split()[0]) for line in lines if ":" in line)


@pytest.mark.guest
def test_qemu_killed_mid_workload_fails_its_cell_and_the_run_goes_on():
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(KILL_STUDY, "qemu-killed.yaml")))
    killed: list[int] = []
    missed: list[str] = []

    def killer():
        try:
            server = wait_for(
                lambda: _iperf3_server(session.run_id), 300, "the iperf3 server up", interval=0.5
            )
            # the client (in the guest, outbound) is sending once megabytes reach the server
            wait_for(lambda: _received(server) > SENDING, 120, "the client sending", interval=0.2)
        except AssertionError as e:
            missed.append(str(e))
            return
        victim = _qemu_of(session.run_id)
        if victim:
            killed.append(victim.pid)
            victim.kill()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    start = time.monotonic()
    status = session.run().status
    thread.join(10)
    assert killed, f"the QEMU process was never found to kill: {missed}"
    assert time.monotonic() - start < 200  # not the 60 s workload plus its timeout
    assert status == "failed"
    samples = {s.cell_id: s for s in store.samples(session.run_id)}
    by_workload = {c.workload_name: samples[c.id] for c in store.cells(session.run_id)}
    assert by_workload["net"].status == "failed"
    assert "QEMU" in by_workload["net"].error
    assert by_workload["boot"].status == "ok"  # a fresh guest for the next cell
    assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == "zombie"
    assert _qemu_of(session.run_id) is None


MIGRATION_STUDY = """\
name: qemu10-migration
platforms:
  qemu10: {driver: qemu, accel: tcg, memory: 256M, nic: none, binary: qemu-system-x86_64-backports}
workloads:
  - {name: migration, dirty_rate: 16M}
repetitions: 1
"""


@pytest.mark.guest
def test_backports_qemu_migrates_a_writing_guest_under_tcg_without_losing_a_page():
    """QEMU 7.2 loses writes a TCG guest makes during its migration (workloads/migration.py);
    10.0, in hvbench's virtualenv, must not, and the run records which QEMU ran."""
    binary = executable(BACKPORTS)
    require(binary is not None, f"{BACKPORTS} (./setup.sh --with-qemu-backports)")
    store = Store()
    session = RunSession.preflight(
        store, NewRun(parse_study(MIGRATION_STUDY, "qemu10.yaml"), quick=True)
    )
    assert session.run().status == "finished"
    [sample] = store.samples(session.run_id)
    assert sample.status == "ok", sample.error
    values = {row.name: row.value for row in store.metric_rows(session.run_id)}
    assert values["migration.wrong_pages"] == 0, "every page the guest wrote arrived"
    for name in ("total_s", "downtime_ms", "transferred_mib", "passes", "guest_pause_ms"):
        assert values[f"migration.{name}"] > 0, name
    assert values["migration.dirty_rate_mib_s"] > 8, "the guest kept writing during the move"
    [cell] = store.cells(session.run_id)
    resolved = cell.platform_settings["resolved"]
    assert resolved["qemu_binary"] == binary
    assert resolved["qemu"].startswith("QEMU emulator version 10.0"), resolved["qemu"]
    assert cell.platform_settings["binary"] == BACKPORTS
