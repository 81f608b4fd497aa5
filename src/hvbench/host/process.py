"""Running a host process with a timeout and bounded output capture; listing the host's
processes."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from hvbench.errors import CommandTimeout, HvbenchError

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Debian's PATH for root: where the system's programs are, whatever PATH a user has (one
without /sbin), and the PATH of what runs in a container or a server's script."""
OUTPUT_LIMIT = 64 * 1024 * 1024
"""Bytes of a command's stdout kept at most; guest output is untrusted and bounded."""
STDERR_LIMIT = 1024 * 1024


@dataclass
class ExecResult:
    """What a command inside an instance did."""

    argv: list[str]
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self) -> str:
        """stdout decoded leniently: guest output is untrusted bytes."""
        return self.stdout.decode("utf-8", errors="replace")

    def describe_failure(self) -> str:
        tail = self.stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
        last = " | ".join(tail) if tail else "(no stderr)"
        return f"{self.argv[0]} exited with {self.exit_code}: {last}"


SAID_LIMIT = 300
"""Characters of a host command's output a message about it quotes: the end, where the cause
is, within one line's room."""


def output_tail(proc: subprocess.CompletedProcess[str]) -> str:
    """The end of what a host command said (its stderr, else its stdout), for a message that
    names the cause."""
    return (proc.stderr or proc.stdout or "").strip()[-SAID_LIMIT:]


def failed(what: str, proc: subprocess.CompletedProcess[str]) -> str:
    """The message of a host command that failed: "``what`` failed: " and what it said."""
    return f"{what} failed: {output_tail(proc)}"


def checked(argv: list[str]) -> None:
    """Run a command of the host's administration (useradd, mount, ip, setfacl); HvbenchError
    with its words if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HvbenchError(failed(argv[0], proc))


def probe(argv: Sequence[str], timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """A program asked about itself (its ``--version``), in a throwaway working and temporary
    directory, gone after it: run by a user, Podman makes its runtime directories in TMPDIR even
    for --version, and a program that takes the question for work writes where it runs."""
    with tempfile.TemporaryDirectory(prefix="hvbench-probe-", ignore_cleanup_errors=True) as tmp:
        env = {**os.environ, "TMPDIR": tmp}
        return subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip


class _Capture(threading.Thread):
    """Drains a pipe, keeping at most ``limit`` bytes, so a chatty tool can neither block on a
    full pipe nor exhaust our memory."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def run(self) -> None:
        while chunk := self.pipe.read(65536):
            keep = max(0, min(len(chunk), self.limit - self.size))
            if keep:
                self.chunks.append(chunk[:keep])
                self.size += keep
            if keep < len(chunk):
                self.truncated = True

    def data(self) -> bytes:
        return b"".join(self.chunks)


class LiveProcesses:
    """The host processes of the commands in flight (``run_bounded``'s ``on_start`` and
    ``on_exit``), for an instance whose commands are its processes (native, a container)."""

    def __init__(self) -> None:
        self._pids: set[int] = set()
        self._lock = threading.Lock()  # run_bounded calls from the workloads' threads

    def started(self, pid: int) -> None:
        with self._lock:
            self._pids.add(pid)

    def exited(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(self._pids)


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    stdin: bytes | None = None,
    limit: int = OUTPUT_LIMIT,
    on_start: Callable[[int], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> ExecResult:
    """Run argv (no shell) in a session of its own; kill the whole session past ``timeout``."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if on_start:
        on_start(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None, "both are pipes"
    out, err = _Capture(proc.stdout, limit), _Capture(proc.stderr, STDERR_LIMIT)
    out.start()
    err.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    try:
        code = _wait(proc, timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise CommandTimeout(f"{argv[0]} still running after {timeout:.0f} s; stopped") from None
    finally:
        if on_exit:
            on_exit(proc.pid)
    out.join(5)
    err.join(5)
    return ExecResult(
        argv=list(argv),
        exit_code=code,
        stdout=out.data(),
        stderr=err.data(),
        seconds=time.monotonic() - start,
        truncated=out.truncated,
    )


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    """``proc.wait(timeout)`` without its polling: Popen.wait with a timeout wakes every 50 ms to
    ask whether the child ended, 20 wakeups a second taken from the CPUs a tool is measuring
    while a bare run has none; a pidfd sleeps until the child ends or the timeout passes."""
    pidfd = os.pidfd_open(proc.pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        ended = poller.poll(max(0, int(timeout * 1000)))
    finally:
        os.close(pidfd)
    if not ended:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return proc.wait()


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        pipe.write(data)
        pipe.close()


def time_left(deadline: float) -> float:
    """Seconds a step may take before ``deadline``, at least one: a step that starts late
    still gets the chance to answer and say why it failed."""
    return max(1.0, deadline - time.monotonic())


def executable(name: str) -> str | None:
    """The program a setting names (a VMM's ``binary``): a path, or a program looked up in
    hvbench's virtualenv, then PATH (``which``); None if there is none."""
    if "/" in name:
        path = os.path.abspath(name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return which(name)


def which(name: str) -> str | None:
    """A program from hvbench's own virtualenv first (where setup installs runsc and vegeta),
    then PATH."""
    local = Path(sysconfig.get_path("scripts")) / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def processes(attrs: list[str]) -> Iterator[psutil.Process]:
    """Every process on the host now, each with ``info`` read as ``psutil.process_iter`` reads
    it, but each made afresh: ``process_iter`` caches its Process objects between calls, and
    skips a PID for one call once any Process object has seen that PID reused (psutil issue
    2601). A host that has run a few thousand processes on pid_max 32768 reuses PIDs, so a
    process we look for would go unseen."""
    for pid in psutil.pids():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            proc.info = proc.as_dict(attrs)
            yield proc
