"""Report formats (Markdown, JSON lines, CSV) and ``hvbench report`` on hand-made runs."""

from __future__ import annotations

import csv
import html as html_lib
import io
import json
import math
import re

import numpy as np
import pytest
import typer
from builders import RunBuilder, host
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.verdict import verdicts
from hvbench.cli.reporting import report as report_cmd
from hvbench.drivers import driver_class
from hvbench.errors import HvbenchError
from hvbench.report import render
from hvbench.report.tables import warnings
from hvbench.store import Store, WhatRan


def test_markdown_has_the_seeds_tables(four_platforms):
    md = render(analyse(four_platforms, "latest"), "md")
    assert "### disk, 1 instance: % of native" in md
    assert "| e1000 | 70.0 [68.4–71.7] |" in md  # the wiki's "comparison to native"
    assert "| tcg | 59.0 [58.0–60.0] |" in md  # the paper's "% loss"
    assert "### kernbench, 1 instance: value / native" in md
    assert "| virtio | 1.087 [1.062–1.112] |" in md  # kernbench's elapsed / native (1 / 0.92)
    assert "asymmetric: outbound 30% lower" in md
    assert "h\\|<b>" in md  # a pipe from the host cannot break the table
    assert "tool: tool --flag <b>" in md  # the exact command, in a code block


def test_verdicts_in_plain_words(four_platforms):
    lines = verdicts(analyse(four_platforms, "latest"))
    assert (
        "disk (1 instance, disk.bonnie.block_kbps): virtio keeps 92.0% [89.9–94.2%] of native; "
        "e1000 70.0% [68.4–71.7%]; tcg 41.0% [40.0–42.0%]" in lines
    )
    # in and out: per repetition their geometric mean, e1000's sqrt(0.70 × 0.49) = 59%
    assert (
        "net (1 instance, geometric mean of 2 throughput metrics): virtio keeps 92.0% [89.9–94.2%] "
        "of native; e1000 58.6% [57.2–60.0%]; tcg 41.0% [40.0–42.0%]" in lines
    )
    assert "net direction: native, tcg, virtio are symmetric, e1000 loses 30% outbound" in lines
    # tcg: 41% of the throughput for 2×41% of the CPU -> per core half of the others'
    # throughput and host CPU move together here: the per-core figures have no spread, and
    # nobody said how finely they are measured, so no interval can be given (not [2.00–2.00×])
    same = "not tested (identical repetitions: resolution unknown)"
    assert (
        "net: host CPU per Gbit/s against native's (net.iperf3.inbound_gbps): "
        f"virtio 1.00×: {same}; e1000 1.00×: {same}; tcg 2.00×: {same}" in lines
    )


def _net_samples(b: RunBuilder, cell: int, busy: float) -> None:
    """Three repetitions of the same 10 Gbit/s, their host CPU busy ±2% around ``busy``."""
    for rep, n in enumerate([-0.02, 0.0, 0.02]):
        b.sample(
            cell, rep, {"net.x.inbound_gbps": [10.0]}, "Gbit/s", host_cpu=host(10, busy * (1 + n))
        )


def test_cost_is_against_the_baseline(tmp_path):
    """Every platform's host CPU for the same work is a multiple of the baseline's, also where
    another platform is cheaper than the baseline (a container's, here)."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    for platform, busy in (("native", 10.0), ("container", 8.0), ("tcg", 20.0)):
        cell = b.cell(platform, "net", driver="container" if platform == "container" else None)
        _net_samples(b, cell, busy)
    assert (
        "net: host CPU per Gbit/s against native's (net.x.inbound_gbps): "
        "container 0.80× [0.76–0.84×]; tcg 2.00× [1.91–2.10×]" in verdicts(analyse(s, "latest"))
    )


def test_cost_without_a_baseline_says_its_reference(tmp_path):
    """No baseline: the cheapest platform is the reference, and the line says why."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    for platform, busy in (("kvm", 10.0), ("tcg", 20.0)):
        cell = b.cell(platform, "net")
        _net_samples(b, cell, busy)
    a = analyse(s, "latest")
    assert a.baseline is None
    assert (
        "net: host CPU per Gbit/s against kvm's, the cheapest (no baseline) (net.x.inbound_gbps): "
        "tcg 2.00× [1.91–2.10×]" in verdicts(a)
    )


