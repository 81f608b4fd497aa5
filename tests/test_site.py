"""``hvbench publish``: the static site of a store's history, its pages and links, and the same
site in headless Chromium (rendered, no console error, plots painted, nothing from the
network)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import sqlite3
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
import typer
from browser import chromium, console_errors
from builders import RunBuilder
from conftest import require
from PIL import Image
from typer.testing import CliRunner

from hvbench.cli.reporting import publish as publish_cmd
from hvbench.errors import HvbenchError
from hvbench.report import write_report
from hvbench.report.plots import COLORS
from hvbench.report.site import MANIFEST, Published, publish, report_path
from hvbench.store import Store

RUNS = 12
STEP_AT = 6
"""The first run on the new kernel, whose disk is 12% slower."""
HOSTS = ("alpha", "beta")


def nightly(store: Store, host: str, seed: int, step: float = 0.88) -> list[str]:
    """``RUNS`` nights of a study on ``host``: native and kvm, disk and net; from run
    ``STEP_AT`` on the host runs kernel 6.12 and kvm's disk is ``step`` of what it was."""
    rng = np.random.default_rng(seed)
    ids = []
    for night in range(RUNS):
        run_id = f"{host}-{night:02d}"
        kernel = "6.12" if night >= STEP_AT else "6.1"
        b = RunBuilder(
            store,
            run_id=run_id,
            study_text="name: nightly\nbaseline: native\nplatforms: {}\nworkloads: []\n",
            inventory={"cores_logical": 2, "hostname": host, "kernel": kernel},
        )
        for platform in ("native", "kvm"):
            disk, net = b.cell(platform, "disk"), b.cell(platform, "net")
            level = step if platform == "kvm" and night >= STEP_AT else 1.0
            for rep in range(3):
                noise = rng.normal(1, 0.01, 2)
                b.sample(
                    disk,
                    rep,
                    {"disk.dd.write_mbps": [500 * level * noise[0]]},
                    headline={"disk.dd.write_mbps"},
                )
                b.sample(
                    net,
                    rep,
                    {"net.iperf3.inbound_gbps": [9.0 * noise[1]]},
                    "Gbit/s",
                    headline={"net.iperf3.inbound_gbps"},
                )
        ids.append(run_id)
    return ids


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Store:
    """Two hosts of a fleet, the same study, the same change on both."""
    path = tmp_path_factory.mktemp("site") / "results.db"
    store = Store(f"sqlite:///{path}")
    for k, host in enumerate(HOSTS):
        nightly(store, host, seed=k)
    return store


@pytest.fixture(scope="module")
def published(history, tmp_path_factory) -> Published:
    return publish(history, tmp_path_factory.mktemp("published") / "site", jobs=2)


@pytest.fixture
def own_history(history: Store, tmp_path: Path) -> Store:
    """A copy of ``history`` for a test that changes its runs, which the module's other tests
    must not see (SQLite's backup, which takes what the write-ahead log holds too)."""
    path = tmp_path / "results.db"
    source = sqlite3.connect(history.url.removeprefix("sqlite:///"))
    with contextlib.closing(source), contextlib.closing(sqlite3.connect(path)) as copy:
        source.backup(copy)
    return Store(f"sqlite:///{path}")


@pytest.fixture
def site(published) -> Path:
    return published.index.parent


