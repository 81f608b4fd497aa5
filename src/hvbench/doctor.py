"""What this host can run: every driver and tool, available or not, why not, and the fix."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import asdict, dataclass

from hvbench.drivers import DRIVERS
from hvbench.errors import HvbenchError
from hvbench.host.inventory import TOOLS, tool_version


@dataclass
class Finding:
    kind: str
    """driver, tool or host."""
    name: str
    ok: bool
    detail: str
    fix: str = ""


def examine(drivers: Collection[str] = ()) -> list[Finding]:
    """Check the host, the drivers named (every one where none is: each runs its own probes,
    which take a minute under emulation) and every tool."""
    if unknown := sorted(set(drivers) - DRIVERS.keys()):
        raise HvbenchError(
            f"doctor: no driver named {', '.join(unknown)}; the drivers: {', '.join(DRIVERS)}"
        )
    findings = [
        Finding(
            "host",
            "root",
            os.geteuid() == 0,
            "running as root" if os.geteuid() == 0 else "not root",
            "" if os.geteuid() == 0 else "run hvbench as root (namespaces, taps, loop devices)",
        )
    ]
    for name, cls in DRIVERS.items():
        if drivers and name not in drivers:
            continue
        verdict = cls.check()
        findings.append(Finding("driver", name, verdict.ok, verdict.detail, verdict.fix))
    for tool, spec in TOOLS.items():
        if shutil.which(tool):
            findings.append(Finding("tool", tool, True, tool_version(tool) or "installed"))
        else:
            fix = f"apt-get install {spec.package}"
            findings.append(Finding("tool", tool, False, "not installed", fix))
    return findings


def available_drivers(findings: list[Finding]) -> set[str]:
    return {f.name for f in findings if f.kind == "driver" and f.ok}


def as_json(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]
