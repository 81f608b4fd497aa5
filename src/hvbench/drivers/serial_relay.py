"""A guest's serial line served on a unix socket, for VMMs that cannot listen on one themselves.

UML binds its line to a file descriptor (one end of a socketpair) and Xen exposes a domain's
console as a pty in dom0; qemu-guest-agent talks on the guest's end of either. The relay makes
that line look like QEMU's chardev socket, one client at a time, so the host side is the same
GuestAgent everywhere, reconnects included.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from pathlib import Path
from typing import BinaryIO

LOG_LIMIT = 4 << 20
"""Bytes of the guest's output kept in the console log at most."""


class LineRelay(threading.Thread):
    """Serves a serial line (any file descriptor: socket or pty) on a unix socket. What the
    guest sends while no client is connected is dropped from the stream, and GuestAgent
    resynchronises it anyway; with a ``log``, everything the guest sends is also kept there.

    The relay never blocks on the guest: bytes for it are queued and written as it takes them,
    so the listener is always served and a client's connect never waits on a full backlog."""

    QUEUE_LIMIT = 1 << 20
    """Bytes queued for a guest that does not read; a client sending more is dropped."""
    SEND_TIMEOUT = 30.0
    """Seconds a client may leave the guest's answer unread before it is dropped."""

    def __init__(self, line: int, path: str, log: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.line = line
        os.set_blocking(line, False)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.log = log
        self._logged = 0
        self._wake_r, self._wake_w = os.pipe()
        self._client: socket.socket | None = None
        self._to_guest = bytearray()

    def run(self) -> None:
        out = self.log.open("wb") if self.log else None
        try:
            while self._step(out):
                pass
        except OSError:
            return
        finally:
            if out:
                out.close()
            self._drop_client()
            self.listener.close()
            os.close(self.line)
            os.close(self._wake_r)

    def _step(self, out: BinaryIO | None) -> bool:
        """One round of the loop; False once the relay or the guest is gone."""
        readers: list = [self.listener, self.line, self._wake_r]
        if self._client:
            readers.append(self._client)
        writers = [self.line] if self._to_guest and self._may_write() else []
        ready, writable, _ = select.select(readers, writers, [], self._timeout())
        if self._wake_r in ready:
            return False
        if self.listener in ready:
            conn, _ = self.listener.accept()
            conn.settimeout(self.SEND_TIMEOUT)
            self._drop_client()
            self._client = conn
        if writable:
            del self._to_guest[: self._write(self._to_guest)]
        if self.line in ready:
            try:
                data = os.read(self.line, 1 << 16)
            except BlockingIOError:
                data = None
            if data == b"":
                return False  # the guest is gone
            if data and out and self._logged < LOG_LIMIT:
                out.write(data[: LOG_LIMIT - self._logged])
                out.flush()
                self._logged += len(data)
            if data and self._client:
                try:
                    self._client.sendall(data)
                except OSError:
                    self._drop_client()
        if self._client and self._client in ready:
            try:
                data = self._client.recv(1 << 16)
            except OSError:
                data = b""  # reset by the client
            if data and len(self._to_guest) + len(data) <= self.QUEUE_LIMIT:
                self._to_guest += data
                self._queued()
            else:
                self._drop_client()
        return True

    # how bytes reach the guest: subclasses adapt these to a line with quirks ---------------

    def _timeout(self) -> float | None:
        """Seconds the loop may sleep with nothing to do (None: until something happens)."""
        return None

    def _may_write(self) -> bool:
        return True

    def _write(self, data: bytes | bytearray) -> int:
        """Write what the line takes now; return how many bytes that was."""
        try:
            return os.write(self.line, data)
        except BlockingIOError:
            return 0

    def _queued(self) -> None:
        """Called when the client's bytes joined the queue for the guest."""

    def _drop_client(self) -> None:
        """Forget the client and what it still had queued for the guest: a new session starts
        with a resynchronisation."""
        if self._client:
            self._client.close()
        self._client = None
        self._to_guest.clear()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self.join(5)
        with contextlib.suppress(OSError):
            os.close(self._wake_w)
