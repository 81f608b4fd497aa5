"""A guest's serial console, read from its VMM's stdout: kept in a bounded log, and the boot's
phases timestamped as their markers pass (the kernel's first message, init, the agent's start),
the same way for every VMM that writes its guest's console there (QEMU, Firecracker, Cloud
Hypervisor)."""

from __future__ import annotations

import io
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, ClassVar

import psutil

from hvbench.drivers.base import BootPhases
from hvbench.drivers.last_words import VmmFailed
from hvbench.host.resources import Ledger, Resource

CONSOLE_LIMIT = 16 << 20
"""Bytes of a guest's console kept in its log file; the rest is dropped."""


class Console(threading.Thread):
    """Drains a VMM's stdout (the guest's serial console) into a bounded log and timestamps the
    boot phases, in seconds since the VMM's process started."""

    MARKERS: ClassVar[dict[str, bytes]] = {"init": b"hvbench: init", "agent": b"hvbench: agent"}
    _STAMP = re.compile(rb"^\[\s*(\d+\.\d+)\]")

    def __init__(self, pipe: IO[bytes] | None, log: Path, started: float) -> None:
        super().__init__(daemon=True)
        assert isinstance(pipe, io.BufferedReader), "the VMM's stdout, a pipe Popen buffers"
        self.pipe, self.log, self.started = pipe, log, started
        self.phases: dict[str, float] = {}
        self.kernel_clock: dict[str, float] = {}
        self._cond = threading.Condition()

    def run(self) -> None:
        kept = 0
        partial = b""
        with self.log.open("wb") as out:
            while chunk := self.pipe.read1(65536):
                now = time.monotonic() - self.started
                if kept < CONSOLE_LIMIT:
                    out.write(chunk[: CONSOLE_LIMIT - kept])
                    out.flush()
                    kept += len(chunk)
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()[-4096:]
                for line in [*lines, partial]:
                    self._note(line.strip(b"\r"), now)
        with self._cond:
            self._cond.notify_all()

    def _note(self, line: bytes, now: float) -> None:
        stamp = self._STAMP.match(line)
        if stamp:
            # the kernel started at (arrival - its own clock) at the latest; the earliest
            # such estimate over all lines is the closest
            start = now - float(stamp.group(1))
            self.phases["kernel"] = min(self.phases.get("kernel", start), max(0.0, start))
            if b"Run /init as init process" in line:
                self.kernel_clock["init"] = float(stamp.group(1))
        for phase, marker in self.MARKERS.items():
            if phase not in self.phases and line.startswith(marker):
                with self._cond:
                    self.phases[phase] = now
                    self._cond.notify_all()

    def wait_for(self, phase: str, deadline: float, alive: Callable[[], bool]) -> float | None:
        """Seconds since start at which the phase was reached, or None by the deadline."""
        with self._cond:
            while phase not in self.phases:
                left = deadline - time.monotonic()
                if left <= 0 or not alive():
                    return None
                self._cond.wait(min(left, 0.5))
            return self.phases[phase]

    def ready(self) -> None:
        """Note the boot's last phase: the guest's agent answered, now."""
        self.phases["ready"] = time.monotonic() - self.started

    def boot_phases(self) -> BootPhases:
        """The phases an instance reports (``Instance.boot``), to the millisecond: kernel,
        init and ready (the agent's start is only a step towards ready)."""
        return BootPhases(**{k: round(v, 3) for k, v in self.phases.items() if k != "agent"})


def launch(
    argv: list[str], prefix: Path, ledger: Ledger, netns: str | None, what: str
) -> tuple[subprocess.Popen, Resource, Console, Path]:
    """Start a VMM whose stdout is its guest's serial console, inside ``netns`` if given (where
    its tap is): its stderr in ``prefix``.stderr, its console read into ``prefix``.console.log,
    the process recorded in the ledger. One that exits at once raises VmmFailed naming
    ``what`` with its last words."""
    if netns:
        argv = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
    stderr = prefix.with_suffix(".stderr")
    started = time.monotonic()
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    console = Console(proc.stdout, prefix.with_suffix(".console.log"), started)
    console.start()
    try:
        process = ledger.add_process(proc.pid)
    except psutil.Error as e:
        proc.wait()
        console.join(5)
        raise VmmFailed.of(
            f"{what} exited at once", proc, stderr=stderr, console=console.log
        ) from e
    return proc, process, console, stderr
