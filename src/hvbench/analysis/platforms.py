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
from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

from hvbench.analysis.holm import holm
from hvbench.analysis.normalize import Normalized
from hvbench.analysis.stats import ALPHA
from hvbench.store import CellView

DISK_WORKLOAD = "disk"
K = TypeVar("K")


def _claims(name: str, words: Iterable[str]) -> set[str]:
    """The words of ``words`` a platform's name says, as whole words ("kvm-virtio", "kvm2";
    not "pv" in "xen-pvh")."""
    return {w for w in words if re.search(rf"(?<![a-z]){re.escape(w)}(?![a-z])", name)}


def label(name: str, ran: list[str], words: Iterable[str] = (), nested: bool = False) -> str:
    """``name`` alone if it names exactly what ran, else ``name [what ran]``; ``ran`` lists the
    distinct values of the platform's cells (two if a resumed run found another accelerator),
    ``words`` what its driver could have run instead (``WhatRan.modes``). KVM nested in a
    virtual machine says so in the label too (``firecracker [kvm, nested]``, ``pc-kvm
    [nested]``): its figures are no KVM's, wherever the label goes."""
    said = len(ran) == 1 and _claims(name, {*words, *ran}) == {ran[0]}
    parts = ([] if said or not ran else ["/".join(ran)]) + (["nested"] if nested else [])
    return f"{name} [{', '.join(parts)}]" if parts else name


class PlatformLabels(NamedTuple):
    """Per platform: its label, and what ran (None where its driver says nothing)."""

    labels: dict[str, str]
    ran: dict[str, str | None]


def platform_labels(cells: Iterable[CellView]) -> PlatformLabels:
    """Per platform, its label and what ran ("kvm", or "kvm/tcg" if its cells differ)."""
    ran: dict[str, list[str]] = {}
    words: dict[str, set[str]] = {}
    nested: set[str] = set()
    for c in cells:
        values = ran.setdefault(c.platform, [])
        words.setdefault(c.platform, set()).update(c.ran.modes)
        if (v := c.ran.mode) is not None and v not in values:
            values.append(v)
        if c.ran.nested:
            nested.add(c.platform)
    return PlatformLabels(
        {p: label(p, v, words[p], p in nested) for p, v in ran.items()},
        {p: "/".join(v) or None for p, v in ran.items()},
    )


def above_baseline(
    figures: Mapping[K, tuple[CellView, bool, Normalized | None]],
) -> dict[K, str]:
    """Why each headline disk figure above the baseline's is not a win; ``figures`` are the
    run's (cell, headline, against the baseline), and the answer has those that are suspect.

    A guest's disk cannot beat the host's own path to the same medium; above it, something
    between the guest and the medium answered instead. A figure is shown above the baseline
    when its test passes Holm's step-down at ``ALPHA`` over the run's headline disk figures (a
    family-wise correction across its cells: uncorrected, 1.4% of A/A disk cells, 7% of runs of
    6, were called suspect). One whose 95% interval lies above the baseline but not past Holm's
    step-down is said to be so, not left to read as a gain: in A/A runs of 6 such figures, 8–9%
    of runs printed one unmarked ("112 [104–120]") while only those past a 5% threshold as
    well were flagged. Where the platform's disk path is known to go through the host page
    cache (``WhatRan.disk_cache``), it is put down to it, also at one repetition (where nothing
    can be tested) when the figure is above; elsewhere, past Holm's step-down, it is suspect.
    """
    disk = {
        key: (cell, v)
        for key, (cell, headline, v) in figures.items()
        if v is not None and headline and cell.workload_name == DISK_WORKLOAD
    }
    family = [key for key, (_, v) in disk.items() if v.tested]
    p_holm = holm([disk[key][1].p_value for key in family]).tolist()
    adjusted = dict(zip(family, p_holm, strict=True))
    return {
        key: why
        for key, (cell, v) in disk.items()
        if (why := _above(cell, v, adjusted.get(key, math.nan), len(family)))
    }


def _above(cell: CellView, v: Normalized, p_holm: float, family: int) -> str | None:
    """Why one headline disk figure is above the baseline and not a win (``above_baseline``);
    ``family``: how many of the run's headline disk figures Holm's step-down is over."""
    if not v.pct_of_native > 100:
        return None
    cache = cell.ran.disk_cache
    if p_holm < ALPHA or (cache and not math.isfinite(v.p_value)):
        if cache:
            return f"likely the host page cache: {cache}"
        return "suspect: faster than the baseline's own disk; look for a cache on the way"
    if not v.significant:
        return None
    before = (
        f"above it before Holm's step-down over the run's {family} headline disk figures, "
        f"not after (p = {v.p_value:.2g}, Holm p = {p_holm:.2g})"
    )
    if cache:
        return f"likely the host page cache ({cache}), {before}"
    return f"{before}: not shown to be faster than its disk"
