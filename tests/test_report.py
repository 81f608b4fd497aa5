"""Report formats (Markdown, JSON lines, CSV) and ``hvbench report`` on hand-made runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
import typer
from test_analysis import RunBuilder, host
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.verdict import verdicts
from hvbench.cli.reporting import report as report_cmd
from hvbench.errors import HvbenchError
from hvbench.report import render
from hvbench.store import Store


@pytest.fixture
def store(tmp_path) -> Store:
    """native, virtio (92%), e1000 (70%, outbound 30% lower), tcg (41%, host CPU 2×)."""
    s = Store(f"sqlite:///{tmp_path}/results.db")
    b = RunBuilder(s, inventory={"cores_logical": 2, "hostname": "h|<b>"})
    factors = {"native": 1.0, "virtio": 0.92, "e1000": 0.70, "tcg": 0.41}
    for platform, f in factors.items():
        disk, net = b.cell(platform, "disk"), b.cell(platform, "net")
        kern = b.cell(platform, "kernbench")
        for rep, n in enumerate([-0.01, 0.0, 0.01]):
            busy = 10.0 if platform != "tcg" else 20.0
            b.sample(disk, rep, {"disk.bonnie.block_kbps": [58000 * f * (1 + n)]}, "KB/s")
            out = 0.7 if platform == "e1000" else 1.0
            b.sample(
                net,
                rep,
                {
                    "net.iperf3.inbound_gbps": [10 * f * (1 + n)],
                    "net.iperf3.outbound_gbps": [10 * f * out * (1 + n)],
                },
                "Gbit/s",
                host_cpu=host(10, busy * f * (1 + n)),
            )
            b.sample(kern, rep, {"kernbench.elapsed_s": [54 / f * (1 + n)]}, "s", False)
    return s


def test_markdown_has_the_seeds_tables(store):
    md = render(analyse(store, "latest"), "md")
    assert "### disk, 1 instance: % of native" in md
    assert "| e1000 | 70 |" in md  # the wiki's "comparison to native"
    assert "| tcg | 59.00 |" in md  # the paper's "% loss"
    assert "### kernbench, 1 instance: value / native" in md
    assert "| virtio | 1.09 |" in md  # kernbench's elapsed / native (1 / 0.92)
    assert "asymmetric: outbound 30% lower" in md
    assert "h\\|<b>" in md  # a pipe from the host cannot break the table
    assert "tool: tool --flag <b>" in md  # the exact command, in a code block


def test_verdicts_in_plain_words(store):
    lines = verdicts(analyse(store, "latest"))
    assert (
        "disk (1 instance, disk.bonnie.block_kbps): virtio keeps 92% of native; e1000 70%; tcg 41%"
        in lines
    )
    assert "net direction: native, tcg, virtio are symmetric, e1000 loses 30% outbound" in lines
    # tcg: 41% of the throughput for 2×41% of the CPU -> per core half of the others'
    cost = next(line for line in lines if line.startswith("net: the same"))
    assert cost.startswith("net: the same Gbit/s costs tcg 2.0× the host CPU of")


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
    assert "disk (1 instance, disk.fio.x_mibps): kvm keeps 50% of native" in verdicts(a)


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


def test_jsonl_one_sample_per_line(store):
    lines = render(analyse(store, "latest"), "json").splitlines()
    assert len(lines) == 4 * 3 * 4  # platforms × repetitions × metrics
    first = json.loads(lines[0])
    assert set(first) >= {"metric", "value", "unit", "metadata", "timestamp"}
    assert first["metadata"]["platform"] == "native"
    assert first["metadata"]["instance"] == 0


def test_csv_has_every_statistic(store):
    rows = list(csv.DictReader(io.StringIO(render(analyse(store, "latest"), "csv"))))
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


def test_report_command_writes_each_format(store, tmp_path):
    app = typer.Typer()
    app.command()(report_cmd)
    runner = CliRunner()
    for fmt in ("md", "json", "csv"):
        out = tmp_path / f"r.{fmt}"
        res = runner.invoke(app, ["latest", "--db", store.url, "--format", fmt, "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert out.stat().st_size > 100
    res = runner.invoke(app, ["nope", "--db", store.url])
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


def test_write_report_picks_the_format_from_the_suffix(store, tmp_path):
    from hvbench.report import write_report

    html = write_report(store, "latest", tmp_path / "out" / "report.html")
    assert html.read_text().startswith("<!DOCTYPE html>")
    md = write_report(store, "latest", tmp_path / "report.md")
    assert md.read_text().startswith("# hvbench report")
    with pytest.raises(HvbenchError, match="cannot write the report"):
        write_report(store, "latest", tmp_path / "report.md" / "x.html")


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


def test_run_summary_has_verdicts_and_pct_tables(store):
    from hvbench.report.markdown import render_summary

    text = render_summary(analyse(store, "latest"))
    assert text.startswith("- disk (1 instance, disk.bonnie.block_kbps): virtio keeps 92% of")
    assert "### net, 1 instance: % of native" in text and "values" not in text


def test_wide_tables_turn_metrics_into_rows(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/wide.db")
    b = RunBuilder(s)
    native, kvm = b.cell("native", "kernbench"), b.cell("kvm", "kernbench")
    names = [f"kernbench.warm.run{i}.elapsed_s" for i in range(1, 11)]
    for rep in range(3):
        b.sample(native, rep, {n: [50.0 + rep] for n in names}, "s", False)
        b.sample(kvm, rep, {n: [100.0 + 2 * rep] for n in names}, "s", False)
    md = render(analyse(s, "latest"), "md")
    assert "|  | native | kvm |" in md
    assert "| kernbench.warm.run10.elapsed_s | 100 | 50 |" in md  # % of native


def test_statistics_per_cell(store):
    md = render(analyse(store, "latest"), "md")
    section = md.split("### disk: statistics per cell")[1].split("###")[0]
    # e1000: 40600 × (0.99, 1, 1.01): median 40600, sd 406, CV 1.0%
    assert "| e1000 | 1 | disk.bonnie.block_kbps | 3 | 40600 | 40600 | 406.0 | 1.0% |" in section
