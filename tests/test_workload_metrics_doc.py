"""docs/metrics.md is the one table of metric names: every metric a parser makes from real
output is in it, with the same unit and direction."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from metrics_doc import METRICS_DOC, doc_rows
from workload_env import native_instances, run_workload

from hvbench.drivers.base import BootPhases
from hvbench.workloads.base import Context, GroupStart, Metric
from hvbench.workloads.bonnie import parse_bonnie_csv
from hvbench.workloads.boot import Boot, BootSettings
from hvbench.workloads.cpu import PARTS
from hvbench.workloads.cpu_apps import PROGRAMS, QUICK_SCALE
from hvbench.workloads.dbench import parse_dbench
from hvbench.workloads.dd import parse_dd, rate_of
from hvbench.workloads.fio import parse_fio_json
from hvbench.workloads.iperf import parse_iperf_csv
from hvbench.workloads.iperf3 import parse_iperf3_json
from hvbench.workloads.kernbench import parse_build, summarise
from hvbench.workloads.latency import parse_sockperf
from hvbench.workloads.memory import METRICS, Memory, MemorySettings, memory_metric
from hvbench.workloads.migration import OPERATION_METRICS, dirtier, operation_metrics, parse_dirty
from hvbench.workloads.snapshot import METRICS as SNAPSHOT_METRICS

FIX = Path(__file__).parent / "fixtures"


class _NoBoot:
    name, boot = "native-0", None


class _Booted:
    name, boot = "qemu-0", BootPhases(kernel=0.2, init=1.5, ready=1.8)


class _MicroVmBooted:
    """A Firecracker or Cloud Hypervisor guest: the VMM's own phases besides."""

    name, boot = "fc-0", replace(_Booted.boot, api=0.01, start_to_init=1.2)


def memory_metrics() -> list[Metric]:
    """The memory workload's metrics as it makes them: on native ("not attributable") and,
    with a value, each of its table."""
    with native_instances(1) as (instances, network):
        (native,) = run_workload(Memory(MemorySettings(name="memory")), instances, network)
    return [*native.metrics, *(memory_metric(n, 1.0) for n in METRICS)]


def lifecycle_metrics() -> list[Metric]:
    """Migration and snapshot metrics as the workloads make them: every figure a platform may
    report, and hvbench-dirty's line from a short real run on the host."""
    proc = subprocess.Popen([str(dirtier()), "8", "4", "1000"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR1)
    time.sleep(0.2)
    proc.send_signal(signal.SIGUSR2)
    line = proc.communicate(timeout=10)[0]
    return [
        *operation_metrics("migration", dict.fromkeys(OPERATION_METRICS, 1.0), OPERATION_METRICS),
        *parse_dirty(line, "host"),
        *operation_metrics("snapshot", dict.fromkeys(SNAPSHOT_METRICS, 1.0), SNAPSHOT_METRICS),
    ]


def all_metrics() -> list[Metric]:
    text = lambda p: (FIX / p).read_text()  # noqa: E731
    time_line = parse_build(text("kernbench/subcmd.txt"))
    ctx = Context(network=None, quick=True, instance_count=1)  # type: ignore[arg-type]
    storm = GroupStart(2.5, {_Booted.name: _Booted.boot, "qemu-1": BootPhases(ready=2.1)}, failed=1)
    storm_ctx = Context(network=None, quick=True, instance_count=2, start=storm)  # type: ignore[arg-type]
    files = [
        "stress-ng/zlib.yaml",
        "stress-ng/matrix.yaml",
        "sysbench/memory.txt",
        "sysbench/cpu.txt",
    ]
    cpu = [
        Metric(p.metric, p.parse(text(f)), p.unit, True) for p, f in zip(PARTS, files, strict=True)
    ]
    apps = [
        Metric(p.metric,
               p.throughput(text(f"cpu-apps/{p.key}.txt"), 2,
                            p.job(p.size_at(QUICK_SCALE), QUICK_SCALE, 1))[0],
               p.unit, True)
        for p in PROGRAMS
    ]  # fmt: skip
    return [
        *cpu,
        *apps,
        *parse_bonnie_csv(text("bonnie++/ext4.csv")),
        *parse_fio_json(text("fio/two-jobs.json")),
        Metric(
            "disk.dd.write_mbps",
            rate_of([parse_dd(text("dd/gnu-write.txt"), "write")])[0],
            "MB/s",
            True,
            headline=True,
        ),
        Metric(
            "disk.dbench.throughput_mbps",
            parse_dbench(text("dbench/run.txt"), 2)[0],
            "MB/s",
            True,
            headline=True,
        ),
        *parse_iperf3_json(text("iperf3/in.json"), "in"),
        *parse_iperf3_json(text("iperf3/out.json"), "out"),
        parse_iperf_csv(text("iperf/out.csv"), "out", 5),
        *parse_sockperf(text("sockperf/pp.txt")),
        *summarise(time_line, [time_line, time_line]),
        *Boot(BootSettings(name="boot")).measure(_NoBoot(), ctx).metrics,  # type: ignore[arg-type]
        *Boot(BootSettings(name="boot")).measure(_Booted(), storm_ctx).metrics,  # type: ignore[arg-type]
        *Boot(BootSettings(name="boot")).measure(_MicroVmBooted(), ctx).metrics,  # type: ignore[arg-type]
        *memory_metrics(),
        *lifecycle_metrics(),
    ]


@pytest.mark.parametrize("metric", all_metrics(), ids=lambda m: m.name)
def test_metric_is_documented(metric: Metric):
    rows = [r for r in doc_rows() if r[0].match(metric.name)]
    assert rows, f"{metric.name} is not in docs/metrics.md"
    _, unit, direction, headline = rows[0]
    assert metric.headline == headline, f"{metric.name}: ★ in docs/metrics.md iff headline"
    if direction != "as above":
        assert unit == metric.unit, metric.name
        assert direction == ("↑" if metric.higher_is_better else "↓"), metric.name


def test_what_a_study_may_claim_is_the_table():
    """``metrics.PRODUCES``, against which a study's claims are checked when it loads, is
    docs/metrics.md's table: the same names with the same units and directions ("as above":
    None)."""
    from hvbench.metrics import PRODUCES

    text = METRICS_DOC.read_text().split("## The host")[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| (↑|↓|as above) \|", text, re.MULTILINE)
    declared = {f.name: (f.unit, f.higher_is_better) for facts in PRODUCES.values() for f in facts}
    as_above = lambda x: None if x.strip() == "as above" else x.strip()  # noqa: E731
    assert declared == {n: (as_above(u), {"↑": True, "↓": False}.get(d)) for n, u, d in rows}
