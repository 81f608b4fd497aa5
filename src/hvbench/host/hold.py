"""One measuring run per host: two runs at once would each measure the other's load.

A run holds an exclusive lock on ``measuring.lock`` in the state directory while it measures:
an open file description lock (``F_OFD_SETLK``), which the kernel lets go of when the holder's
process ends, however it ends (SIGKILL included), so a dead holder never blocks, as a dead
owner's ledger is an orphan. Unlike ``flock``, such a lock can be looked at without being taken
(``F_OFD_GETLK``), so doctor's look never makes a starting run refuse. The file says
who holds it (run id, study, pid, since when), for the line that refuses a second run.
Reading commands (report, compare, history, doctor, study) take no hold.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.host.resources import STATE_ROOT, state_dir

LOCK = "measuring.lock"
_FLOCK = struct.Struct("hhqqi4x")
"""Linux's ``struct flock`` (type, whence, start, length, pid): the whole file when length is 0."""


@dataclass(frozen=True)
class Holder:
    """Who measures on this host."""

    run_id: str
    study: str
    pid: int
    since: float
    """When the hold was taken (seconds since the epoch)."""

    def __str__(self) -> str:
        at = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"run {self.run_id} (study {self.study!r}, pid {self.pid}, since {at})"


class HostBusy(HvbenchError):
    """Another run measures on this host."""


class HostHold:
    """This process's hold on the host for one run: taken by ``take``, let go by ``release``
    (or by the process's end)."""

    def __init__(self, fd: int, holder: Holder) -> None:
        self._fd = fd
        self.holder = holder

    @classmethod
    def take(
        cls,
        run_id: str,
        study: str,
        wait: bool = False,
        on_wait: Callable[[Holder | None], None] | None = None,
        root: Path | None = None,
    ) -> HostHold:
        """Hold the host for ``run_id``; where another run holds it, HostBusy naming it, or,
        with ``wait``, block until it lets go (``on_wait`` told once, with the holder)."""
        path = state_dir(root=root) / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise HvbenchError(
                f"cannot hold the host for the run: {path}: {e.strerror}; set HVBENCH_STATE_DIR "
                "to a directory this user can write"
            ) from None
        try:
            if not _lock(fd, fcntl.F_OFD_SETLK):
                holder = _read(fd)
                if not wait:
                    who = str(holder) if holder else "another run (starting)"
                    raise HostBusy(
                        f"{who} is measuring on this host; two runs at once measure each "
                        "other: wait for it (hvbench run --wait) or stop it"
                    )
                if on_wait is not None:
                    on_wait(holder)
                _lock(fd, fcntl.F_OFD_SETLKW)
            holder = Holder(run_id, study, os.getpid(), time.time())
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(asdict(holder)).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, holder)

    @contextlib.contextmanager
    def released_on_error(self) -> Iterator[None]:
        """Let go of the host where what follows its taking fails (a run not stored)."""
        try:
            yield
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Let go of the host (once; later calls do nothing)."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the only descriptor lets go of the lock
        self._fd = -1

    def __del__(self) -> None:
        """A session made but never run lets go of the host when it is dropped."""
        self.release()


def holder(root: Path | None = None) -> Holder | None:
    """Who measures on this host now, or None (for ``doctor``): a look that takes nothing."""
    path = (root or STATE_ROOT) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        asked = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, asked)
        if _FLOCK.unpack(answer)[0] == fcntl.F_UNLCK:
            return None
        return _read(fd)
    finally:
        os.close(fd)


def _lock(fd: int, command: int) -> bool:
    """Lock the whole file for writing with ``command`` (``F_OFD_SETLK`` tries, ``…SETLKW``
    waits); False where another holds it."""
    try:
        fcntl.fcntl(fd, command, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except (BlockingIOError, PermissionError):
        return False
    return True


def _read(fd: int) -> Holder | None:
    """The holder the lock file names; None where it says nothing yet (being taken)."""
    try:
        return Holder(**json.loads(os.pread(fd, 4096, 0) or b"null"))
    except (TypeError, ValueError):
        return None
