"""What the host is, stored with every run: numbers without it cannot be compared."""

from __future__ import annotations

import contextlib
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

from hvbench.host import conditions
from hvbench.host.process import probe
from hvbench.store import Inventory


@dataclass(frozen=True)
class Tool:
    """A program hvbench runs, the Debian package that has it, and how it tells its version."""

    package: str
    version_args: tuple[str, ...] = ("--version",)


TOOLS: dict[str, Tool] = {
    "qemu-system-x86_64": Tool("qemu-system-x86"),
    "fio": Tool("fio"),
    "iperf3": Tool("iperf3"),
    "iperf": Tool("iperf"),
    # an unknown option: its usage ends in its version; with none, a user's bonnie++ benchmarks
    # the working directory (root's refuses without -u)
    "bonnie++": Tool("bonnie++", ("-h",)),
    "dbench": Tool("dbench", ()),
    "sysbench": Tool("sysbench"),
    "stress-ng": Tool("stress-ng"),
    "povray": Tool("povray"),
    "/usr/games/stockfish": Tool("stockfish", ("quit",)),  # Debian's games are not on $PATH
    "xz": Tool("xz-utils"),
    "zstd": Tool("zstd"),
    "sqlite3": Tool("sqlite3"),
    "openssl": Tool("openssl", ("version",)),
    "sockperf": Tool("sockperf"),
    "gcc": Tool("gcc"),
    "make": Tool("make"),
    "nsenter": Tool("util-linux"),
    "losetup": Tool("util-linux"),
    "ip": Tool("iproute2", ("-V",)),
    "mkfs.ext4": Tool("e2fsprogs", ("-V",)),
    "perf": Tool("linux-perf"),
}
"""Programs a run may need; their versions are recorded with every run."""


def tool_version(tool: str) -> str | None:
    """The tool's version line, or None when it is not installed."""
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        proc = probe(
            [path, *(TOOLS[tool].version_args if tool in TOOLS else ("--version",))], timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in (proc.stdout + proc.stderr).splitlines():
        if re.search(r"\d+\.\d+", line):
            return line.strip()[:200]
    return "unknown"


def boot_id() -> str:
    """This boot of the host, or "unknown": what a probe's verdict (KVM, UML's xstate) is
    remembered for."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _os_release() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "unknown"
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', text, re.MULTILINE)
    return m.group(1) if m else "unknown"


def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    """The CPU's model name and its flags."""
    model = "unknown"
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    return model, tuple(flags)


def _virtualization() -> str:
    try:
        out = subprocess.run(
            ["systemd-detect-virt"], capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() or "none"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


PVM_ONLY = "is kvm_pvm's, which runs only PVM-enabled guest kernels, not a stock guest"
"""What doctor and the drivers say of a /dev/kvm that ``kvm_is_pvm_only``."""


def kvm_is_pvm_only(sys: Path = Path("/sys")) -> bool:
    """Whether this host's /dev/kvm is kvm_pvm's alone, which runs only PVM-enabled guest
    kernels: no stock guest boots under it, so no probe needs to try one."""
    hardware = ("kvm_intel", "kvm_amd")
    module = sys / "module"
    return (module / "kvm_pvm").is_dir() and not any((module / m).is_dir() for m in hardware)


def host_is_a_guest() -> bool:
    """Whether this host is itself a virtual machine (the CPU's hypervisor flag)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return "hypervisor" in line.split()
    return False


class Capacity(NamedTuple):
    """What a study's instances must fit in."""

    memory: int
    """Bytes."""
    cores: int
    """Logical cores."""


def capacity() -> Capacity:
    """This host's memory in bytes and its logical cores: what a study's instances must fit."""
    return Capacity(psutil.virtual_memory().total, psutil.cpu_count() or 1)


def collect() -> Inventory:
    """The host inventory: CPU, cores, memory, kernel, distribution, virtualization, tools, and
    the conditions that make figures drift (``host.conditions``), the load among them."""
    model, flags = _cpuinfo()
    return Inventory(
        hostname=platform.node(),
        cpu_model=model,
        cpu_flags=flags,
        cores_logical=psutil.cpu_count() or 0,
        cores_physical=psutil.cpu_count(logical=False) or 0,
        memory_bytes=psutil.virtual_memory().total,
        kernel=platform.release(),
        distribution=_os_release(),
        virtualization=_virtualization(),
        python=platform.python_version(),
        tools={tool: tool_version(tool) for tool in TOOLS},
        conditions=tuple(c.as_json() for c in conditions.check()),
    )
