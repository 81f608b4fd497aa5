"""What setup.sh installs with each option, against what studies need (hvbench.host.packages):
the default study's packages with no option, the others' with the option a refusal names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hvbench.host.packages import listed, refusals
from hvbench.plan import missing_packages, needed_packages
from hvbench.study import default_study, load_study

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def setup_packages(*options: str) -> set[str]:
    """The Debian packages ``./setup.sh OPTIONS`` installs (its ``--packages``)."""
    out = subprocess.run(
        ["bash", str(ROOT / "setup.sh"), "--packages", *options],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_setup_alone_installs_what_the_default_study_needs_and_no_test_package():
    plain = setup_packages()
    for _, names in needed_packages(default_study()).values():
        assert names <= plain
    assert {"chromium", "linux-source", "nginx", "postgresql"}.isdisjoint(plain)


def test_every_option_in_the_list_is_setups_and_dev_installs_them_all():
    packages = listed()
    options = {o for p in packages.values() for o in p.options}
    assert {"--dev", "--with-kernbench", "--with-consolidation", "--with-tools"} <= options
    plain = setup_packages()
    for option in options - {"--dev"}:
        tagged = {p.name for p in packages.values() if option in p.options}
        assert setup_packages(option) == plain | tagged
    assert setup_packages("--dev") == set(packages)


def test_a_study_lacking_packages_is_refused_naming_the_option():
    """On a made-up host with what ``./setup.sh`` alone installs: each workload of wiki-disk
    names the option that brings what it lacks; consolidation lacking only debootstrap (which
    kernbench's option brings too) names its own."""
    plain = setup_packages()
    wanted = needed_packages(load_study(EXAMPLES / "wiki-disk.yaml"))
    lines = refusals(wanted, plain)
    assert len(lines) == 3
    assert any(
        line.startswith("kernbench needs ") and line.endswith(": ./setup.sh --with-kernbench")
        for line in lines
    )
    assert "disk bonnie++ size=4G needs bonnie++, not installed: ./setup.sh --with-tools" in lines
    consolidation = needed_packages(load_study(EXAMPLES / "consolidation.yaml"))
    ((label, (_, names)),) = consolidation.items()
    (line,) = refusals(consolidation, plain | names - {"debootstrap"})
    assert line == f"{label} needs debootstrap, not installed: ./setup.sh --with-consolidation"
    assert refusals(wanted, set(listed())) == []


def test_this_host_set_up_with_dev_lacks_nothing():
    """``./setup.sh --dev`` set this host up: no example study is refused here."""
    for study in sorted(EXAMPLES.glob("*.yaml")):
        assert missing_packages(load_study(study)) == [], study


@pytest.mark.parametrize("option", ["--bogus", "--with-kernbench=1"])
def test_setup_refuses_an_unknown_option(option):
    out = subprocess.run(
        ["bash", str(ROOT / "setup.sh"), "--packages", option], capture_output=True, text=True
    )
    assert out.returncode == 2 and f"unknown option {option}" in out.stderr
