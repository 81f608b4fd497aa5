"""disk fio / dd / dbench: parsers against real output (incl. a failed fio job and tools killed
half-way) and quick runs on one native instance's data disk."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from guest_fixtures import run_context
from workload_env import calibrate, native_instances, run_workload

from hvbench.drivers.disks import DataImage, HostDisk
from hvbench.errors import InstanceError
from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.dbench import Dbench, DbenchSettings, parse_dbench
from hvbench.workloads.dd import QUICK_SIZE, Dd, DdSettings, parse_dd, rate_of
from hvbench.workloads.fio import Fio, FioSettings, parse_fio_json

FIX = Path(__file__).parent / "fixtures"


def by_name(metrics):
    return {m.name: m for m in metrics}


def test_fio_json():
    m = by_name(parse_fio_json((FIX / "fio/two-jobs.json").read_text()))
    assert m["disk.fio.rand_write_qd32_iops"].value == pytest.approx(33501.249375)
    assert m["disk.fio.rand_write_qd32_mibps"].value == pytest.approx(134068 / 1024)
    # fio prints nanoseconds
    assert m["disk.fio.seq_read_qd1_clat_p99_us"].value == pytest.approx(6127616 / 1000)
    assert not m["disk.fio.seq_read_qd1_clat_p999_us"].higher_is_better
    assert m["disk.fio.seq_read_qd1_mibps"].unit == "MiB/s"


def test_fio_failed_job_and_killed():
    with pytest.raises(ParseError, match=r"fio job failed: bad \(error 2\)"):
        parse_fio_json((FIX / "fio/failed-job.json").read_text())
    with pytest.raises(ParseError, match="no JSON"):
        parse_fio_json((FIX / "fio/killed.json").read_text())
    text = (FIX / "fio/two-jobs.json").read_text()
    with pytest.raises(ParseError, match="cut short"):
        parse_fio_json(text[: len(text) // 2])


def test_fio_profiles_on_the_command_line():
    w = Fio(FioSettings(name="disk", tool="fio", depths=[1, 32]))
    argv = w.argv("/d/fio.dat", quick=True)
    assert sum(a.startswith("--name=") for a in argv) == 8
    assert "--name=rand_read_qd32" in argv and "--runtime=2" in argv
    assert w.estimate_seconds(True) < 40 < w.estimate_seconds(False)


def test_dd_gnu_output():
    rate, resolution = rate_of([parse_dd((FIX / "dd/gnu-write.txt").read_text(), "write")])
    assert rate == pytest.approx(67108864 / 0.147406 / 1e6)
    assert resolution == pytest.approx(rate * 1e-6 / 0.147406)  # dd printed microseconds
    read = rate_of([parse_dd((FIX / "dd/gnu-read.txt").read_text(), "read")])[0]
    assert read == pytest.approx(67108864 / 0.116381 / 1e6)
    coarse = parse_dd("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.5 s, 716 MB/s", "write")
    assert rate_of([coarse])[1] == pytest.approx(1073.741824 / 1.5 * 0.1 / 1.5)


def test_dd_loops_rate_is_all_bytes_over_all_seconds():
    """Passes looped within a sample: their bytes over their seconds (not a mean of rates),
    and a resolution from every pass's printed digits."""
    one = parse_dd("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.5 s, 2.1 GB/s", "write")
    two = parse_dd("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.5 s, 716 MB/s", "write")
    rate, resolution = rate_of([one, two])
    assert rate == pytest.approx(2 * 1073.741824 / 2.0)
    assert resolution == pytest.approx(rate * 0.2 / 2.0)
    with pytest.raises(ParseError, match="summary"):
        parse_dd((FIX / "dd/gnu-killed.txt").read_text(), "write")


def test_dbench_output():
    assert parse_dbench((FIX / "dbench/run.txt").read_text(), 2) == (444.635, 22.891)
    with pytest.raises(ParseError, match="expected 10"):
        parse_dbench((FIX / "dbench/run.txt").read_text(), 10)
    for bad in ("killed.txt", "failed.txt"):
        with pytest.raises(ParseError, match="Throughput"):
            parse_dbench((FIX / "dbench" / bad).read_text(), 2)


def test_tool_choice():
    assert workload_class("disk", "fio") is Fio
    assert workload_class("disk", "dd") is Dd
    assert workload_class("disk", "dbench") is Dbench
    assert Dbench(DbenchSettings(name="disk", tool="dbench")).settings.label() == (
        "disk dbench clients=10"
    )


@pytest.fixture(scope="module")
def native_disk():
    with native_instances(1, data_disk=True, disk_size="1G") as env:
        yield env


