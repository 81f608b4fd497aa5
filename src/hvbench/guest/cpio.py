"""A reproducible initramfs: a newc cpio archive written in Python, from memory.

No staging directory, no mount, no root-owned files on the host: every entry has owner 0, a fixed
mtime and a sorted place, so the same inputs always give the same bytes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class Entry:
    """One file, directory, symlink or device node of the guest's root filesystem."""

    path: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def directory(path: str) -> Entry:
    return Entry(path, stat.S_IFDIR | 0o755)


def regular(path: str, data: bytes, executable: bool = False) -> Entry:
    return Entry(path, stat.S_IFREG | (0o755 if executable else 0o644), data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, stat.S_IFLNK | 0o777, target.encode())


def chardev(path: str, major: int, minor: int) -> Entry:
    return Entry(path, stat.S_IFCHR | 0o600, rdev=(major, minor))


def _pad(out: BinaryIO, size: int) -> None:
    out.write(b"\0" * (-size % 4))


def _header(out: BinaryIO, ino: int, entry: Entry, name: bytes) -> None:
    fields = (
        ino,
        entry.mode,
        0,  # uid
        0,  # gid
        2 if stat.S_ISDIR(entry.mode) else 1,
        0,  # mtime: fixed, for reproducible archives
        len(entry.data),
        0,
        0,
        entry.rdev[0],
        entry.rdev[1],
        len(name) + 1,
        0,
    )
    out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
    out.write(name + b"\0")
    _pad(out, 110 + len(name) + 1)


def add(entries: dict[str, Entry], entry: Entry) -> None:
    """Put an entry among ``entries`` (keyed by path), with the directories above it that are
    not there yet: the kernel's unpacker creates no parents."""
    parent = os.path.dirname(entry.path)
    while parent not in ("/", "") and parent not in entries:
        entries[parent] = directory(parent)
        parent = os.path.dirname(parent)
    entries[entry.path] = entry


def write(out: BinaryIO, entries: dict[str, Entry]) -> None:
    """Write the entries (keyed by path), parents before children, then the trailer."""
    for ino, path in enumerate(sorted(entries), start=1):
        entry = entries[path]
        _header(out, ino, entry, path.lstrip("/").encode())
        out.write(entry.data)
        _pad(out, len(entry.data))
    _header(out, 0, Entry("TRAILER!!!", 0), b"TRAILER!!!")
