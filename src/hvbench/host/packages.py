"""The Debian packages hvbench knows, whether they are installed, and the setup.sh option that
installs those missing: ``./setup.sh`` alone installs what the default study needs, the other
workloads' packages come with an option (``debian-packages.txt``, which setup.sh reads too), and
a study that needs one not installed is refused before it runs, in one line naming the option
(what a study needs of them is ``plan.needed_packages``'s)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from importlib import resources

DEBOOTSTRAP = "debootstrap"
"""What builds a root filesystem for the workloads that need a userland in their guests."""


@dataclass(frozen=True)
class Package:
    name: str
    options: tuple[str, ...]
    """The setup.sh options that install it; none: every set-up does."""


def listed() -> dict[str, Package]:
    """The packages of ``debian-packages.txt``: a name, then its options, then a comment."""
    text = resources.files("hvbench").joinpath("debian-packages.txt").read_text()
    found = {}
    for line in text.splitlines():
        name, *options = line.partition("#")[0].split() or [""]
        if name:
            found[name] = Package(name, tuple(options))
    return found


def installed(names: set[str]) -> set[str]:
    """Those of ``names`` that dpkg has installed."""
    if not names:
        return set()
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}\n", *sorted(names)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {p for status, p in (line.split() for line in out.splitlines()) if status == "installed"}


def refusals(wanted: dict[str, tuple[str, set[str]]], have: set[str]) -> list[str]:
    """``plan.missing_packages`` on a host that has the packages ``have``: for each workload,
    the option named for it where it is one of the options that install what it lacks (a
    package that two workloads need: debootstrap), else those options."""
    known = listed()
    lines = []
    for label, (name, names) in wanted.items():
        absent = sorted(names - have)
        if not absent:
            continue
        options = {o for p in absent for o in known[p].options if o != "--dev"}
        own = f"--with-{name}"
        option = own if own in options else " ".join(sorted(options))
        lines.append(
            f"{label} needs {', '.join(absent)}, not installed: ./setup.sh {option}".strip()
        )
    return lines
