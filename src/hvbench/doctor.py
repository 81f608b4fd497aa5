"""What this host can run: every driver and tool, available or not, why not, and the fix."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass

from hvbench.drivers import DRIVERS, driver_class
from hvbench.drivers.base import PlatformSettings
from hvbench.errors import HvbenchError
from hvbench.host import hold
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
        ),
        _measuring(),
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


def _measuring() -> Finding:
    """Whether a run measures on this host now: a run started beside it would wait or refuse."""
    holder = hold.holder()
    if holder is None:
        return Finding("host", "measuring", True, "no run measures on this host now")
    return Finding(
        "host", "measuring", False, f"{holder} measures on this host", "hvbench run --wait"
    )


def unavailable(platforms: Mapping[str, PlatformSettings]) -> dict[str, Finding]:
    """The platforms this host cannot run, each with doctor's finding for its settings (why
    not, and the fix): what a run refuses, or leaves out, before its first sample."""
    out = {}
    for name, settings in platforms.items():
        verdict = driver_class(settings).check_for(settings)
        if not verdict.ok:
            out[name] = Finding("driver", settings.driver, False, verdict.detail, verdict.fix)
    return out


def as_json(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]