@pytest.mark.parametrize(
    ("workload", "metric"),
    [
        (Fio(FioSettings(name="disk", tool="fio", depths=[1])), "disk.fio.rand_read_qd1_iops"),
        (Dd(DdSettings(name="disk", tool="dd")), "disk.dd.read_mbps"),
        (Dd(DdSettings(name="disk", tool="dd", size="auto")), "disk.dd.write_mbps"),
        (
            Dbench(DbenchSettings(name="disk", tool="dbench", clients=2)),
            "disk.dbench.throughput_mbps",
        ),
    ],
    ids=["fio", "dd", "dd size=auto", "dbench"],
)
def test_quick_run_on_native(native_disk, workload, metric):
    instances, network = native_disk
    (outcome,) = run_workload(workload, instances, network)
    assert by_name(outcome.metrics)[metric].value > 0
    if metric.startswith("disk.dd."):  # each pass run by hvbench-clock: start, end, resolution
        assert all("status=0 start=" in raw.content for raw in outcome.raw)
        assert by_name(outcome.metrics)[metric].resolution > 0
    mount = instances[0].data_disk.mountpoint
    assert instances[0].exec(["ls", mount], 10).text().split() == ["lost+found"]


def test_no_data_disk_is_one_clear_error():
    with (
        native_instances(1) as (instances, network),
        pytest.raises(InstanceError, match="data disk"),
    ):
        run_workload(Dd(DdSettings(name="disk", tool="dd")), instances, network)


def test_auto_size_is_sized_natively_and_kept_in_the_settings_not_the_label():
    """size: auto grows the passes from 64 MiB until the faster lasts the target natively, in
    whole blocks, within most; the settings it returns move those bytes, under the same label
    (a cell's key), and settings never sized refuse to run."""
    settings = DdSettings(name="disk", tool="dd", size="auto", target_seconds=1.0, most="3G")
    assert settings.calibrates() and settings.label() == "disk dd size=auto target=1s"
    with native_instances(1, data_disk=True, disk_size="4G") as (instances, network):
        chosen = calibrate(Dd(settings), instances[0], network)
        (outcome,) = run_workload(Dd(chosen), instances, network, quick=False)
        with pytest.raises(ValueError, match="size: auto was not sized"):
            run_workload(Dd(settings), instances, network, quick=False)
    assert chosen.sized is not None and QUICK_SIZE <= chosen.sized <= 3 << 30
    assert chosen.sized % chosen.block == 0
    assert f"count={chosen.sized // chosen.block}" in outcome.raw[0].command
    assert chosen.label() == settings.label() and not chosen.calibrates()
    assert DdSettings(name="disk", tool="dd", size="auto", target_seconds=2).label() == (
        "disk dd size=auto target=2s"
    )


def test_auto_size_loops_where_its_most_passes_too_fast(native_disk):
    """A disk faster than ``most`` allows (here ``most`` 64 MiB, a pass well under the 3 s
    target on any disk): never refused; the passes loop within a sample until together they
    last the target natively, each pass kept and timed, the loops stored with the size."""
    instances, network = native_disk
    settings = DdSettings(name="disk", tool="dd", size="auto", target_seconds=3.0, most="64M")
    chosen = calibrate(Dd(settings), instances[0], network)
    (outcome,) = run_workload(Dd(chosen), instances, network, quick=False)
    assert chosen.sized == 64 << 20 and chosen.loops > 1
    assert len(outcome.raw) == 2 * chosen.loops
    assert all("status=0 start=" in raw.content for raw in outcome.raw)
    assert chosen.sized_text() == f"64M a pass, {chosen.loops} loops a sample"
    assert DdSettings.model_validate(chosen.model_dump(mode="json")).loops == chosen.loops
    assert chosen.label() == settings.label()  # the same cell as the settings sized
    written = DdSettings(name="disk", tool="dd", size="1G", loops=3)
    assert written.label() == "disk dd size=1G loops=3"  # a study's own loops: another job


@pytest.mark.parametrize(("fmt", "formatted"), [("raw", True), ("qcow2", False)])
def test_a_raw_data_disk_is_formatted_on_the_host_a_qcow2_one_is_not(tmp_path, fmt, formatted):
    """The host formats every raw data disk natively (a guest's mkfs under TCG took 2.3 s an
    instance); a qcow2 image it cannot write as a file is left to the guest."""
    with run_context(tmp_path) as run:
        driver = SimpleNamespace(platform="p", workdir=run.workdir, ledger=run.ledger)
        disk = HostDisk(size=64 << 20)
        image = DataImage.make(driver, disk, f"p-0.{fmt}", [], fmt)
        assert image.formatted is formatted
        probe = subprocess.run(
            ["blkid", "-p", "-o", "value", "-s", "TYPE", image.path],
            capture_output=True,
            text=True,
        )
        assert probe.stdout.strip() == ("ext4" if formatted else ""), probe
