"""The host memory an instance's processes hold, split into the guest's RAM and the rest.

PSS (proportional set size) charges each resident page to the processes that map it in equal
shares, so summing it over an instance's processes counts the pages they share (a UML kernel
and its address-space processes) once, and a page a whole group shares (the QEMU binary, the
guest kernel file in the page cache) one N-th to each of N instances: what one more instance
really costs. The guest's RAM is the mapping the size of the guest's memory (QEMU's RAM block,
UML's physical memory file); its resident pages are the RAM the guest touched, which the guest
would use on bare metal too. Everything else is the VMM's overhead: its heap, device buffers,
TCG's translation cache, mapped files.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostMemory:
    """Bytes, summed over an instance's host processes."""

    pss: int
    guest_ram: int
    """PSS of the mappings exactly the guest's memory size: the guest RAM it touched."""
    processes: int

    @property
    def overhead(self) -> int:
        return self.pss - self.guest_ram


def host_memory(pids: list[int], guest_bytes: int) -> HostMemory:
    """Read the processes' mappings (/proc/PID/smaps); a process that is gone counts nothing."""
    pss = guest = seen = 0
    for pid in pids:
        try:
            maps = psutil.Process(pid).memory_maps(grouped=False)
        except psutil.Error:
            continue
        seen += 1
        for m in maps:
            pss += m.pss
            if m.size == guest_bytes:
                guest += m.pss
    return HostMemory(pss, guest, seen)
