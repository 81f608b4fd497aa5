"""The host's huge page pools, which a run grows for its guests' memory and shrinks again.

Guest memory on hugetlbfs needs the pages reserved in the host's pool beforehand
(/sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages). A run adds exactly the pages its
guests need, records the addition in its ledger first (so ``hvbench cleanup`` gives them back
after a SIGKILL), and gives them back when the guests stop.
"""

from __future__ import annotations

import threading
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.host.resources import Ledger, Resource

POOLS = Path("/sys/kernel/mm/hugepages")
PAGE_KIB = {"2M": 2048, "1G": 1 << 20}
_lock = threading.Lock()
"""Pools are grown by read-modify-write: one group of guests at a time within a process."""


def pool(size: str) -> Path:
    return POOLS / f"hugepages-{PAGE_KIB[size]}kB" / "nr_hugepages"


def pages_for(size: str, memory: int) -> int:
    """Huge pages of ``size`` that ``memory`` bytes take (rounded up)."""
    page = PAGE_KIB[size] << 10
    return -(-memory // page)


def _available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def misfit(size: str, memory: int) -> str | None:
    """Why this host cannot give ``memory`` bytes of ``size`` pages, in one line, or None. The
    kernel may still fall short on fragmented memory: ``reserve`` says so before any guest."""
    if not pool(size).exists():
        return f"hugepages: {size}: this host's kernel has no {size} huge pages ({POOLS})"
    pages = pages_for(size, memory)
    if pages * PAGE_KIB[size] > _available_kib():
        return (
            f"hugepages: {size}: {pages} pages need {pages * PAGE_KIB[size] >> 10} MiB and the "
            f"host has {_available_kib() >> 10} MiB available"
        )
    return None


def reserve(ledger: Ledger, size: str, pages: int, who: str) -> Resource:
    """Grow the host's pool of ``size`` pages by ``pages``; all of them or an HvbenchError."""
    path = pool(size)
    with _lock:
        res = ledger.add("hugepages", str(path), pages=pages)
        before = int(path.read_text())
        try:
            path.write_text(str(before + pages))
        except OSError as e:
            ledger.forget(res)
            raise HvbenchError(f"{who}: hugepages: {size}: cannot grow {path}: {e}") from e
        got = int(path.read_text()) - before
        if got < pages:
            path.write_text(str(before))
            ledger.forget(res)
            raise HvbenchError(
                f"{who}: hugepages: {size}: the host could reserve only {got} of {pages} pages "
                "(memory too fragmented: free memory, or echo 1 > /proc/sys/vm/compact_memory)"
            )
    return res
