"""The host memory an instance's processes hold, split into the guest's RAM and the rest.

PSS (proportional set size) charges each resident page to the processes that map it in equal
shares, so summing it over an instance's processes counts the pages they share (a UML kernel
and its address-space processes) once, and a page a whole group shares (the QEMU binary, the
guest kernel file in the page cache) one N-th to each of N instances: what one more instance
really costs. Processes that share one address space (UML's helper threads, made by clone
with CLONE_VM) are counted once: each of them shows all of it. The guest's memory is what the
instance says it is (``Instance.guest_ram``: QEMU's RAM block, UML's physical memory file,
gVisor's memory file and the files its application maps, all of a container's); its resident
pages are the memory the guest touched, which the guest would use on bare metal too. Everything
else is the VMM's overhead: its heap, device buffers, TCG's translation cache, mapped files.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostMemory:
    """Bytes, summed over an instance's host processes."""

    pss: int
    guest_ram: int
    """PSS of the mappings that hold the guest's memory: the guest memory it touched."""
    processes: int
    largest: tuple[tuple[str, int, int, bool], ...] = ()
    """The largest mappings (path, size, PSS, whether guest RAM), for the provenance: what the
    split was made of."""

    @property
    def overhead(self) -> int:
        return self.pss - self.guest_ram


def host_memory(pids: list[int], guest_ram: Callable[[str, int], bool]) -> HostMemory:
    """Read the processes' mappings (/proc/PID/smaps); ``guest_ram(path, size)`` says which
    hold the guest's RAM (``Instance.guest_ram``); a process that is gone counts nothing."""
    pss = guest = 0
    seen: list[int] = []
    mappings: list[tuple[str, int, int, bool]] = []
    for pid in pids:
        if any(_same_address_space(pid, other) for other in seen):
            continue
        try:
            maps = psutil.Process(pid).memory_maps(grouped=False)
        except psutil.Error:
            continue
        seen.append(pid)
        for m in maps:
            pss += m.pss
            ram = guest_ram(m.path, m.size)
            if ram:
                guest += m.pss
            mappings.append((m.path or "[anon]", m.size, m.pss, ram))
    largest = tuple(sorted(mappings, key=lambda m: -m[2])[:LARGEST])
    return HostMemory(pss, guest, len(seen), largest)


LARGEST = 4
"""Mappings the provenance names, the largest by PSS."""


_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _same_address_space(a: int, b: int) -> bool:
    """kcmp(2) KCMP_VM: whether two processes share one memory map (root may compare any)."""
    if _SYS_KCMP is None:
        return False
    rc: int = _libc.syscall(_SYS_KCMP, a, b, _KCMP_VM, 0, 0)
    return rc == 0