def test_verdicts_judge_the_headline_metrics_only(tmp_path):
    """A throughput the workload does not call its answer (fio's IO/s beside its MiB/s) stays
    out of the verdict, whatever it says."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    for platform, bw, iops in (("native", 100.0, 1000.0), ("kvm", 50.0, 1000.0)):
        cell = b.cell(platform, "disk")
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            b.sample(
                cell,
                rep,
                {"disk.fio.x_mibps": [bw * (1 + n)], "disk.fio.x_iops": [iops * (1 + n)]},
                headline={"disk.fio.x_mibps"},
            )
    a = analyse(s, "latest")
    assert {r.name for r in a.results if r.headline} == {"disk.fio.x_mibps"}
    assert (
        "disk (1 instance, disk.fio.x_mibps): kvm keeps 50.0% [48.8–51.2%] of native" in verdicts(a)
    )


def test_verdict_over_several_headline_times(tmp_path):
    """Several headline metrics where lower is better (kernbench's cold and warm times) are
    turned before their per-repetition geometric mean: twice the time is 50% of native."""
    s = Store(f"sqlite:///{tmp_path}/times.db")
    b = RunBuilder(s)
    names = {"kernbench.cold.elapsed_s", "kernbench.warm.elapsed_s"}
    for platform, f in (("native", 1.0), ("kvm", 2.0)):
        cell = b.cell(platform, "kernbench")
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            b.sample(cell, rep, {m: [60 * f * (1 + n)] for m in names}, "s", False, headline=names)
    line = next(v for v in verdicts(analyse(s, "latest")) if v.startswith("kernbench"))
    assert "kvm keeps 50.0% [" in line


def test_density_line_from_the_memory_figures(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    kinds = {"memory.overhead_mib": ("MiB", False), "memory.density_instances": ("count", True)}
    for platform, overhead, fit in (("tcg", 33.0, 92.0), ("uml", 8.0, 177.0)):
        cell = b.cell(platform, "memory")
        for rep in range(3):
            metrics = {"memory.overhead_mib": [overhead], "memory.density_instances": [fit]}
            b.sample(cell, rep, metrics, kinds=kinds, headline={"memory.overhead_mib"})
    b.sample(b.cell("container", "memory", driver="container"), 0, {"memory.overhead_mib": [None]})
    line = "density: instances of their size this host's memory fits: "
    line += "tcg 92 (33 MiB overhead each); uml 177 (8 MiB overhead each)"
    assert line in verdicts(analyse(s, "latest"))


def test_jsonl_one_sample_per_line(four_platforms):
    lines = render(analyse(four_platforms, "latest"), "json").splitlines()
    samples = 4 * 3 * 4  # platforms × repetitions × metrics
    matrix = 3 * 3  # the verdicts' cells: platforms but native × workloads
    assert len(lines) == samples + matrix
    assert {json.loads(x)["metric"] for x in lines[samples:]} == {"verdict"}
    first = json.loads(lines[0])
    assert set(first) >= {"metric", "value", "unit", "metadata", "timestamp"}
    assert first["metadata"]["platform"] == "native"
    assert first["metadata"]["instance"] == 0


def test_csv_has_every_statistic(four_platforms):
    rows = list(csv.DictReader(io.StringIO(render(analyse(four_platforms, "latest"), "csv"))))
    row = next(
        r
        for r in rows
        if r["platform"] == "e1000"
        and r["metric"] == "disk.bonnie.block_kbps"
        and r["view"] == "single"
    )
    assert float(row["pct_of_baseline"]) == pytest.approx(70)
    assert float(row["mean"]) == pytest.approx(58000 * 0.7)
    assert float(row["ci95_low"]) < float(row["mean"]) < float(row["ci95_high"])
    assert row["significant"] == "True"
    per_core = next(r for r in rows if r["platform"] == "tcg" and r["view"] == "per_core")
    assert float(per_core["host_cpu_vs_baseline"]) == pytest.approx(2.0, rel=0.01)


def test_report_command_writes_each_format(four_platforms, tmp_path):
    app = typer.Typer()
    app.command()(report_cmd)
    runner = CliRunner()
    for fmt in ("md", "json", "csv"):
        out = tmp_path / f"r.{fmt}"
        res = runner.invoke(
            app, ["latest", "--db", four_platforms.url, "--format", fmt, "-o", str(out)]
        )
        assert res.exit_code == 0, res.output
        assert out.stat().st_size > 100
    res = runner.invoke(app, ["nope", "--db", four_platforms.url])
    assert isinstance(res.exception, HvbenchError)


def test_every_format_renders_a_run_without_baseline_or_numbers(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/bare.db")
    b = RunBuilder(s, study_text="name: bare\nplatforms: {}\nworkloads: []\n")
    kvm, tcg = b.cell("kvm", "disk"), b.cell("tcg", "disk")
    b.sample(kvm, 0, {"disk.create_per_s": [None]})  # text only ("+++++")
    b.sample(tcg, 0, {"disk.x_mbps": [5.0]}, status="failed")
    a = analyse(s, "latest")
    assert a.baseline is None and a.results == []
    for fmt in ("md", "json", "csv", "html"):
        assert isinstance(render(a, fmt), str)
    b.sample(kvm, 1, {"disk.x_mbps": [10.0]})
    b.sample(tcg, 1, {"disk.x_mbps": [4.0]})
    a = analyse(s, "latest")
    md = render(a, "md")
    assert ": % of" not in md and "| kvm | 1 | 10.00 | +++++ |" in md  # no % of tables
    assert "<svg" in render(a, "html")


def test_report_of_a_run_without_cells_is_a_clear_error(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/empty.db")
    RunBuilder(s)
    with pytest.raises(HvbenchError, match="has no cells yet"):
        analyse(s, "latest")


def test_write_report_picks_the_format_from_the_suffix(four_platforms, tmp_path):
    from hvbench.report import write_report

    html = write_report(four_platforms, "latest", tmp_path / "out" / "report.html")
    assert html.read_text().startswith("<!DOCTYPE html>")
    md = write_report(four_platforms, "latest", tmp_path / "report.md")
    assert md.read_text().startswith("# hvbench report")
    with pytest.raises(HvbenchError, match="cannot write the report"):
        write_report(four_platforms, "latest", tmp_path / "report.md" / "x.html")


def test_strings_from_study_host_and_guest_are_escaped(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/evil.db")
    evil = "<img src=x onerror=alert(1)>"
    b = RunBuilder(
        s,
        study_text=f"name: x\nbaseline: native\ndescription: '{evil}'\n",
        inventory={"hostname": evil, "kernel": "</pre><script>alert(2)</script>"},
    )
    cell = b.cell("native", "disk", platform_settings={"note": evil})
    for rep in range(3):
        b.sample(cell, rep, {f"disk.{evil}": [1.0 + rep]})
    b.sample(cell, 5, {"disk.x": [1.0]}, status="failed")
    html = render(analyse(s, "latest"), "html")
    assert "<img" not in html and "alert(2)</script>" not in html
    assert html.count("<script>") == 2  # the report's own two scripts
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "tool: tool --flag &lt;b&gt;" in html


def test_metrics_measured_at_some_counts_only(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/counts.db")
    b = RunBuilder(s)
    one, two = b.cell("kvm", "net", 1), b.cell("kvm", "net", 2)
    for rep in range(3):
        b.sample(one, rep, {"net.a_gbps": [1.0 + rep], "net.only_one_gbps": [2.0]})
        b.sample(two, rep, {"net.a_gbps": [1.0 + rep, 1.5 + rep]})
    md = render(analyse(s, "latest"), "md")
    assert "### net, 2 instances: values" in md
    assert "net.only_one_gbps" in md.split("### net, 2 instances: values")[0]


def test_run_summary_is_the_matrix_of_verdicts(four_platforms):
    """What ``hvbench run`` ends with: each platform's headline % of native per workload (the
    verdict's figure), with its interval and reading; the tables are the report's."""
    from hvbench.report.summary import summarize

    s = summarize(analyse(four_platforms, "latest"))
    cells = {(m["label"], m["workload"]): m for m in s.as_json()["matrix"]}
    assert set(cells) == {(p, w) for p in ("virtio", "e1000", "tcg") for w in s.workloads}
    assert s.workloads == ["disk", "net", "kernbench"] and s.platforms == ["virtio", "e1000", "tcg"]
    disk = cells["virtio", "disk"]
    assert disk["reading"] == "loss" and disk["pct_of_baseline"] == pytest.approx(92)
    assert disk["ci_low"] < 92 < disk["ci_high"]
    # kernbench's elapsed time: % of native is native's time over the platform's
    assert cells["tcg", "kernbench"]["pct_of_baseline"] == pytest.approx(41)


def test_wide_tables_turn_metrics_into_rows(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/wide.db")
    b = RunBuilder(s)
    native, kvm = b.cell("native", "kernbench"), b.cell("kvm", "kernbench")
    names = [f"kernbench.warm.run{i}.elapsed_s" for i in range(1, 11)]
    for rep in range(3):
        b.sample(native, rep, {n: [50.0 + rep] for n in names}, "s", False, headline=set(names))
        b.sample(kvm, rep, {n: [100.0 + 2 * rep] for n in names}, "s", False, headline=set(names))
    md = render(analyse(s, "latest"), "md")
    assert "|  | native | kvm |" in md
    assert "| kernbench.warm.run10.elapsed_s | 100 | 50.0 [47.8–52.3] |" in md  # % of native


def test_statistics_per_cell(four_platforms):
    md = render(analyse(four_platforms, "latest"), "md")
    section = md.split("### disk: statistics per cell")[1].split("###")[0]
    # e1000: 40600 × (0.99, 1, 1.01): median 40600, sd 406, CV 1.0%
    assert "| e1000 | 1 | disk.bonnie.block_kbps | 3 | 40600 | 40600 | 406.0 | 1.0% |" in section


def test_one_repetition_is_not_tested(tmp_path):
    """A --quick run (one repetition) tests nothing: its verdict, tables and exports say so,
    never "no significant difference", and still show the figure."""
    s = Store(f"sqlite:///{tmp_path}/quick.db")
    b = RunBuilder(s)
    native, virtio, uml = b.cell("native", "disk"), b.cell("virtio", "disk"), b.cell("uml", "disk")
    b.sample(native, 0, {"disk.dd.read_mbps": [1000.0], "disk.dd.write_mbps": [800.0]})
    b.sample(virtio, 0, {"disk.dd.read_mbps": [110.0], "disk.dd.write_mbps": [88.0]})
    for rep in range(1, 3):  # the baseline with 3 repetitions, uml with 1: still not tested
        b.sample(native, rep, {"disk.dd.read_mbps": [1000.0 + rep], "disk.dd.write_mbps": [800.0]})
    b.sample(uml, 0, {"disk.dd.read_mbps": [500.0], "disk.dd.write_mbps": [400.0]})
    for platform, gbps in (("native", 9.0), ("virtio", 2.0)):
        b.sample(
            b.cell(platform, "net"),
            0,
            {"net.iperf3.inbound_gbps": [gbps], "net.iperf3.outbound_gbps": [gbps / 2]},
            "Gbit/s",
            host_cpu=host(10, 10.0),
        )
    a = analyse(s, "latest")
    lines = verdicts(a)
    line = next(v for v in lines if v.startswith("disk"))
    assert "virtio 11.0%: not tested (1 repetition)" in line
    assert "uml 50.0%: not tested (1 repetition)" in line
    assert "virtio loses 50% outbound, not tested (1 repetition)" in "\n".join(lines)
    cost = next(v for v in lines if v.startswith("net: host CPU"))
    assert cost.endswith("not tested (1 repetition)")
    md = render(a, "md")
    assert "no significant difference" not in md
    assert "| virtio | 11.0, not tested (1 repetition) | 11.0, not tested (1 repetition) |" in md
    rows = list(csv.DictReader(io.StringIO(render(a, "csv"))))
    row = next(r for r in rows if r["platform"] == "virtio" and r["view"] == "single")
    assert row["vs_baseline"] == "not tested" and row["pct_of_baseline_ci_low"] == ""
    assert float(row["pct_of_baseline"]) == pytest.approx(11, rel=0.01)
    meta = [json.loads(x)["metadata"] for x in render(a, "json").splitlines()]
    virtio_meta = next(m for m in meta if m["platform"] == "virtio")
    assert virtio_meta["vs_baseline"] == "not tested"
    assert virtio_meta["pct_of_baseline_ci_low"] is None and virtio_meta["n"] == 1


def test_equivalent_inconclusive_and_loss(tmp_path):
    """ "no significant difference" only when the interval lies within ±5% of native; an interval
    that holds 100 but reaches further is inconclusive, with its bounds."""
    s = Store(f"sqlite:///{tmp_path}/three.db")
    b = RunBuilder(s)
    series = {
        "native": [100.0, 100.5, 99.5],
        "same": [100.2, 99.8, 100.1],  # within ±1%: equivalent
        "unsure": [92.0, 97.0, 102.0],  # mean 97, CV 5%: the interval reaches beyond −5%
        "slow": [80.0, 80.5, 79.5],
    }
    for platform, values in series.items():
        b.series(b.cell(platform, "disk"), "disk.x_mbps", values)
    a = analyse(s, "latest")
    same = a.result("same", "disk", "disk.x_mbps", 1).vs_baseline
    unsure = a.result("unsure", "disk", "disk.x_mbps", 1).vs_baseline
    assert same.reading() == "no significant difference" and 95 < same.pct_low < 100
    assert unsure.reading() == "inconclusive" and unsure.pct_low < 95 and unsure.pct_high > 100
    line = next(v for v in verdicts(a) if v.startswith("disk"))
    low, high = math.floor(unsure.pct_low - 100), math.ceil(unsure.pct_high - 100)  # outward
    assert f"unsure: inconclusive: between −{-low}% and +{high}%" in line
    assert "same 100.0% [" in line and "]: no significant difference (within ±5%)" in line
    assert "slow keeps 80.0% [" in line
    md = render(a, "md")
    table = md.split("### disk, 1 instance: % of native")[1].split("###")[0]
    assert "| same | 100.0 [" in table and "]† |" in table
    assert "| unsure | 97 [" in table and "]‡ |" in table
    assert "† no significant difference: the interval lies within ±5%" in table
    assert "‡ inconclusive" in table and "Fieller" in table


def test_bar_whiskers_are_the_ratio_interval(tmp_path):
    """The plots' whiskers are Fieller's interval of % of native: with a noisy native and a
    quiet platform, far wider than the platform's own interval divided by native's mean (the
    old whiskers, which left native's noise out); the baseline's own bar has none."""
    from hvbench.report.plots import _relative

    s = Store(f"sqlite:///{tmp_path}/whiskers.db")
    b = RunBuilder(s)
    b.series(b.cell("native", "disk"), "disk.x_mbps", [90.0, 100.0, 110.0])
    b.series(b.cell("kvm", "disk"), "disk.x_mbps", [50.0, 50.05, 49.95])
    a = analyse(s, "latest")
    r = a.result("kvm", "disk", "disk.x_mbps", 1)
    height, below, above, label = _relative(r, relative=True)
    v = r.vs_baseline
    assert (height - below, height + above) == pytest.approx((v.pct_low, v.pct_high))
    assert label == "" and height == pytest.approx(50)
    old = 100 * (r.single.ci_high - r.single.ci_low) / 100
    assert v.pct_high - v.pct_low > 10 * old
    assert _relative(a.result("native", "disk", "disk.x_mbps", 1), True)[1:] == (0, 0, "")


QEMU_TCG = {
    "accel": "auto",
    "disk": {"cache": "none"},
    "resolved": {"accel": "tcg", "accel_reason": "no /dev/kvm on this host"},
}
FELL_BACK = WhatRan("tcg", ("kvm", "tcg"), "no /dev/kvm on this host")
"""What the qemu driver writes it ran with QEMU_TCG."""


def ran_by(driver: str, settings: dict) -> WhatRan:
    """What a driver writes it ran with these settings, before it decided anything more."""
    cls = driver_class({"driver": driver, **settings})
    return cls.ran_by_settings(cls.settings_model(driver=driver, **settings))


@pytest.fixture
def fell_back(tmp_path) -> Store:
    """kvm-virtio with accel: auto that ran under TCG at 16% of native, beside native."""
    s = Store(f"sqlite:///{tmp_path}/fell-back.db")
    b = RunBuilder(s)
    native = b.cell("native", "net")
    kvm = b.cell("kvm-virtio", "net", platform_settings=QEMU_TCG, ran=FELL_BACK)
    for rep, n in enumerate([-0.01, 0.0, 0.01]):
        for cell, f in ((native, 1.0), (kvm, 0.16)):
            b.sample(cell, rep, {"net.iperf3.inbound_gbps": [10 * f * (1 + n)]}, "Gbit/s")
    return s


def test_every_format_names_the_accelerator_that_ran(fell_back):
    a = analyse(fell_back, "latest")
    assert a.label("kvm-virtio") == "kvm-virtio [tcg]" and a.label("native") == "native"
    lines = verdicts(a)
    assert lines[0] == "kvm-virtio [tcg]: accel auto chose tcg: no /dev/kvm on this host"
    assert (
        "net (1 instance, net.iperf3.inbound_gbps): kvm-virtio [tcg] keeps 16.0% [15.6–16.4%] "
        "of native" in (lines)
    )
    md = render(a, "md")
    assert "| kvm-virtio [tcg] | 16.0 [15.6–16.4] |" in md  # % of native
    assert "| kvm-virtio |" not in md
    rows = [json.loads(line)["metadata"] for line in render(a, "json").splitlines()]
    kvm = next(m for m in rows if m["platform"] == "kvm-virtio")
    assert kvm["accel"] == "tcg" and kvm["label"] == "kvm-virtio [tcg]"
    assert kvm["platform_settings"] == {
        "driver": "qemu",
        "accel": "auto",
        "disk": {"cache": "none"},
    }
    assert next(m for m in rows if m["platform"] == "native")["accel"] is None
    table = list(csv.DictReader(io.StringIO(render(a, "csv"))))
    row = next(r for r in table if r["platform"] == "kvm-virtio")
    assert (row["accel"], row["label"]) == ("tcg", "kvm-virtio [tcg]")
    assert json.loads(row["platform_settings"])["accel"] == "auto"
    html = render(a, "html")
    assert "kvm-virtio [tcg]</text>" in html  # the bars' legend, as SVG text
    assert "kvm-virtio [tcg]</td>" in html


def test_run_summary_names_the_accelerator(fell_back):
    """The matrix's rows are the platforms as they ran, printed as written (rich would read
    "[tcg]" as markup)."""
    from rich.console import Console

    from hvbench.report.summary import print_summary, summarize

    s = summarize(analyse(fell_back, "latest"))
    (cell,) = s.as_json()["matrix"]
    assert cell["label"] == "kvm-virtio [tcg]" and cell["pct_of_baseline"] == pytest.approx(16)
    out = io.StringIO()
    print_summary(Console(file=out, width=80), s, "hvbench report run-a")
    assert "kvm-virtio [tcg]" in out.getvalue()


def test_pct_tables_carry_headline_metrics_and_costs_are_per_unit_of_work(tmp_path):
    """Retransmits and %CPU beside a throughput stay in the detail tables; the cost of the
    throughput is host CPU-seconds per Gbit."""
    from hvbench.report.tables import cost_table, pct_table, values_table

    s = Store(f"sqlite:///{tmp_path}/side.db")
    b = RunBuilder(s)
    kinds = {"net.iperf3.inbound_retransmits": ("count", False), "net.iperf3.cpu_pct": ("%", False)}
    for platform, f, busy in (("native", 1.0, 10.0), ("kvm", 0.5, 20.0)):
        cell = b.cell(platform, "net")
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            metrics = {
                "net.iperf3.inbound_gbps": [10 * f * (1 + n)],
                "net.iperf3.inbound_retransmits": [1 + 368 * (1 - f) + rep],
                "net.iperf3.cpu_pct": [20 / f + rep],
            }
            b.sample(
                cell,
                rep,
                metrics,
                "Gbit/s",
                kinds=kinds,
                headline={"net.iperf3.inbound_gbps"},
                host_cpu=host(10, busy * (1 + n)),
            )
    a = analyse(s, "latest")
    pct = pct_table(a, "net", 1)
    assert pct.columns == ["platform", "net.iperf3.inbound_gbps"]
    assert pct.rows[1] == ["kvm", "50.0 [48.8–51.2]"]
    assert any("retransmits" in c for c in values_table(a, "net", 1).columns)
    cost = cost_table(a)
    assert [row[1] for row in cost.rows] == ["net.iperf3.inbound_gbps"] * 2
    # kvm: 2 host cores busy (20 CPU-s in 10 s) for 5 Gbit/s: 0.4 CPU-s per Gbit, 4× native's
    kvm = next(row for row in cost.rows if row[2] == "kvm")
    # throughput and host CPU move together: no spread, and no resolution to bound it by
    assert kvm[4] == "0.400 host CPU-s per Gbit, identical repetitions: resolution unknown"
    assert kvm[5] == "4.00×: not tested (identical repetitions: resolution unknown)"


def test_disk_figures_above_native_are_flagged_not_won(tmp_path):
    """uml's dd read at 337% (ubd has no O_DIRECT) is put down to the host page cache and left
    out of the verdict, in the tables too; a cache=none disk significantly above native is
    suspect; at one repetition, only a known cache is named."""
    from hvbench.report.tables import pct_table

    s = Store(f"sqlite:///{tmp_path}/cached.db")
    b = RunBuilder(s, inventory={"cores_logical": 2})
    headline = {"disk.dd.read_mbps", "disk.dd.write_mbps"}
    platforms = {
        "native": ("native", {}, 1.0, 1.0),
        "uml": ("uml", {"disk": {"sync": False}}, 3.37, 0.8),
        "direct": ("qemu", {"accel": "kvm", "disk": {"cache": "none"}}, 1.3, 0.9),
        "same": ("qemu", {"accel": "kvm", "disk": {"cache": "writeback"}}, 1.001, 0.9),
    }
    for platform, (driver, settings, read, write) in platforms.items():
        ran = ran_by(driver, settings)
        cell = b.cell(platform, "disk", driver=driver, platform_settings=settings, ran=ran)
        for rep, n in enumerate([-0.01, 0.0, 0.01] if platform != "same" else [-0.05, 0, 0.05]):
            metrics = {
                "disk.dd.read_mbps": [500 * read * (1 + n)],
                "disk.dd.write_mbps": [400 * write * (1 + n)],
            }
            b.sample(cell, rep, metrics, headline=headline)
    a = analyse(s, "latest")
    uml = a.result("uml", "disk", "disk.dd.read_mbps", 1)
    assert uml.suspect == "likely the host page cache: UML's ubd has no O_DIRECT"
    assert a.result("uml", "disk", "disk.dd.write_mbps", 1).suspect is None
    assert a.result("direct", "disk", "disk.dd.read_mbps", 1).suspect.startswith("suspect")
    assert a.result("same", "disk", "disk.dd.read_mbps", 1).suspect is None  # within noise
    lines = verdicts(a)
    keeps = next(line for line in lines if line.startswith("disk (1 instance"))
    assert (
        "uml keeps 80.0% [78.2–81.9%] of native" in keeps
    )  # the write alone: the read is not a win
    above = next(line for line in lines if line.startswith("disk above native"))
    assert "uml disk.dd.read_mbps 337% (likely the host page cache" in above
    assert "direct [kvm] disk.dd.read_mbps 130% (suspect" in above
    pct = pct_table(a, "disk", 1)
    read = pct.columns.index("disk.dd.read_mbps")
    assert next(r for r in pct.rows if r[0] == "uml")[read] == "337 [329–345]§"
    assert any(n.startswith("§ uml: above native, not a win: likely") for n in pct.notes)

    one = Store(f"sqlite:///{tmp_path}/one.db")
    b = RunBuilder(one)
    for platform, (driver, settings, read, write) in platforms.items():
        ran = ran_by(driver, settings)
        cell = b.cell(platform, "disk", driver=driver, platform_settings=settings, ran=ran)
        metrics = {"disk.dd.read_mbps": [500 * read], "disk.dd.write_mbps": [400 * write]}
        b.sample(cell, 0, metrics, headline=headline)
    a = analyse(one, "latest")
    assert a.result("uml", "disk", "disk.dd.read_mbps", 1).suspect.startswith("likely the host")
    assert a.result("direct", "disk", "disk.dd.read_mbps", 1).suspect is None  # nothing tested


def test_a_driver_the_analysis_never_heard_of_is_reported_by_what_it_wrote(tmp_path):
    """What ran is what the driver wrote (``WhatRan``), never its name: a new driver's
    accelerator names its platform, its disk cache explains a read above native, and with no
    baseline in the study the platform it calls the host itself is the baseline."""
    s = Store(f"sqlite:///{tmp_path}/new.db")
    b = RunBuilder(s, study_text="name: new\nplatforms: {}\nworkloads: []\n")
    cache = "the new VMM's block device reads through the host page cache"
    platforms = {
        "host": ("bare-metal-runner", WhatRan(bare=True), 1.0),
        "vmm-kvm": ("new-vmm", WhatRan("tcg", ("kvm", "tcg"), disk_cache=cache), 3.0),
    }
    for platform, (driver, ran, read) in platforms.items():
        cell = b.cell(platform, "disk", driver=driver, ran=ran)
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            metrics = {"disk.dd.read_mbps": [500 * read * (1 + n)]}
            b.sample(cell, rep, metrics, headline={"disk.dd.read_mbps"})
    a = analyse(s, "latest")
    assert a.baseline == "host"
    assert a.label("vmm-kvm") == "vmm-kvm [tcg]" and a.ran["vmm-kvm"] == "tcg"
    result = a.result("vmm-kvm", "disk", "disk.dd.read_mbps", 1)
    assert result.suspect == f"likely the host page cache: {cache}"


def test_a_disk_figure_above_native_is_never_left_to_read_as_a_gain(tmp_path):
    """A/A: three platforms identical to native (CV 3%, 3 repetitions, read and write: 6 disk
    figures a run). Called suspect on an uncorrected p < 0.05, 7.3% of runs had one; past Holm's
    step-down and a 5% threshold, 0.7%, but 8–9% of runs printed a figure whose interval lay
    above native unmarked, as a gain. Now Holm's step-down over the run's disk figures alone
    decides "suspect" (1.1% of 2000 runs, within its 2.5% a side), and every other figure whose
    interval lies above native says it holds only before that correction (8.5% of runs); none
    is left unmarked. With a host writeback cache, the page cache is named: an emulated disk
    read at 130% of native."""
    from hvbench.analysis.normalize import normalize
    from hvbench.analysis.platforms import above_baseline

    s = Store(f"sqlite:///{tmp_path}/aa.db")
    b = RunBuilder(s)
    caches = {"native": None, "q1": "none", "q2": "none", "q3": "none", "wb": "writeback"}
    for p, cache in caches.items():
        driver, settings = ("native", {}) if cache is None else ("qemu", {"disk": {"cache": cache}})
        cell = b.cell(
            p, "disk", driver=driver, platform_settings=settings, ran=ran_by(driver, settings)
        )
        b.sample(cell, 0, {"disk.dd.read_mbps": [1.0]})
    cells = {c.platform: c for c in analyse(s, "latest").cells}
    rng = np.random.default_rng(71)
    runs, unmarked, suspect, before = 2000, 0, 0, 0
    for _ in range(runs):
        x = rng.normal(1, 0.03, (4, 2, 3)) * np.array([[500], [400]])
        figures = {
            (p, m): (cells[p], True, normalize(x[i + 1, m], x[0, m], True))
            for i, p in enumerate(("q1", "q2", "q3"))
            for m in range(2)
        }
        said = above_baseline(figures)
        unmarked += any(v.pct_low > 100 and k not in said for k, (_, _, v) in figures.items())
        suspect += any(why.startswith("suspect") for why in said.values())
        before += any("before Holm's step-down over the run's 6" in why for why in said.values())
    assert unmarked == 0
    assert suspect / runs <= 0.025 and 0.04 <= before / runs <= 0.1, (suspect, before)
    read = rng.normal(1, 0.03, (2, 3)) * np.array([[500], [650]])
    said = above_baseline({"wb": (cells["wb"], True, normalize(read[1], read[0], True))})
    assert said == {"wb": "likely the host page cache: QEMU disk cache=writeback"}


def test_aggregate_loss_of_n_instances_against_the_bare_host(tmp_path):
    """The paper's "% loss" at N VMs: the N guests' summed throughput against the bare host's
    at the nearest count below (native ran once, with a copy per core), not one guest against
    one native instance."""
    from hvbench.report.tables import workload_tables

    s = Store(f"sqlite:///{tmp_path}/agg.db")
    b = RunBuilder(s)
    native, one, two = b.cell("native", "cpu"), b.cell("kvm", "cpu"), b.cell("kvm", "cpu", 2)
    for rep, n in enumerate([-0.01, 0.0, 0.01]):
        b.sample(native, rep, {"cpu.score": [200 * (1 + n)]}, "ops/s", headline={"cpu.score"})
        b.sample(one, rep, {"cpu.score": [98 * (1 + n)]}, "ops/s", headline={"cpu.score"})
        b.sample(two, rep, {"cpu.score": [95 * (1 + n)] * 2}, "ops/s", headline={"cpu.score"})
    tables = {t.title: t for t in workload_tables(analyse(s, "latest"), "cpu")}
    assert "cpu, 1 instance: aggregate % loss from native" not in tables  # one is the single
    agg = tables["cpu, 2 instances: aggregate % loss from native"]
    (row,) = [r for r in agg.rows if r[0] == "kvm"]
    assert float(row[1].split()[0]) == pytest.approx(5.0, abs=0.01)  # 2 × 95 against 200
    single = tables["cpu, 2 instances: % loss from native"]
    (row,) = [r for r in single.rows if r[0] == "kvm"]
    assert float(row[1].split()[0]) == pytest.approx(52.5, abs=0.01)  # one guest against 200


def test_report_reads_verdict_results_then_warnings(tmp_path):
    """The HTML and Markdown reports open with a line that counts the warnings and links to
    them, then the verdict and the results; the warnings come after, all of them."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    for platform, values in (("native", [100, 101, 99, 100, 100]), ("kvm", [80, 81, 79, 80, 130])):
        cell = b.cell(platform, "disk")
        for rep, v in enumerate(values):
            b.sample(cell, rep, {"disk.x": [v]}, headline={"disk.x"})
    b.sample(cell, 9, {"disk.x": [1.0]}, status="failed")
    a = analyse(s, "latest")
    found = warnings(a)
    assert found.noise is not None and len(found.noise.rows) == 1
    assert found.lines == ["kvm / disk / 1 inst.: repetition 9 failed: guest crashed"]
    assert found.summary() == "warnings: 1 noisy figure, 1 other warning"
    html = render(a, "html")
    sections = re.findall(r'<h2 id="([^"]+)"', html)
    assert sections.index("verdict") < sections.index("w-1") < sections.index("warnings")
    assert sections[sections.index("warnings") :] == ["warnings", "provenance"]
    top = html.index('<p class="warnings-count">')
    assert top < html.index('<h2 id="verdict">')
    assert f'<a href="#warnings">{found.summary()}</a>' in html
    assert all(html_lib.escape(w, quote=False) in html for w in found.lines)
    md = render(a, "md")
    assert md.index(f"[{found.summary()}](#warnings)") < md.index("## Verdict")
    assert md.index("## Verdict") < md.index("## Tables") < md.index("## Warnings")
    assert all(_md_line(w) in md.split("## Warnings")[1] for w in found.lines)


def _md_line(line: str) -> str:
    return "- " + line.replace("|", "\\|")


def test_plots_are_in_their_units_and_whiskers_within_the_domain(tmp_path):
    """Bars of figures with no baseline to set them against (native does not boot) are drawn
    in their units, one axes a unit; a time's whisker stops at 0 however far below its
    interval reaches (uml: one slow boot of three)."""
    from hvbench.report.plots import _relative, bars
    from hvbench.workloads.boot import NO_BOOT

    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s)
    boots = {"native": [None] * 3, "kvm": [1.0, 1.1, 0.9], "uml": [0.5, 8.0, 0.3]}
    for platform, ready in boots.items():
        cell = b.cell(platform, "boot")
        for rep, v in enumerate(ready):
            b.sample(
                cell,
                rep,
                {"boot.ready_s": [v], "boot.rss_mib": [None if v is None else 300.0 + rep]},
                kinds={"boot.ready_s": ("s", False), "boot.rss_mib": ("MiB", False)},
                headline={"boot.ready_s", "boot.rss_mib"},
                missing=NO_BOOT,
            )
    a = analyse(s, "latest")
    svg = bars(a, "boot", 1)
    assert svg is not None and "own units" not in svg
    assert ">mean (s)</text>" in svg and ">mean (MiB)</text>" in svg  # each axis in its unit
    r = a.result("uml", "boot", "boot.ready_s", 1)
    assert r is not None
    drawn = _relative(r, False)
    assert drawn is not None
    height, below, _, _ = drawn
    assert height - below == pytest.approx(max(r.single.ci_low, 0.0))
