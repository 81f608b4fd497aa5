"""What ran: the name a report gives each platform, the accelerator or mode its guests ran
under, the settings that define it, and disk paths that can lift a figure above native.

A study names its platforms before anything runs ("kvm-virtio"), and ``accel: auto`` is only
decided when the driver starts (KVM if a probe guest boots, else TCG). Every report therefore
names a platform by its **label**: its name, followed by what ran in brackets wherever the name
does not already say exactly that (``kvm-virtio [tcg]``, ``qemu-virtio [kvm]``, ``xen [pv]``,
``gvisor [systrap]``). The facts are those each cell's driver wrote (``store.WhatRan``): the
analysis reads its fields, and never a driver's name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from hvbench.analysis.model import CellInfo, MetricResult
from hvbench.analysis.stats import ALPHA, PRACTICAL, holm

DISK_WORKLOAD = "disk"
RECORDS = ("resolved", "image", "rootfs")
"""What describe() adds to the settings: what was resolved, and manifests of what booted."""


def _claims(name: str, words: Iterable[str]) -> set[str]:
    """The words of ``words`` a platform's name says, as whole words ("kvm-virtio", "kvm2";
    not "pv" in "xen-pvh")."""
    return {w for w in words if re.search(rf"(?<![a-z]){re.escape(w)}(?![a-z])", name)}


def label(name: str, ran: list[str], words: Iterable[str] = ()) -> str:
    """``name`` alone if it names exactly what ran, else ``name [what ran]``; ``ran`` lists the
    distinct values of the platform's cells (two if a resumed run found another accelerator),
    ``words`` what its driver could have run instead (``WhatRan.modes``)."""
    if not ran:
        return name
    if len(ran) == 1 and _claims(name, {*words, *ran}) == {ran[0]}:
        return name
    return f"{name} [{'/'.join(ran)}]"


def platform_labels(cells: Iterable[CellInfo]) -> tuple[dict[str, str], dict[str, str | None]]:
    """Per platform, its label and what ran ("kvm", or "kvm/tcg" if its cells differ)."""
    ran: dict[str, list[str]] = {}
    words: dict[str, set[str]] = {}
    for c in cells:
        values = ran.setdefault(c.platform, [])
        words.setdefault(c.platform, set()).update(c.ran.modes)
        if (v := c.ran.mode) is not None and v not in values:
            values.append(v)
    return (
        {p: label(p, v, words[p]) for p, v in ran.items()},
        {p: "/".join(v) or None for p, v in ran.items()},
    )


def defining_settings(settings: dict) -> dict:
    """The platform's settings as the study gave them (defaults filled in), without what the
    driver recorded besides (resolved values, image manifests): what defines the platform."""
    return {k: v for k, v in settings.items() if k not in RECORDS}


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
    cache = r.cell.ran.disk_cache
    if cache and (beyond or not math.isfinite(v.p_value)):
        return f"likely the host page cache: {cache}"
    if beyond:
        return "suspect: faster than the baseline's own disk; look for a cache on the way"
    return None
