"""What ran: the name a report gives each platform, the accelerator or mode its guests ran
under, the settings that define it, and disk paths that can lift a figure above native.

A study names its platforms before anything runs ("kvm-virtio"), and ``accel: auto`` is only
decided when the driver starts (KVM if a probe guest boots, else TCG). Every report therefore
names a platform by its **label**: its name, followed by what ran in brackets wherever the name
does not already say exactly that (``kvm-virtio [tcg]``, ``qemu-virtio [kvm]``, ``xen [pv]``,
``gvisor [systrap]``). The facts come from what each cell recorded (the driver's
``describe()``: its settings, and under ``resolved`` what it decided); the analysis never
imports drivers, so the keys read here are those the drivers write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from hvbench.analysis.model import CellInfo, MetricResult
from hvbench.analysis.stats import ALPHA, PRACTICAL, holm

ACCELS = ("kvm", "tcg")
"""qemu's accelerators; libvirt's domain types kvm and qemu run the same two."""
XEN_MODES = ("pv", "pvh", "hvm")
GVISOR_PLATFORMS = ("systrap", "ptrace")
DISK_WORKLOAD = "disk"
RECORDS = ("resolved", "image", "rootfs")
"""What describe() adds to the settings: what was resolved, and manifests of what booted."""
CACHING = ("writeback", "writethrough", "unsafe")
"""QEMU cache modes that read (and for writeback, unsafe: write) through the host page cache."""


def what_ran(driver: str, settings: dict) -> str | None:
    """The accelerator or mode a cell's guests ran under: kvm or tcg (qemu, and libvirt with a
    qemu URI), pv, pvh or hvm (xen, and libvirt with a xen URI), systrap or ptrace (gvisor).
    None where the driver has nothing to choose (native, container, uml), or where ``auto``
    was never resolved (the driver failed before)."""
    if driver in ("qemu", "libvirt") and "accel" in settings:
        resolved = (settings.get("resolved") or {}).get("accel")
        if resolved in ACCELS:
            return resolved
        return settings["accel"] if settings["accel"] in ACCELS else None
    if driver in ("xen", "libvirt") and settings.get("mode") in XEN_MODES:
        return settings["mode"]
    if driver == "gvisor" and settings.get("platform") in GVISOR_PLATFORMS:
        return settings["platform"]
    return None


def _claims(name: str, words: Iterable[str]) -> set[str]:
    """The words of ``words`` a platform's name says, as whole words ("kvm-virtio", "kvm2";
    not "pv" in "xen-pvh")."""
    return {w for w in words if re.search(rf"(?<![a-z]){w}(?![a-z])", name)}


def label(name: str, ran: list[str]) -> str:
    """``name`` alone if it names exactly what ran, else ``name [what ran]``; ``ran`` lists the
    distinct values of the platform's cells (two if a resumed run found another accelerator)."""
    if not ran:
        return name
    words = next(g for g in (ACCELS, XEN_MODES, GVISOR_PLATFORMS) if ran[0] in g)
    if len(ran) == 1 and _claims(name, words) == {ran[0]}:
        return name
    return f"{name} [{'/'.join(ran)}]"


def platform_labels(cells: Iterable[CellInfo]) -> tuple[dict[str, str], dict[str, str | None]]:
    """Per platform, its label and what ran ("kvm", or "kvm/tcg" if its cells differ)."""
    ran: dict[str, list[str]] = {}
    for c in cells:
        values = ran.setdefault(c.platform, [])
        if (v := what_ran(c.driver, c.platform_settings)) is not None and v not in values:
            values.append(v)
    return (
        {p: label(p, v) for p, v in ran.items()},
        {p: "/".join(v) or None for p, v in ran.items()},
    )


def auto_reason(settings: dict) -> str | None:
    """Why ``accel: auto`` chose what it did, as the driver recorded it; None otherwise."""
    if settings.get("accel") != "auto":
        return None
    return (settings.get("resolved") or {}).get("accel_reason")


def defining_settings(settings: dict) -> dict:
    """The platform's settings as the study gave them (defaults filled in), without what the
    driver recorded besides (resolved values, image manifests): what defines the platform."""
    return {k: v for k, v in settings.items() if k not in RECORDS}


def disk_cache(driver: str, settings: dict) -> str | None:
    """How the platform's data disk goes through the host page cache, in a few words; None
    where direct I/O in the guest reaches the medium (native, container and xen's blkback use
    a loop device with direct I/O, QEMU with cache none or directsync)."""
    disk = settings.get("disk") or {}
    if driver in ("qemu", "libvirt") and disk.get("cache") in CACHING:
        return f"QEMU disk cache={disk['cache']}"
    if driver == "uml":
        sync = ", O_SYNC writes" if disk.get("sync") else ""
        return f"UML's ubd has no O_DIRECT{sync}"
    if driver == "gvisor":
        return "gVisor's Sentry opens the disk's files without O_DIRECT"
    if driver in ("xen", "libvirt") and disk.get("backend") == "qdisk":
        return "Xen's qdisk backend avoids O_DIRECT without direct-io-safe"
    return None


def _disk_headline(r: MetricResult) -> bool:
    return r.vs_baseline is not None and r.headline and r.cell.workload_name == DISK_WORKLOAD


def above_baseline(results: list[MetricResult]) -> None:
    """Set ``suspect`` on each headline disk figure above the baseline's that is not a win.

    A guest's disk cannot beat the host's own path to the same medium; above it, something
    between the guest and the medium answered instead. A figure is above the baseline when it
    is beyond the practical threshold (5%) and its test passes Holm's step-down at ``ALPHA`` over
    the run's headline disk figures, as ``compare`` calls a change: uncorrected, 1.4% of A/A
    disk cells (7% of runs of 6) were called suspect. Where the platform's disk path is known
    to go through the host page cache, it is put down to it, also at one repetition (where
    nothing can be tested) when the figure is above; elsewhere it is called suspect.
    """
    family = [r for r in results if _disk_headline(r) and r.vs_baseline.tested]
    p_holm = holm([r.vs_baseline.p_value for r in family]).tolist()
    adjusted = {id(r): p for r, p in zip(family, p_holm, strict=True)}
    for r in results:
        r.suspect = _above(r, adjusted.get(id(r), math.nan)) if _disk_headline(r) else None


def _above(r: MetricResult, p_holm: float) -> str | None:
    """Why one headline disk figure is above the baseline and not a win (``above_baseline``)."""
    v = r.vs_baseline
    if v is None or not v.pct_of_native > 100:
        return None
    beyond = p_holm < ALPHA and v.pct_of_native > 100 * (1 + PRACTICAL)
    cache = disk_cache(r.cell.driver, r.cell.platform_settings)
    if cache and (beyond or not math.isfinite(v.p_value)):
        return f"likely the host page cache: {cache}"
    if beyond:
        return "suspect: faster than the baseline's own disk; look for a cache on the way"
    return None
