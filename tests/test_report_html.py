"""The HTML report in a real headless browser (Debian's chromium): it renders, shows its plots,
logs no console error, and loads nothing from the network."""

from __future__ import annotations

import html as html_lib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import require
from PIL import Image
from test_analysis import RunBuilder, host
from test_report import store  # noqa: F401 (the hand-made run, as a fixture)

from hvbench.analysis import analyse
from hvbench.analysis.compare import compare
from hvbench.host.process import run_bounded
from hvbench.report import render, render_comparison
from hvbench.report.plots import COLORS, RC
from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium() -> None:
    require(shutil.which("chromium") is not None, "chromium (apt-get install chromium)")


CONSOLE = re.compile(r"CONSOLE|Uncaught|SyntaxError|TypeError|ReferenceError")


def chromium(tmp_path: Path, page: Path | str, *args: str) -> tuple[str, str]:
    """Run headless chromium on a local file (or a URL); (stdout, stderr)."""
    argv = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        *args,
        page if isinstance(page, str) else page.as_uri(),
    ]
    result = run_bounded(argv, timeout=120)
    assert result.ok, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def test_console_error_detection_works(tmp_path):
    """The check below would see a broken report: a thrown error and a console.error."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom');"
        "window.addEventListener('error', e => document.documentElement.dataset.errors = "
        "e.message);</script><script>undefinedFunction();</script></body></html>"
    )
    dom, stderr = chromium(tmp_path, page, "--dump-dom")
    assert console_errors(stderr)
    assert "data-errors" in dom


def test_html_renders_with_plots_and_no_console_error(store, tmp_path):  # noqa: F811
    html = render(analyse(store, "latest"), "html")
    # self-contained: nothing to fetch (the SVG namespace URI is a name, not a request)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert "h|&lt;b&gt;" in html and "h|<b>" not in html  # the host's name is escaped
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")

    dom, stderr = chromium(tmp_path, page, "--dump-dom")
    assert console_errors(stderr) == []
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-ready="1"' in root and "data-errors" not in root
    plots = int(re.search(r'data-plots="(\d+)"', root).group(1))
    # bars for disk, net and kernbench, the inbound/outbound pairs, the host CPU split (no
    # scaling lines: this run has one instance count)
    assert plots == 5
    assert dom.count("<svg") == plots

    # HVBENCH_SCREENSHOT=path keeps the screenshot (to look at it, or as a CI artifact)
    shot = Path(os.environ.get("HVBENCH_SCREENSHOT", tmp_path / "report.png"))
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,2400")
    image = Image.open(shot).convert("RGB")
    colors = {c for _, c in image.getcolors(maxcolors=1 << 20)}
    # the platforms' bar colours are painted (plots are drawn, not just present in the DOM)
    for hex_color in COLORS[:4]:
        rgb = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in colors, hex_color


def test_comparison_html_renders(store, tmp_path):  # noqa: F811
    a = analyse(store, "latest")
    page = tmp_path / "compare.html"
    page.write_text(render_comparison(compare(a, a), "html"), encoding="utf-8")
    dom, stderr = chromium(tmp_path, page, "--dump-dom")
    assert console_errors(stderr) == []
    assert "pass: no regression" in dom


LAYOUT = """<script>
/* The test's own: where texts of a figure overprint each other, and figures narrower than the
   column, as this browser lays them out (rotated labels are checked by their angle instead). */
