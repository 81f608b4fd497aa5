"""The Debian packages a study needs on this host, and the setup.sh option that installs those
missing: ``./setup.sh`` alone installs what the default study needs, the other workloads'
packages come with an option (``debian-packages.txt``, which setup.sh reads too), and a study
that needs one not installed is refused before it runs, in one line naming the option."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePath
from typing import TYPE_CHECKING

from hvbench.host.inventory import TOOLS

if TYPE_CHECKING:
    from hvbench.study import Study

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


def needed(study: Study) -> dict[str, tuple[str, set[str]]]:
    """By workload (its label): its name, and the listed packages it needs on the host: those
    of the tools it runs (natively, or copied from the host into guest images), its own
    (``packages``), and debootstrap where its guests need a userland."""
    tools = {PurePath(tool).name: spec.package for tool, spec in TOOLS.items()}
    known = set(listed())
    out: dict[str, tuple[str, set[str]]] = {}
    for i in range(len(study.workloads)):
        workload = study.workload(i)
        names = {tools[t] for t in (PurePath(t).name for t in workload.tools()) if t in tools}
        names |= set(workload.packages())
        names |= {DEBOOTSTRAP} if workload.needs_userland else set()
        name, label = workload.settings.name, workload.settings.label()
        out[label] = (name, out.get(label, (name, set()))[1] | (names & known))
    return out


def missing(study: Study) -> list[str]:
    """One line per workload of the study that needs packages not installed here, naming the
    setup.sh option that installs them."""
    wanted = needed(study)
    return refusals(wanted, installed(set().union(*(names for _, names in wanted.values()))))


def refusals(wanted: dict[str, tuple[str, set[str]]], have: set[str]) -> list[str]:
    """``missing`` on a host that has the packages ``have``: for each workload, the option
    named for it where it is one of the options that install what it lacks (a package that two
    workloads need: debootstrap), else those options."""
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
