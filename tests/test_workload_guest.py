"""Every workload family end to end inside one TCG guest (booted once for the module), through
the same prepare / barrier / measure / cleanup calls as on native, with --quick sizes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from guest_fixtures import RecordingLedger, assert_nothing_left
from workload_env import run_workload

from hvbench.drivers.base import Instance, Needs
from hvbench.drivers.qemu import QemuDriver, QemuSettings
from hvbench.host.network import RunNetwork
from hvbench.workloads.base import Workload
from hvbench.workloads.bonnie import Bonnie, BonnieSettings
from hvbench.workloads.boot import Boot, BootSettings
from hvbench.workloads.cpu import SUB_SCORES, Cpu, CpuSettings
from hvbench.workloads.dbench import Dbench, DbenchSettings
from hvbench.workloads.dd import Dd, DdSettings
from hvbench.workloads.fio import Fio, FioSettings
from hvbench.workloads.iperf import Iperf, IperfSettings
from hvbench.workloads.iperf3 import Iperf3, Iperf3Settings
from hvbench.workloads.kernbench import Kernbench, KernbenchSettings
from hvbench.workloads.latency import Latency, LatencySettings

pytestmark = pytest.mark.guest

CASES: dict[str, tuple[Workload, list[str]]] = {
    "cpu": (Cpu(CpuSettings(name="cpu")), list(SUB_SCORES)),
    "fio": (
        Fio(FioSettings(name="disk", tool="fio", depths=[1, 32])),
        ["disk.fio.seq_write_qd32_mibps", "disk.fio.rand_read_qd1_clat_p99_us"],
    ),
    "dd": (Dd(DdSettings(name="disk", tool="dd")), ["disk.dd.write_mbps", "disk.dd.read_mbps"]),
    "dbench": (
        Dbench(DbenchSettings(name="disk", tool="dbench", clients=2)),
        ["disk.dbench.throughput_mbps"],
    ),
    "bonnie++": (Bonnie(BonnieSettings(name="disk")), ["disk.bonnie.seq_output_char_kbps"]),
    "iperf3": (
        Iperf3(Iperf3Settings(name="net")),
        ["net.iperf3.inbound_gbps", "net.iperf3.outbound_sender_cpu_pct"],
    ),
    "iperf": (Iperf(IperfSettings(name="net", tool="iperf")), ["net.iperf.outbound_gbps"]),
    "latency": (Latency(LatencySettings(name="net", tool="latency")), ["net.latency.rtt_p50_us"]),
    "boot": (Boot(BootSettings(name="boot")), ["boot.ready_s"]),
}


def _boot_one(tmp_path_factory, needs: Needs) -> Iterator[tuple[Instance, RunNetwork]]:
    """One TCG guest for the module; afterwards nothing it made may be left on the host."""
    run_id = f"test-{time.time_ns()}"
    ledger = RecordingLedger(run_id)
    ledger.claim()
    network = RunNetwork(run_id, ledger)
    settings = QemuSettings(driver="qemu", accel="tcg", memory="1G", disk={"size": "1G"})
    driver = QemuDriver("tcg", settings, needs, ledger, network, tmp_path_factory.mktemp("work"))
    try:
        [inst] = driver.start(1, time.monotonic() + 900)
        try:
            yield inst, network
        finally:
            driver.stop([inst])
    finally:
        ledger.release_all()
    assert_nothing_left(ledger.made)


@pytest.fixture(scope="module")
def guest(tmp_path_factory) -> Iterator[tuple[Instance, RunNetwork]]:
    tools = frozenset(t for w, _ in CASES.values() for t in w.tools())
    yield from _boot_one(tmp_path_factory, Needs(tools=tools, data_disk=True))


@pytest.mark.parametrize("case", list(CASES))
def test_quick_in_a_tcg_guest(guest, case):
    instance, network = guest
    workload, expected = CASES[case]
    t0 = time.monotonic()
    (outcome,) = run_workload(workload, [instance], network)
    print(f"{case}: {time.monotonic() - t0:.1f} s in the guest")
    got = {m.name: m for m in outcome.metrics}
    for name in expected:
        assert got[name].value is not None or got[name].text == "+++++", name
        assert got[name].value is None or got[name].value > 0, name
    mount = instance.data_disk.mountpoint
    assert instance.exec(["ls", mount], 30).text().split() == ["lost+found"]


def test_kernbench_quick_in_a_userland_guest(tmp_path_factory):
    """The root-filesystem form of the guest: compile tools/lib/subcmd, cold and warm."""
    workload = Kernbench(KernbenchSettings(name="kernbench"))
    needs = Needs(tools=frozenset(workload.tools()), userland=True)
    for instance, network in _boot_one(tmp_path_factory, needs):
        t0 = time.monotonic()
        (outcome,) = run_workload(workload, [instance], network)
        print(f"kernbench: {time.monotonic() - t0:.1f} s in the guest")
    got = {m.name: m for m in outcome.metrics}
    assert got["kernbench.cold.elapsed_s"].value > 0
    assert got["kernbench.warm.user_s"].value > 0
