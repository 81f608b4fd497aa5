"""The xen driver: its settings and xl configuration here, and for real in the nested lab.

The lab (xenlab.py) boots Xen and a dom0 under QEMU TCG once per module and runs ``hvbench run``
in dom0 on a study with a PV platform; the tests read the results it left in the exchange
directory, with the store and the report of the host.

PVH and HVM domains are not in the lab's study: what the nested CPU allows was found out by hand
(README, "Platforms"). Both boot, with ``tsc_mode: native`` (QEMU's SVM emulation gives Xen no
next-instruction address on an intercept, so Xen cannot emulate RDTSCP and crashes the domain in
the default mode); a PVH guest then ran stress-ng and sysbench through the driver, but an HVM
guest takes minutes to reach user space.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import xenlab
from pydantic import ValidationError

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.xen import HOTPLUG, XenDriver, XenInstance, XenSettings, xl_list_seconds
from hvbench.guest import image
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.runner import needs_of
from hvbench.store import Store
from hvbench.study import parse_study

STUDY = """\
name: xen-lab
description: the xen driver in the nested lab
baseline: xen-pv
platforms:
  xen-pv: {driver: xen, mode: pv, memory: 256M, disk: {size: 256M}}
workloads:
  - {name: cpu, integer: {duration: 2}, float: {duration: 2}, memory: {duration: 2},
     branchy: {duration: 2}, memory_block: 4M}
  - {name: disk, tool: dd, size: 32M}
  - {name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 2}
