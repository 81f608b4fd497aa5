"""The host side of the control channel: qemu-guest-agent over a virtio-serial port.

Why qemu-ga and not an agent of our own: it is Debian's, versioned with QEMU, and its guest-exec
and guest-file-* commands are all a benchmark harness needs. Its captured output is capped, so a
command's stdout and stderr go to files in the guest (through a tiny exec wrapper that runs argv
without a shell) and are read back in chunks of bounded size: tens of MB of fio JSON survive.

Everything the guest sends is untrusted: every line read is bounded, every answer is checked for
shape, and nothing from the guest reaches a shell. A wrong answer raises InstanceError, a late one
CommandTimeout, and the stream is resynchronised (guest-sync-delimited) before the next command.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import itertools
import json
import os
import random
import socket
import struct
import termios
import threading
import time
from collections.abc import Sequence
from typing import Any

from hvbench.errors import CommandTimeout, InstanceError
from hvbench.guest.files import EXEC_WRAPPER
from hvbench.host.process import OUTPUT_LIMIT, STDERR_LIMIT, ExecResult
from hvbench.toolenv import in_locale

CHUNK = 4 << 20
"""Bytes asked for per guest-file-read at most: its base64 answer stays well under LINE_LIMIT."""
FIRST_READ = 64 << 10
"""Bytes asked for by a file's first guest-file-read, twice as many by each next one up to
``chunk``: qemu-ga zeroes a buffer of the size asked, whose pages each guest-exec (a fork of
qemu-ga) leaves copy-on-write, so that asking 4 MiB for a command's few bytes of output cost
120-170 ms a command in a UML guest."""
LINE_LIMIT = 8 << 20
"""Longest answer line accepted from the guest."""
POLL = 0.1
"""Seconds between attempts to reach an agent that is still booting."""
ANSWER_WITHIN = 30.0
"""Seconds the agent gets to answer one request (a command's short timeout shortens it)."""
SENTINEL = b"\xff"
"""What qemu-ga writes before the answer to guest-sync-delimited."""

CONNECT_TIMEOUT_S = 10.0
_counter = itertools.count(1)


class AgentSilent(CommandTimeout):
    """The agent itself stopped answering: the guest hangs (a command's own timeout is a plain
    CommandTimeout, after which the guest is still fine)."""


class GuestAgent:
    """A connection to one guest's qemu-ga, safe to share between threads."""

    chunk: int = CHUNK
    """Bytes asked for per guest-file-read."""

    def __init__(self, socket_path: str, name: str) -> None:
        self.path = socket_path
        self.name = name
        self._sock: socket.socket | None = None
        self._buf = b""
        self._lock = threading.RLock()
        self._synced = False
        self._token = 0
        """The id of the latest guest-sync-delimited sent: the stream is in sync at its answer."""

    # transport -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._sock:
                self._sock.close()
            self._sock, self._buf, self._synced = None, b"", False

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # a VMM whose listen queue is full would otherwise keep connect() waiting for ever
            sock.settimeout(CONNECT_TIMEOUT_S)
            try:
                sock.connect(self.path)
            except TimeoutError:
                sock.close()
                raise InstanceError(
                    f"{self.name}: agent socket {self.path}: no connection in "
                    f"{CONNECT_TIMEOUT_S:.0f} s"
                ) from None
            except OSError as e:
                sock.close()
                raise InstanceError(f"{self.name}: agent socket {self.path}: {e.strerror}") from e
            try:
                self._greet(sock)
            except BaseException:
                sock.close()
                raise
            sock.settimeout(None)
            self._sock = sock
        return self._sock

    def _greet(self, sock: socket.socket) -> None:
        """What the VMM's socket wants before it carries the agent's stream (nothing: QEMU's
        chardev is the port itself)."""

    def _unread(self) -> int:
        """Bytes sent on the connection that the peer has not read yet (SIOCOUTQ), 0 if unknown.
        QEMU leaves what comes for a virtio-serial port unread until the guest opens the port."""
        if self._sock is None:
            return 0
        try:
            out = fcntl.ioctl(self._sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        except OSError:
            return 0
        unread: int = struct.unpack("i", out)[0]
        return unread

    def _send(self, message: dict, prefix: bytes = b"") -> None:
        try:
            self._connect().sendall(prefix + json.dumps(message).encode() + b"\n")
        except OSError as e:
            self.close()
            raise InstanceError(f"{self.name}: agent connection lost ({e.strerror})") from e

    def _fill(self, deadline: float) -> None:
        sock = self._connect()
        left = deadline - time.monotonic()
        if left <= 0:
            raise AgentSilent(f"{self.name}: no answer from the guest agent in time")
        sock.settimeout(left)
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            raise AgentSilent(f"{self.name}: no answer from the guest agent in time") from None
        except OSError as e:
            self.close()
            raise InstanceError(f"{self.name}: agent connection lost ({e.strerror})") from e
        if not data:
            self.close()
            raise InstanceError(f"{self.name}: the guest agent closed its channel (guest died?)")
        self._buf += data

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            if len(self._buf) > LINE_LIMIT:
                self.close()
                raise InstanceError(f"{self.name}: guest agent sent an over-long line; dropped")
            self._fill(deadline)
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    # protocol --------------------------------------------------------------------------

    def sync(self, timeout: float) -> None:
        """Resynchronise the stream: drop whatever is pending, up to the answer to a fresh id."""
        with self._lock:
            self._sync(timeout, set())

    def _sync(self, timeout: float, accept: set[int], resend: bool = True) -> int:
        """Send guest-sync-delimited with a fresh id (added to ``accept``) and return the first
        id of ``accept`` answered, dropping everything else; in sync if that is the latest one
        sent. Without ``resend`` (and with a sync already sent), only wait for an answer."""
        deadline = time.monotonic() + timeout
        if resend or not accept:
            self._token = random.randrange(1, 1 << 31) ^ next(_counter)
            accept.add(self._token)
            self._synced = False
            # SENTINEL first resets qemu-ga's JSON parser: the tail of a request cut off when
            # the guest (re)opened its port would otherwise make it read every later one as
            # garbage
            message = {"execute": "guest-sync-delimited", "arguments": {"id": self._token}}
            self._send(message, SENTINEL)
        while True:
            while SENTINEL not in self._buf:
                self._buf = b""
                self._fill(deadline)
            self._buf = self._buf[self._buf.index(SENTINEL) + 1 :]
            try:
                answer = json.loads(self._line(deadline))
            except ValueError:
                continue
            token = answer.get("return") if isinstance(answer, dict) else None
            if isinstance(token, int) and token in accept:
                self._synced = token == self._token
                return token

    def wait_ready(self, deadline: float, alive: Any = None) -> None:
        """Poll until the agent answers (the guest is booted), or raise past ``deadline``.

        A sync sent before qemu-ga opened its port may be lost, so it is resent every
        ``POLL`` seconds on the same connection, unless the peer has not even read the last
        one: QEMU holds what is sent to a virtio-serial port until the guest opens it, and
        qemu-ga would then answer every sync piled up while the guest booted (one per
        ``POLL``, dozens) before the stream is in sync. The answer to any of them means ready:
        on a loaded host qemu-ga may take longer than ``POLL`` to answer, and waiting for the
        answer to the latest one only would then never end (each comes too late for its own
        wait); the stream is then resynchronised past the answers still due."""
        sent: set[int] = set()
        while True:
            if alive is not None and not alive():
                raise InstanceError(f"{self.name}: the guest exited while booting")
            tried = time.monotonic()
            try:
                with self._lock:
                    resend = not (sent and self._unread())
                    self._sync(min(POLL, max(0.01, deadline - tried)), sent, resend)
                break
            except CommandTimeout:  # a transport that gives up at once must not spin
                time.sleep(max(0.0, tried + POLL - time.monotonic()))
            except InstanceError:
                self.close()  # not listening yet, or reset: connect again
                sent.clear()
                time.sleep(POLL)
            if time.monotonic() >= deadline:
                raise CommandTimeout(
                    f"{self.name}: the guest agent did not answer before the deadline"
                )
        with self._lock:
            if not self._synced:
                self._sync(max(POLL, deadline - time.monotonic()), set())

    def _request(self, message: dict, timeout: float) -> bytes:
        """Send one command on the synchronised stream and return its answer line."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if not self._synced:
                self.sync(timeout)
            self._send(message)
            try:
                return self._line(deadline)
            except CommandTimeout:
                self._synced = False
                raise

    def call(self, command: str, timeout: float, **arguments: Any) -> Any:
        """Run one agent command and return its ``return`` value."""
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        line = self._request(message, timeout)
        try:
            answer = json.loads(line)
        except ValueError:
            self._synced = False
            raise InstanceError(f"{self.name}: {command}: the agent answered non-JSON") from None
        if not isinstance(answer, dict):
            self._synced = False
            raise InstanceError(f"{self.name}: {command}: unexpected answer from the agent")
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            desc = str(error.get("desc", "unknown error"))[:300]
            raise InstanceError(f"{self.name}: {command}: {desc}")
        if "return" not in answer:
            self._synced = False
            raise InstanceError(f"{self.name}: {command}: unexpected answer from the agent")
        return answer["return"]

    # what instances use ----------------------------------------------------------------

    def spawn(
        self,
        argv: Sequence[str],
        stdin: bytes | None = None,
        capture: bool = True,
        answer_within: float = ANSWER_WITHIN,
    ) -> int:
        """Start argv in the guest, under hvbench's locale; with ``capture`` qemu-ga keeps its
        (capped) output."""
        command = in_locale(argv)
        args: dict[str, Any] = {"path": command[0], "arg": command[1:], "capture-output": capture}
        if stdin is not None:
            args["input-data"] = base64.b64encode(stdin).decode()
        answer = self.call("guest-exec", answer_within, **args)
        pid = answer.get("pid") if isinstance(answer, dict) else None
        if not isinstance(pid, int):
            raise InstanceError(f"{self.name}: guest-exec gave no pid")
        return pid

    def status(self, pid: int, answer_within: float = ANSWER_WITHIN) -> dict:
        answer = self.call("guest-exec-status", answer_within, pid=pid)
        if not isinstance(answer, dict) or not isinstance(answer.get("exited"), bool):
            raise InstanceError(f"{self.name}: guest-exec-status: unexpected answer")
        return answer

    def run(self, argv: Sequence[str], timeout: float) -> ExecResult:
        """A short helper command whose small output qemu-ga captures itself."""
        start = time.monotonic()
        pid = self.spawn(argv)
        status = self._wait(pid, start + timeout, argv)
        return ExecResult(
            argv=list(argv),
            exit_code=_exit_code(status),
            stdout=_b64(status.get("out-data", ""), self.name)[:OUTPUT_LIMIT],
            stderr=_b64(status.get("err-data", ""), self.name)[:STDERR_LIMIT],
            seconds=time.monotonic() - start,
            truncated=bool(status.get("out-truncated")),
        )

    def exec(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
        """Run argv in the guest with its output in guest files, then read them back, bounded."""
        if not argv:
            raise InstanceError(f"{self.name}: empty command")
        tag = f"/tmp/.hvbench-{os.getpid()}-{next(_counter)}"
        out, err = f"{tag}.out", f"{tag}.err"
        start = time.monotonic()
        # a guest that cannot even answer within the command's own timeout hangs
        answer_within = min(ANSWER_WITHIN, max(2.0, timeout))
        pid = self.spawn([EXEC_WRAPPER, out, err, *argv], stdin, False, answer_within)
        try:
            status = self._wait(pid, start + timeout, argv, answer_within)
            seconds = time.monotonic() - start
            try:
                stdout, truncated = self.read_file(out, OUTPUT_LIMIT, timeout=max(60, timeout))
            except CommandTimeout:
                raise
            except InstanceError as e:
                # the wrapper died before it made its output file (killed, out of memory)
                raise InstanceError(
                    f"{self.name}: {argv[0]} never ran: the exec wrapper ended with "
                    f"status {_exit_code(status)} before writing its output ({e})"
                ) from e
            stderr, _ = self.read_file(err, STDERR_LIMIT, timeout=60)
        finally:
            self._remove(out, err)
        return ExecResult(list(argv), _exit_code(status), stdout, stderr, seconds, truncated)

    def _wait(
        self, pid: int, deadline: float, argv: Sequence[str], answer_within: float = ANSWER_WITHIN
    ) -> dict:
        pause = 0.01
        while True:
            status = self.status(pid, answer_within)
            if status["exited"]:
                return status
            if time.monotonic() >= deadline:
                self._kill(pid)
                raise CommandTimeout(f"{self.name}: {argv[0]} still running at its timeout; killed")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    def _kill(self, pid: int) -> None:
        """Kill a timed-out command and everything it started inside the guest (best effort):
        the exec wrapper made it the leader of a process group of its own."""
        try:
            self.run(["/bin/kill", "-KILL", f"-{pid}"], 10)
            self.status(pid)  # reap it, so qemu-ga forgets it
        except InstanceError:
            pass

    def _remove(self, *paths: str) -> None:
        with contextlib.suppress(InstanceError):  # else they go with the guest's tmpfs
            self.run(["/bin/rm", "-f", *paths], 30)

    def read_file(self, path: str, limit: int, timeout: float) -> tuple[bytes, bool]:
        """Up to ``limit`` bytes of a guest file, read in chunks; True if there was more."""
        deadline = time.monotonic() + timeout
        handle = self.call("guest-file-open", 30, path=path, mode="r")
        if not isinstance(handle, int):
            raise InstanceError(f"{self.name}: guest-file-open gave no handle")
        chunks: list[bytes] = []
        size, truncated, count = 0, False, min(FIRST_READ, self.chunk)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommandTimeout(f"{self.name}: reading {path} took too long")
                answer = self.call("guest-file-read", left, handle=handle, count=count)
                count = min(2 * count, self.chunk)
                if not isinstance(answer, dict):
                    raise InstanceError(f"{self.name}: guest-file-read: unexpected answer")
                data = _b64(answer.get("buf-b64", ""), self.name)
                keep = data[: max(0, limit - size)]
                chunks.append(keep)
                size += len(keep)
                if len(keep) < len(data):
                    truncated = True
                    break
                if answer.get("eof") or not data:
                    break
        finally:
            with contextlib.suppress(InstanceError):
                self.call("guest-file-close", 30, handle=handle)
        return b"".join(chunks), truncated


def _b64(value: object, name: str) -> bytes:
    if not isinstance(value, str):
        raise InstanceError(f"{name}: guest agent sent data that is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InstanceError(f"{name}: guest agent sent invalid base64") from None


def _exit_code(status: dict) -> int:
    """The exit code, or 128+signal for a command killed by a signal, as a shell reports it."""
    signal = status.get("signal")
    if isinstance(signal, int):
        return 128 + signal
    code = status.get("exitcode")
    return code if isinstance(code, int) else -1


class VsockAgent(GuestAgent):
    """qemu-ga listening on a vsock port in the guest, reached through the Unix socket that
    Firecracker and Cloud Hypervisor give a guest's vsock on the host (their "hybrid vsock"):
    ``CONNECT <port>`` on it, answered ``OK <host port>``, then the agent's stream. A guest
    whose agent is not listening yet gets the connection closed, which ``wait_ready`` retries."""

    def __init__(self, socket_path: str, name: str, port: int) -> None:
        super().__init__(socket_path, name)
        self.port = port

    def _greet(self, sock: socket.socket) -> None:
        try:
            sock.sendall(f"CONNECT {self.port}\n".encode())
            answer = b""
            while not answer.endswith(b"\n") and len(answer) < 64:
                data = sock.recv(1)
                if not data:
                    break
                answer += data
        except OSError as e:
            raise InstanceError(f"{self.name}: vsock {self.path}: {e.strerror or e}") from e
        if not answer.startswith(b"OK "):
            raise InstanceError(
                f"{self.name}: vsock port {self.port} not listening yet ({answer[:40]!r})"
            )
