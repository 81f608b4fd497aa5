"""The HTML report in a real headless browser (Debian's chromium): it renders, shows its plots,
logs no console error, and loads nothing from the network."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import require
from PIL import Image
from test_report import store  # noqa: F401 (the hand-made run, as a fixture)

from hvbench.analysis import analyse
from hvbench.analysis.compare import compare
from hvbench.host.process import run_bounded
from hvbench.report import render, render_comparison
from hvbench.report.plots import COLORS

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium() -> None:
    require(shutil.which("chromium") is not None, "chromium (apt-get install chromium)")


CONSOLE = re.compile(r"CONSOLE|Uncaught|SyntaxError|TypeError|ReferenceError")


def chromium(tmp_path: Path, page: Path, *args: str) -> tuple[str, str]:
    """Run headless chromium on a local file; (stdout, stderr)."""
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
        page.as_uri(),
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
