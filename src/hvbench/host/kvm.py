"""Whether KVM runs stock guests on this host: a host fact, which ``accel: auto`` takes and the
plan's pace reads (``study show``, ETAs). A boot probe decides it (the qemu driver's, which boots
a stock guest: ``drivers.qemu_process.kvm_verdict``) and its verdict is kept in a cache directory
until the host reboots; here it is read without booting anything."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hvbench.host.inventory import boot_id, kvm_is_pvm_only


@dataclass(frozen=True)
class AccelVerdict:
    """The accelerator a QEMU machine runs under here, and why."""

    accel: Literal["kvm", "tcg"]
    reason: str


def _verdict_path(binary: str, cache: Path) -> Path:
    key = hashlib.sha256(binary.encode()).hexdigest()[:16]
    return cache / f"kvm-probe-{key}.json"


def known_kvm_verdict(binary: str, cache: Path) -> AccelVerdict | None:
    """The verdict a probe of the QEMU at ``binary`` kept in ``cache`` since the host booted,
    else None."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(_verdict_path(binary, cache).read_text())
        if saved["boot_id"] == boot_id() and saved["binary"] == binary:
            return AccelVerdict(saved["accel"], saved["reason"])
    return None


def keep_kvm_verdict(binary: str, verdict: AccelVerdict, cache: Path) -> None:
    """Keep a probe's verdict in ``cache`` until the host reboots, where this user can write
    there (one with no home directory probes each time)."""
    path = _verdict_path(binary, cache)
    record = {"boot_id": boot_id(), "binary": binary, **vars(verdict)}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))


def kvm_runs_guests(binary: str | None, cache: Path) -> bool:
    """Whether KVM runs stock guests on this host, without booting a probe: the verdict a probe
    of the QEMU at ``binary`` kept in ``cache`` since the host booted, else what /dev/kvm shows
    (there, usable by this user, and not kvm_pvm's alone)."""
    verdict = known_kvm_verdict(binary, cache) if binary else None
    if verdict is not None:
        return verdict.accel == "kvm"
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return usable and not kvm_is_pvm_only()
