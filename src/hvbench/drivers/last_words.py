"""What an error about a dead VMM (QEMU, UML, a container runtime) says: how it ended and the
last lines it wrote, so that "QEMU died" is never the whole story."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hvbench.errors import InstanceError

_CAUSE = re.compile(r"error|fail|panic|fault|abort|internal|killed|oops", re.IGNORECASE)


def log_excerpt(path: Path | None, lines: int = 3) -> str:
    """The last lines of a log, preceded by the first line before them that names a cause
    (QEMU's "KVM internal error" comes before a register dump; a panic before its trace)."""
    try:
        text = path.read_bytes()[-16000:].decode(errors="replace") if path else ""
    except OSError:
        return "(no log)"
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tail = kept[-lines:]
    cause = next((ln for ln in kept[:-lines] if _CAUSE.search(ln)), None)
    return " | ".join([*([cause, "..."] if cause else []), *tail])[:800] or "(empty)"


def exit_status(returncode: int | None) -> str:
    """How a process ended, as a person reads it (Popen's negative codes are signals)."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def last_words(returncode: int | None, **logs: Path | None) -> str:
    """What every "it died" message carries: how the VMM ended (when it is a process of ours)
    and the last lines of each of its logs, e.g. ``stderr=..., console=...``."""
    parts = [] if returncode is None else [exit_status(returncode)]
    parts += [f"{name}: {log_excerpt(path)}" for name, path in logs.items()]
    return "; ".join(parts)


class VmmFailed(InstanceError):
    """A VMM process (QEMU, UML, Firecracker, Cloud Hypervisor) that exited or refused while
    its instance started or moved, carrying what a caller reads apart, after QEMU's
    ``VMLaunchFailure(exitcode, command, output)``: what happened, its exit code (None while it
    runs), the command that ran it and its last words; the message is the one line a user
    reads."""

    def __init__(
        self, what: str, exitcode: int | None, command: Sequence[str], output: str
    ) -> None:
        super().__init__(f"{what} ({output})")
        self.what = what
        self.exitcode = exitcode
        self.command = tuple(command)
        self.output = output

    @classmethod
    def of(cls, what: str, proc: subprocess.Popen, **logs: Path | None) -> VmmFailed:
        """The failure of the VMM running as ``proc``, its last words read from ``logs``."""
        args = proc.args
        command = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
        returncode = proc.poll()
        return cls(what, returncode, command, last_words(returncode, **logs))