(function () {
  var body = getComputedStyle(document.body);
  var column = document.body.clientWidth - parseFloat(body.paddingLeft)
    - parseFloat(body.paddingRight);
  var overlaps = [], narrow = [];
  document.querySelectorAll("figure.plot svg").forEach(function (svg, k) {
    var width = svg.getBoundingClientRect().width;
    if (width < 0.95 * column) {
      narrow.push(k + ": " + Math.round(width) + " of " + Math.round(column));
    }
    var boxes = [];
    svg.querySelectorAll("text").forEach(function (t) {
      var turn = /rotate\\((-?[0-9.]+)/.exec(t.getAttribute("transform") || "");
      if (turn && parseFloat(turn[1]) !== 0) { return; }
      if (t.textContent.trim()) { boxes.push([t.getBoundingClientRect(), t.textContent]); }
    });
    for (var i = 0; i < boxes.length; i++) {
      for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i][0], b = boxes[j][0];
        var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 1 && h > 2) { overlaps.push(k + ": " + boxes[i][1] + " | " + boxes[j][1]); }
      }
    }
  });
  document.documentElement.dataset.overlaps = JSON.stringify(overlaps);
  document.documentElement.dataset.narrow = JSON.stringify(narrow);
})();
</script>"""
WIDTH = 1400


def layout(tmp_path: Path, html: str, name: str) -> tuple[list[str], list[str], Path]:
    """The report at ``WIDTH`` px in Chromium: (texts overprinting each other in a figure,
    figures narrower than the column) after no console error; and the page with the check."""
    page = tmp_path / f"{name}.html"
    page.write_text(html.replace("</body>", LAYOUT + "</body>"), encoding="utf-8")
    dom, stderr = chromium(tmp_path, page, "--dump-dom", f"--window-size={WIDTH},3000")
    assert console_errors(stderr) == []
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-ready="1"' in root and "data-errors" not in root

    def read(name: str) -> list[str]:
        found = re.search(rf"data-{name}=\"([^\"]*)\"", root).group(1)
        return json.loads(html_lib.unescape(found))

    return read("overlaps"), read("narrow"), page


CONSOLIDATION = "consolidation 4×[web:1,app:1,db:1,imap:1] web=50/s,app=10/s,db=20/s,imap=5/s"


def test_layout_check_sees_overprinting_and_narrow_figures(tmp_path):
    """The check below would see the faults it looks for, in a figure of the old layout."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(5, 3))
        ax = fig.add_subplot()
        ax.bar(range(4), [1, 2, 3, 4])
        ax.set_xticks(range(4), [CONSOLIDATION] * 4)
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()[buf.getvalue().index("<svg") :]
    html = (
        "<!DOCTYPE html><html><body style='max-width:1250px;padding:0 2rem'>"
        f"<figure class='plot'>{svg}</figure><script>document.documentElement.dataset.ready"
        " = '1';</script></body></html>"
    )
    overlaps, narrow, _ = layout(tmp_path, html, "old")
    assert overlaps and narrow


def test_report_plots_fit_the_page_in_chromium(tmp_path):
    """A real run (two native platforms, one under a long name, the cpu micro suite) and a
    hand-made one with consolidation's long workload name: at 1400 px no legend over a title,
    no labels overprinting each other, every figure as wide as the column."""
    real_store = Store(f"sqlite:///{tmp_path}/results.db")
    study = """\
name: report-layout
baseline: native
platforms:
  native: {driver: native}
  native-again-under-a-long-name: {driver: native}
workloads:
  - {name: cpu, suite: micro, integer: {duration: 1}, float: {duration: 1},
     memory: {duration: 1}, branchy: {duration: 1}}
repetitions: 2
"""
    runner = Runner.create(parse_study(study, "layout.yaml"), real_store, quick=False)
    assert runner.run() == "finished"
    real = render(analyse(real_store, runner.run_id), "html")
    overlaps, narrow, page = layout(tmp_path, real, "real")
    assert overlaps == [] and narrow == []
    assert real.count("<svg") >= 2  # the cpu bars and the host CPU split

    b = RunBuilder(real_store, run_id="consolidation")
    for i, platform in enumerate(("native", "kvm-virtio", "kvm-e1000", "tcg", "uml", "gvisor")):
        for workload in (CONSOLIDATION, "disk dd size=2G"):
            cell = b.cell(platform, workload)
            for rep in range(2):
                values = {"consolidation.web.latency_p95_ms": [10.0 + i + rep]}
                if workload.startswith("disk"):
                    values = {"disk.dd.write_mbps": [500.0 / (1 + i) + rep]}
                b.sample(cell, rep, values, host_cpu=host(10, 2 + i, guest=i))
    overlaps, narrow, _ = layout(
        tmp_path, render(analyse(real_store, "consolidation"), "html"), "c"
    )
    assert overlaps == [] and narrow == []

    # HVBENCH_REPORT_SCREENSHOT=path keeps the real run's report as shown (to look at it)
    shot = Path(os.environ.get("HVBENCH_REPORT_SCREENSHOT", tmp_path / "report.png"))
    chromium(tmp_path, page, f"--screenshot={shot}", f"--window-size={WIDTH},2400")
    assert Image.open(shot).size[0] == WIDTH