instances: [1]
repetitions: 1
"""

LAB_COMMANDS = """\
set -x
xl info | grep -E '^(virt_caps|xen_version)'
{hvbench} run /lab/study.yaml --db sqlite:////tmp/results.db
echo "hvbench-run-exit $?"
cp /tmp/results.db /lab/results.db
echo "domains: $(xl list | tail -n +2 | wc -l)"
echo "loops: $(losetup -a | wc -l)"
echo "netns: $(ip netns list | wc -l)"
echo "vifs: $(ip -o link | grep -c ' vif')"
echo "ledgers: $(ls /run/hvbench 2>/dev/null | wc -l)"
"""


# settings and configuration (no Xen needed) ----------------------------------------------


def test_registered_and_settings_checked():
    assert DRIVERS["xen"] is XenDriver
    with pytest.raises(ValidationError, match="only mode: hvm"):
        XenSettings(driver="xen", mode="pv", nic="e1000")
    with pytest.raises(ValidationError, match="at least 128M"):
        XenSettings(driver="xen", memory="64M")
    with pytest.raises(ValidationError, match="qdisk takes a file"):
        XenSettings(driver="xen", disk={"backing": "block", "path": "/dev/sdz", "backend": "qdisk"})
    with pytest.raises(ValidationError):
        XenSettings(driver="xen", mode="hvm-pv")


def test_doctor_says_why_not_and_how_here():
    """This host is no dom0: doctor says so, and what would make it one."""
    found = XenDriver.check()
    assert not found.ok
    assert "xl not found" in found.detail or "dom0" in found.detail
    assert "xen" in found.fix.lower()


@dataclass
class _Image:
    """The two files of a guest image the configuration names."""

    initrd: Path
    bzimage: Path
    vmlinux: Path


def _driver(tmp_path: Path, **settings) -> XenDriver:
    ledger = Ledger("20261122-000000-test", root=tmp_path / "state")
    ledger.claim()
    driver = XenDriver(
        "xen-x",
        XenSettings(driver="xen", **settings),
        Needs(data_disk=True),
        ledger,
        RunNetwork(ledger.run_id, ledger),
        tmp_path,
    )
    image = _Image(tmp_path / "initrd.cpio", tmp_path / "vmlinuz", tmp_path / "vmlinux")
    driver._image = image  # what _resolve finds in dom0
    driver._kernel = image.bzimage if settings.get("mode") == "hvm" else image.vmlinux
    driver._script = ledger.add("path", str(tmp_path / "xen-hotplug"))
    return driver


def _parse_xl(text: str) -> dict[str, str]:
    """key = value lines of an xl configuration, as xl reads them."""
    return dict(line.split(" = ", 1) for line in text.splitlines())


def test_pv_config_boots_the_elf_kernel_with_netfront_and_blkback(tmp_path):
    driver = _driver(tmp_path, mode="pv", vcpus=2, memory="384M")
    inst = XenInstance("xen-x", 3, 2, 384, domain="hvb-test-xen-x-3")
    cfg = _parse_xl(driver._config(inst, "/dev/loop7"))
    assert cfg["type"] == '"pv"' and cfg["vcpus"] == "2" and cfg["memory"] == "384"
    assert cfg["kernel"] == f'"{tmp_path / "vmlinux"}"'
    assert "console=hvc0" in cfg["cmdline"] and "hvbench.agent=/dev/hvc0" in cfg["cmdline"]
    assert f"hvbench.ip={driver.network.address(3)}/24" in cfg["cmdline"]
    assert "xen_netfront" in cfg["cmdline"] and "xen_emul_unplug" not in cfg["cmdline"]
    assert "model=" not in cfg["vif"] and f"script={tmp_path / 'xen-hotplug'}" in cfg["vif"]
    assert "target=/dev/loop7" in cfg["disk"] and "vdev=xvdb" in cfg["disk"]
    assert f"script={tmp_path / 'xen-hotplug'}" in cfg["disk"]
    assert cfg["on_crash"] == '"destroy"' and "tsc_mode" not in cfg


def test_hvm_config_emulates_the_nic_and_serial_line(tmp_path):
    driver = _driver(
        tmp_path, mode="hvm", nic="rtl8139", disk={"backend": "qdisk"}, tsc_mode="native"
    )
    inst = XenInstance("xen-x", 0, 1, 512, domain="hvb-test-xen-x-0")
    cfg = _parse_xl(driver._config(inst, "/var/tmp/x.raw"))
    assert cfg["kernel"] == f'"{tmp_path / "vmlinuz"}"' and cfg["serial"] == '"pty"'
    assert "console=ttyS0" in cfg["cmdline"] and "hvbench.agent=/dev/ttyS0" in cfg["cmdline"]
    assert "xen_emul_unplug=never" in cfg["cmdline"] and "8139cp" in cfg["cmdline"]
    assert "model=rtl8139" in cfg["vif"] and "type=ioemu" in cfg["vif"]
    assert "backendtype=qdisk" in cfg["disk"] and "script=" not in cfg["disk"]
    assert cfg["tsc_mode"] == '"native"'


def test_hotplug_script_is_valid_shell(tmp_path):
    script = tmp_path / "hotplug"
    script.write_text(HOTPLUG)
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0


# the nested lab --------------------------------------------------------------------------


@dataclass
class LabRun:
    result: xenlab.LabResult
    exchange: Path
    run_id: str

    def count(self, what: str) -> int:
        """A count the lab's commands printed after the run ("loops: 0")."""
        for line in self.result.output.splitlines():
            if line.startswith(f"{what}: "):
                return int(line.split(": ", 1)[1])
        raise AssertionError(f"the lab printed no {what!r} count:\n{self.result.output[-3000:]}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> LabRun:
    """One boot of the lab for the module: Xen, dom0, and hvbench run on STUDY in dom0."""
    exchange = tmp_path_factory.mktemp("xenlab")
    (exchange / "study.yaml").write_text(STUDY)
    hvbench = Path(sys.executable).parent / "hvbench"
    # the guest image is built here, where it takes seconds; dom0 finds it in the shared cache
    image.build(needs_of(parse_study(STUDY, "xen-lab.yaml")).tools)
    result = xenlab.run(
        xenlab.prepare(), exchange, LAB_COMMANDS.format(hvbench=hvbench), timeout=1500
    )
    assert result.exit_code is not None, f"dom0 did not finish:\n{result.console[-3000:]}"
    run_id = next(
        (ln.split()[1] for ln in result.output.splitlines() if ln.startswith("run ")), None
    )
    assert run_id, f"hvbench did not start a run in dom0:\n{result.output[-3000:]}"
    return LabRun(result, exchange, run_id)


def _samples(lab: LabRun) -> dict[tuple[str, str], str]:
    store = Store(f"sqlite:///{lab.exchange / 'results.db'}")
    cells = {c.id: c for c in store.cells(lab.run_id)}
    return {
        (cells[s.cell_id].platform, cells[s.cell_id].workload_name): s.status
        for s in store.samples(lab.run_id)
    }


@pytest.mark.guest
def test_lab_dom0_sees_xen_with_hvm_and_hap(lab):
    assert "virt_caps" in lab.result.output and "hvm hap" in lab.result.output


@pytest.mark.guest
def test_lab_pv_domain_runs_cpu_disk_and_net(lab):
    assert _samples(lab) == {
        ("xen-pv", "cpu"): "ok",
        ("xen-pv", "disk"): "ok",
        ("xen-pv", "net"): "ok",
    }, lab.result.output[-3000:]
    store = Store(f"sqlite:///{lab.exchange / 'results.db'}")
    values = {row[3]: row[4] for row in store.metric_rows(lab.run_id)}
    assert values["disk.dd.write_mbps"] > 0 and values["net.iperf3.outbound_gbps"] > 0


@pytest.mark.guest
def test_lab_leaves_nothing_in_dom0(lab):
    assert "hvbench-run-exit 0" in lab.result.output
    assert lab.count("domains") == 1  # Domain-0 only
    assert lab.count("loops") == 0
    assert lab.count("netns") == 0
    assert lab.count("vifs") == 0
    assert lab.count("ledgers") == 0


@pytest.mark.guest
def test_lab_run_reports_on_the_host(lab):
    hvbench = Path(sys.executable).parent / "hvbench"
    db = f"sqlite:///{lab.exchange / 'results.db'}"
    out = subprocess.run(
        [str(hvbench), "report", lab.run_id, "--db", db, "--format", "md"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "% of xen-pv" in out.stdout and "cpu.composite.score" in out.stdout
    store = Store(db)
    cells = {c.platform: c for c in store.cells(lab.run_id)}
    resolved = cells["xen-pv"].platform_settings["resolved"]
    assert resolved["xen_version"].startswith(xenlab.XEN_VERSION)
    assert "vCPU time (xl list)" in resolved["host_cpu"]
    cpu_cell = next(c for c in store.cells(lab.run_id) if c.workload_name == "cpu")
    cpu = [s.host_cpu for s in store.samples(lab.run_id) if s.cell_id == cpu_cell.id]
    assert cpu and cpu[0]["instances_s"][0] > 1  # the domain's vCPU time, as Xen accounts it


def test_xl_list_time_is_read_defensively():
    listing = "Name  ID   Mem VCPUs\tState\tTime(s)\nhvb-1  3   256     1     -b----      12.4\n"
    assert xl_list_seconds(listing) == 12.4
    assert xl_list_seconds("Name ID Mem VCPUs State Time(s)\n") is None
    assert xl_list_seconds(listing.replace("12.4", "lots")) is None
    assert xl_list_seconds("garbage") is None


def test_host_pids_are_the_domains_device_model():
    """A domain's vCPUs run on Xen; what runs in dom0 for it is its device model (QEMU with
    ``-xen-domid``), whose CPU is the domain's share of the host's."""
    model = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-xen-domid", "424242"]
    )
    try:
        assert XenInstance("x", 0, 1, 256, domain="d", domid=424242).host_pids() == [model.pid]
        assert XenInstance("x", 0, 1, 256, domain="d", domid=42424).host_pids() == []
    finally:
        model.kill()
        model.wait()