def links(page: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', page.read_text(encoding="utf-8"))


def test_index_has_each_study_on_each_host_apart(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    pages = sorted(p.name for p in site.glob("*.html") if p.name != "index.html")
    assert pages == ["hand-made@alpha.html", "hand-made@beta.html"]
    for page in pages:
        assert f'href="{page}"' in index
    for host in HOSTS:
        text = (site / f"hand-made@{host}.html").read_text(encoding="utf-8")
        # one host's page holds its own runs only: series never mix hosts
        other = next(h for h in HOSTS if h != host)
        assert f"{host}-00" in text and f"{other}-00" not in text


@pytest.mark.parametrize("host", HOSTS)
def test_change_point_found_at_its_run_and_explained(site, host):
    page = site / f"hand-made@{host}.html"
    text = page.read_text(encoding="utf-8")
    found = re.findall(r'<li id="cp\d+">(.*?)</li>', text, re.DOTALL)
    assert len(found) == 1, found  # the step on kvm's disk; nothing on native or the net
    (line,) = found
    assert "kvm: disk.dd.write_mbps" in line
    after, before = f"{host}-{STEP_AT:02d}", f"{host}-{STEP_AT - 1:02d}"
    assert f'from run <a href="{report_path(after)}">{after}</a>' in line
    assert f'the run before: <a href="{report_path(before)}">{before}</a>' in line
    assert re.search(r"−1[0-4]\.\d+% \[−1\d\.\d+, −\d+\.\d+\]", line), line
    assert "changed: host kernel 6.1 → 6.12" in line  # as history says it
    # the figure marks it, linked to the line that says it
    anchor = re.search(r'<li id="(cp\d+)">', text).group(1)
    assert f'xlink:href="#{anchor}"' in text or f'href="#{anchor}"' in text


def test_every_link_of_the_site_reaches_a_file(site):
    for page in site.rglob("*.html"):
        for href in links(page):
            parts = urlsplit(href)
            assert not parts.scheme and not parts.netloc, (page, href)  # nothing from afar
            if parts.path:
                assert (page.parent / unquote(parts.path)).is_file(), (page, href)


def test_each_run_has_its_report_kept_until_its_run_changes(own_history, published, tmp_path):
    assert published.reports_written == RUNS * len(HOSTS) and published.reports_kept == 0
    root = tmp_path / "site"
    shutil.copytree(published.index.parent, root)
    report = root / report_path(f"{HOSTS[0]}-00")
    assert "hvbench report: hand-made" in report.read_text(encoding="utf-8")
    index = (root / "index.html").read_text(encoding="utf-8")

    again = publish(own_history, root, jobs=1)
    assert again.reports_written == 0 and again.reports_kept == RUNS * len(HOSTS)
    assert (root / "index.html").read_text(encoding="utf-8") == index

    # a run resumed and finished anew: its report is made again, the others kept
    own_history.set_run_status(f"{HOSTS[0]}-03", "finished", finished=True)
    assert publish(own_history, root, jobs=1).reports_written == 1
    # a report removed by hand is made again
    report.unlink()
    assert publish(own_history, root, jobs=1).reports_written == 1 and report.exists()
    assert MANIFEST in os.listdir(root)


def test_publish_copies_the_report_its_run_wrote_while_current(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/r.db")
    run_id = "h-00"
    b = RunBuilder(store, run_id=run_id, inventory={"hostname": "h"})
    cell = b.cell("native", "disk")
    for rep in range(3):
        b.sample(cell, rep, {"disk.dd.write_mbps": [500.0 + rep]}, headline={"disk.dd.write_mbps"})
    own = write_report(store, run_id, tmp_path / "reports" / f"{run_id}.html")

    first = publish(store, tmp_path / "a", jobs=1)
    assert (first.reports_copied, first.reports_written) == (1, 0)
    assert (tmp_path / "a" / report_path(run_id)).read_bytes() == own.read_bytes()

    # its bytes changed since: made again
    own.write_text(own.read_text(encoding="utf-8") + "<!-- edited -->", encoding="utf-8")
    assert publish(store, tmp_path / "b", jobs=1).reports_copied == 0
    # the run ended anew since its report was written: made again
    write_report(store, run_id, own)
    store.set_run_status(run_id, "finished", finished=True)
    assert publish(store, tmp_path / "c", jobs=1).reports_copied == 0
    write_report(store, run_id, own)
    assert publish(store, tmp_path / "d", jobs=1).reports_copied == 1


def test_a_run_without_figures_is_listed_without_a_report(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/r.db")
    RunBuilder(store, run_id="empty", inventory={"hostname": "h"})
    done = publish(store, tmp_path / "site", jobs=1)
    assert set(done.no_report) == {"empty"}
    page = (tmp_path / "site" / "hand-made@h.html").read_text(encoding="utf-8")
    assert "empty <span" in page and "no report:" in page
    assert "No headline figure" in page


def test_a_site_with_the_former_manifest_keeps_its_reports_and_failures(tmp_path):
    """A manifest written before failures had a mapping of their own (one mapping, a failure
    under "!" + run id) is read: nothing is made or tried again, and it is written anew."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    b = RunBuilder(store, run_id="h-00", inventory={"hostname": "h"})
    cell = b.cell("native", "disk")
    for rep in range(3):
        b.sample(cell, rep, {"disk.dd.write_mbps": [500.0 + rep]}, headline={"disk.dd.write_mbps"})
    RunBuilder(store, run_id="empty", inventory={"hostname": "h"})
    root = tmp_path / "site"
    assert publish(store, root, jobs=1).reports_written == 2
    path = root / MANIFEST
    now = json.loads(path.read_text(encoding="utf-8"))
    assert set(now["made"]) == {"h-00", "empty"} and set(now["no_report"]) == {"empty"}
    former = now["made"] | {f"!{k}": why for k, why in now["no_report"].items()}
    path.write_text(json.dumps(former), encoding="utf-8")

    again = publish(store, root, jobs=1)
    assert (again.reports_written, again.reports_kept) == (0, 2)
    assert again.no_report == {"empty": now["no_report"]["empty"]}
    assert json.loads(path.read_text(encoding="utf-8")) == now


def test_publish_command_and_its_errors(history, site, tmp_path):
    app = typer.Typer()
    app.command()(publish_cmd)
    runner = CliRunner()
    shutil.copytree(site, tmp_path / "site")
    res = runner.invoke(app, [str(tmp_path / "site"), "--db", history.url, "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert "2 histories" in res.output
    kept = RUNS * len(HOSTS)  # none changed since the site was published
    assert re.search(
        rf"run reports: 0 written, 0 copied from the runs. own, {kept} kept, 0 without one",
        res.output,
    )
    empty = Store(f"sqlite:///{tmp_path}/empty.db")
    with pytest.raises(HvbenchError, match=r"no runs in .* to publish"):
        publish(empty, tmp_path / "none")
    (tmp_path / "file").write_text("")
    with pytest.raises(HvbenchError, match="cannot write the site to"):
        publish(history, tmp_path / "file" / "site", jobs=1)


@pytest.mark.browser
def test_site_in_headless_chromium(site, tmp_path):
    require(shutil.which("chromium") is not None, "chromium (apt-get install chromium)")
    for page in (site / "index.html", site / "hand-made@alpha.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
        assert "<link" not in text and "@import" not in text
        dom, stderr = chromium(tmp_path, page, "--dump-dom")
        assert console_errors(stderr) == []
        root = re.search(r"<html[^>]*>", dom).group(0)
        assert 'data-ready="1"' in root and "data-errors" not in root
    # kvm and native for each figure: disk and net
    assert 'data-plots="2"' in re.search(r"<html[^>]*>", dom).group(0)

    # the same from a static web server (on loopback)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/hand-made@alpha.html"
            served, stderr = chromium(tmp_path, url, "--dump-dom")
        finally:
            server.shutdown()
    assert console_errors(stderr) == []
    assert served.count("<svg") == 2 and "alpha-06" in served

    # HVBENCH_SITE_SCREENSHOT=path keeps the screenshot (to look at it, or as a CI artifact)
    shot = Path(os.environ.get("HVBENCH_SITE_SCREENSHOT", tmp_path / "site.png"))
    chromium(
        tmp_path, site / "hand-made@alpha.html", f"--screenshot={shot}", "--window-size=1400,1600"
    )
    print(f"screenshot of the published site: {shot}")
    colors = {c for _, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)}
    for hex_color in COLORS[:2]:  # both platforms' lines are painted
        assert tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5)) in colors, hex_color
