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
from browser import chromium, console_errors
from builders import RunBuilder, host
from conftest import require
from known_runs import default_run
from PIL import Image

from hvbench.analysis import analyse
from hvbench.analysis.compare import compare
from hvbench.report import render, render_comparison
from hvbench.report.plots import COLORS, RC
from hvbench.report.summary import summarize
from hvbench.report.tables import warnings
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium() -> None:
    require(shutil.which("chromium") is not None, "chromium (apt-get install chromium)")


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


def test_html_renders_with_plots_and_no_console_error(four_platforms, tmp_path):
    html = render(analyse(four_platforms, "latest"), "html")
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


def test_comparison_html_renders(four_platforms, tmp_path):
    a = analyse(four_platforms, "latest")
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


def probe(
    tmp_path: Path, html: str, name: str, script: str, names: tuple[str, ...], height: int
) -> tuple[list, Path]:
    """The report laid out by Chromium in a ``WIDTH`` × ``height`` window with ``script`` run
    after the report's own, no console error: the JSON ``script`` left in the root's
    ``data-<name>`` for each of ``names``; and the page with the script."""
    page = tmp_path / f"{name}.html"
    page.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
    dom, stderr = chromium(tmp_path, page, "--dump-dom", f"--window-size={WIDTH},{height}")
    assert console_errors(stderr) == []
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-ready="1"' in root and "data-errors" not in root
    found = [re.search(rf"data-{n}=\"([^\"]*)\"", root).group(1) for n in names]
    return [json.loads(html_lib.unescape(f)) for f in found], page


def layout(tmp_path: Path, html: str, name: str) -> tuple[list[str], list[str], Path]:
    """The report at ``WIDTH`` px in Chromium: (texts overprinting each other in a figure,
    figures narrower than the column) and the page with the check."""
    (overlaps, narrow), page = probe(tmp_path, html, name, LAYOUT, ("overlaps", "narrow"), 3000)
    return overlaps, narrow, page


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
    session = RunSession.preflight(real_store, NewRun(parse_study(study, "layout.yaml")))
    assert session.run().status == "finished"
    real = render(analyse(real_store, session.run_id), "html")
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


FIRST_SCREEN = """<script>
/* The test's own: where the parts a reader looks at first begin and end on the page, as this
   browser lays it out, and where the warnings line's link leads. */
(function () {
  function box(e) {
    if (!e) { return null; }
    var r = e.getBoundingClientRect();
    return [Math.round(r.top + window.scrollY), Math.round(r.bottom + window.scrollY)];
  }
  var count = document.querySelector(".warnings-count");
  var link = count && count.querySelector("a[href^='#']");
  var figures = document.querySelectorAll("figure.plot");
  document.documentElement.dataset.screen = JSON.stringify({
    width: window.innerWidth,
    count: box(count),
    countText: count && count.textContent,
    linked: box(link && document.getElementById(link.getAttribute("href").slice(1))),
    verdict: box(document.getElementById("verdict")),
    matrix: box(document.querySelector("table.matrix")),
    verdictList: box(document.querySelector("ul.verdict")),
    results: box(document.getElementById("w-1")),
    firstChart: box(figures[0]),
    lastChart: box(figures[figures.length - 1])
  });
})();
</script>"""
SCREEN = 900


def test_first_screen_shows_the_matrix_then_the_verdict(tmp_path):
    """A default run's report in a 1400 × 900 window: the line counting the warnings (its link
    leading to them, after every chart), then the verdict: the matrix of % of native, each
    cell coloured by its reading, whole on the first screen, then the verdict's sentences,
    which begin on it; the charts after them."""
    default_store = Store(f"sqlite:///{tmp_path}/results.db")
    a = analyse(default_store, default_run(default_store))
    html = render(a, "html")
    (screen,), _ = probe(tmp_path, html, "default", FIRST_SCREEN, ("screen",), SCREEN)
    # the page's layout depends on its width alone; --screenshot's first screen is the top
    # SCREEN px (--dump-dom's viewport is shorter by the window's frame)
    assert screen["width"] == WIDTH
    summary = warnings(a).summary()
    assert summary and screen["countText"].startswith(summary)
    assert screen["count"][1] <= screen["verdict"][0] <= screen["matrix"][0]
    assert screen["matrix"][1] <= screen["verdictList"][0] < SCREEN
    assert screen["matrix"][1] <= SCREEN
    assert screen["verdictList"][1] <= screen["results"][0] <= screen["firstChart"][0]
    cells = re.findall(r'<td class="v-(\w+)"', html)
    assert len(cells) == len(summarize(a).verdicts) and {"loss", "same", "untested"} <= set(cells)
    assert screen["linked"] is not None and screen["linked"][0] > screen["lastChart"][1]
