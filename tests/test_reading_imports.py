"""Reading a stored run loads nothing of the measuring side: ``hvbench report``'s work (the
analysis of a run from the store, its claims judged, every exporter) imports no driver, workload,
guest or host module, so that a run is read on a machine that cannot run any platform. The
import-linter contract "The reading stack measures nothing" says it of the imports; this says it
of what a report loads when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from builders import RunBuilder

from hvbench.report import EXPORTERS
from hvbench.store import Store

STUDY = """\
name: read-only
baseline: native
platforms:
  native: {driver: native}
  kvm: {driver: qemu, accel: kvm}
workloads:
  - {name: disk, tool: dd}
expect:
  - {platform: kvm, workload: disk, metric: disk.dd.write_mbps, at_least: 90%}
"""

MEASURING = ("hvbench.drivers", "hvbench.workloads", "hvbench.guest", "hvbench.host")

REPORT = """\
import json, sys
from hvbench.analysis import analyse
from hvbench.report import emit, render
from hvbench.store import Store

store = Store(sys.argv[1])
for fmt in sys.argv[3:]:
    emit(render(analyse(store, sys.argv[2]), fmt), None)
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
"""What ``cli.reporting.report`` does, in every format, outside the CLI package (whose commands
measure too); the modules it loaded on stderr."""


def stored_run(store: Store) -> None:
    """Run ``stored``: a disk figure of native and KVM, three repetitions each, one claim."""
    b = RunBuilder(store, run_id="stored", study_name="read-only", study_text=STUDY)
    for platform, write in (("native", 500.0), ("kvm", 470.0)):
        cell = b.cell(platform, "disk dd")
        for rep in range(3):
            b.sample(
                cell, rep, {"disk.dd.write_mbps": [write + rep]}, headline={"disk.dd.write_mbps"}
            )


def test_a_report_of_a_stored_run_imports_no_driver(store: Store, tmp_path):
    stored_run(store)
    done = subprocess.run(
        [sys.executable, "-c", REPORT, store.url, "stored", *EXPORTERS],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "disk.dd.write_mbps at least 90% of native" in done.stdout  # its claim was judged
    loaded = json.loads(done.stderr.splitlines()[-1])
    assert "hvbench.analysis.claims" in loaded
    assert [m for m in loaded if m.startswith(MEASURING) or m == "hvbench.study"] == []


COMMAND = """\
import atexit, json, sys
from hvbench.cli import main

atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv[0] = "hvbench"
main()
"""
"""The console entry point (``hvbench``) with its arguments, the modules it loaded at exit on
stderr's last line."""

BUILDING_THE_CLI = ("hvbench.guest", "hvbench.guest.kernel")
"""What the command line loads of the measuring side only to be built: typer reads every
command's signature then, and ``image build --kernel``'s help names the guest kernel's flavours
(``guest.kernel.FLAVOURS``, a module of the standard library and ``hvbench.errors`` alone)."""


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_hvbench_report_imports_nothing_that_measures(store: Store, tmp_path, fmt: str):
    """The real ``hvbench report``, the command line's every command registered, loads no
    session, runner, driver, workload, host or guest module: each command loads what it measures
    when it runs."""
    stored_run(store)
    out = tmp_path / f"report.{fmt}"
    args = ["report", "stored", "--db", store.url, "--format", fmt, "--output", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "disk.dd.write_mbps" in out.read_text()
    loaded = set(json.loads(done.stderr.splitlines()[-1]))
    assert {"hvbench.cli.run", "hvbench.cli.image", "hvbench.analysis.claims"} <= loaded
    measuring = (*MEASURING, "hvbench.session", "hvbench.runner", "hvbench.study")
    unneeded = sorted(m for m in loaded if m.startswith(measuring) and m not in BUILDING_THE_CLI)
    assert unneeded == []
