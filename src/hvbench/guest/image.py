"""Guest images built from Debian packages, cached by a content hash of their inputs.

An image is a kernel from Debian's package plus an initramfs holding busybox, qemu-guest-agent
(the control channel), mkfs.ext4 and the benchmark tools: the host's own binaries with their
shared libraries, so a tool runs at the same version in the guest as natively. The manifest
(packages, versions, sha256 of every file) is stored with every run that used the image.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from hvbench.errors import HvbenchError, ToolMissing
from hvbench.guest import cpio, kernel
from hvbench.guest.files import GUEST_FILES
from hvbench.host.process import SYSTEM_PATH

FORMAT_VERSION = 2
"""Bumped whenever the layout of an image changes, so old cache entries are not reused."""

BASE_TOOLS = ("qemu-ga", "mkfs.ext4")
"""Programs every guest has besides busybox: the agent, and the mkfs that formats a data disk
the host cannot (a qcow2 image: ``mount_data_disk``)."""


_EXTRA_DATA = {
    "mkfs.ext4": ("/etc/mke2fs.conf",),
    "dbench": ("/usr/share/dbench/client.txt",),  # dbench's load file (disk workload)
    "povray": (  # its configuration, include files and the benchmark scene (cpu apps)
        "/etc/povray/3.7/povray.conf",
        "/etc/povray/3.7/povray.ini",
        "/usr/share/povray-3.7/include",
        "/usr/share/doc/povray/examples/advanced/benchmark",
    ),
}
"""Data files (or directories of them) a tool, named or given by path, reads besides its
libraries."""


def cache_root() -> Path:
    override = os.environ.get("HVBENCH_IMAGE_CACHE")
    return Path(override) if override else platformdirs.user_cache_path("hvbench") / "images"


@dataclass(frozen=True)
class GuestImage:
    """A built image in the cache."""

    key: str
    dir: Path

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = json.loads((self.dir / "manifest.json").read_text())
        return manifest

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.cpio"

    @property
    def bzimage(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def vmlinux(self) -> Path | None:
        path = self.dir / "vmlinux"
        return path if path.exists() else None

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.iterdir() if p.is_file())


# host files -------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _which(tool: str) -> Path:
    found = shutil.which(tool, path=SYSTEM_PATH)
    if not found:
        raise ToolMissing(
            f"guest image: {tool!r} is not installed on the host; the guest gets the host's "
            f"binaries, so install it (apt-get install the package that has {tool})"
        )
    return Path(found)


_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def _libraries(binary: Path) -> list[Path]:
    """Shared libraries (and the loader) the binary needs, from ldd; none for a static one."""
    st = binary.stat()
    return list(_ldd(str(binary), st.st_mtime_ns, st.st_size))


@functools.cache
def _ldd(binary: str, mtime_ns: int, size: int) -> tuple[Path, ...]:
    """ldd's answer, once per process for the binary as it is on disk (its time and size in the
    key): a run looks its tools up once for each platform it opens, and each ldd, which runs the
    loader, takes seconds in a nested lab's L1."""
    proc = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return ()  # "not a dynamic executable"
    return tuple(Path(m.group(1)) for m in map(_LDD_PATH.search, proc.stdout.splitlines()) if m)


def _script_targets(script: bytes) -> list[Path]:
    """Programs a wrapper script execs by absolute path (Debian's 7z is such a script)."""
    names = re.findall(rb"(/usr/\S+|/bin/\S+|/lib/\S+)", script)
    paths = [Path(n.decode(errors="replace").strip("\"'")) for n in names]
    return [p for p in paths if p.is_file() and os.access(p, os.X_OK)]


def host_files(tools: Iterable[str]) -> dict[str, Path]:
    """Guest path -> host file for the tools, what they run, and every library they need. A
    library is not asked of ldd in turn: the loader's answer for a program already holds what
    its libraries need (154 ldd calls for every workload's tools became 18)."""
    files: dict[str, Path] = {}
    todo = [_which(t) for t in sorted({*BASE_TOOLS, *tools})]
    for tool in {*BASE_TOOLS, *tools}:
        for path in map(Path, _EXTRA_DATA.get(Path(tool).name, ())):
            if path.is_dir():
                todo += sorted(p for p in path.rglob("*") if p.is_file())
            elif path.exists():
                todo.append(path)
    libraries: set[Path] = set()
    while todo:
        path = todo.pop()
        if str(path) in files:
            continue
        files[str(path)] = path.resolve()
        head = path.read_bytes()[:4096]
        if head.startswith(b"#!"):
            todo += _script_targets(path.read_bytes())
        elif head.startswith(b"\x7fELF") and path not in libraries:
            found = _libraries(path)
            libraries.update(found)
            todo += found
    return files


def _packages(paths: Iterable[Path]) -> dict[Path, str]:
    """Host path -> 'package version' of the Debian package that ships it (dpkg -S); a path is
    tried as given and resolved, since dpkg knows only one of the two under merged /usr."""
    aliases: dict[str, Path] = {}
    for p in sorted(set(paths)):
        for form in (p, p.resolve()):
            text = str(form)
            other = text[4:] if text.startswith("/usr/") else "/usr" + text
            aliases |= {text: p, other: p}
    proc = subprocess.run(["dpkg", "-S", *aliases], capture_output=True, text=True, check=False)
    owners: dict[Path, str] = {}
    for line in proc.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        if path.strip() in aliases:
            owners[aliases[path.strip()]] = pkgs.split(",")[0].strip()
    versions: dict[str, str] = {}
    if owners:
        query = ["dpkg-query", "-W", "-f", "${Package} ${Version}\n", *sorted(set(owners.values()))]
        out = subprocess.run(query, capture_output=True, text=True, check=False).stdout
        versions = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {p: f"{o} {versions.get(o.split(':')[0], '?')}" for p, o in owners.items()}


# the image --------------------------------------------------------------------------------


@dataclass
class _Plan:
    """Everything an image is made of, known before building it; its hash is the cache key."""

    kernel: kernel.Kernel
    tools: list[str]
    hosts: dict[str, Path]
    """Guest path -> the host file it is a copy of."""
    files: dict[str, bytes]
    guest_files: dict[str, bytes]
    busybox: bytes

    def key(self) -> str:
        inputs = {
            "format": FORMAT_VERSION,
            "builder": _builder_digest(),
            "kernel": [self.kernel.package, self.kernel.version, self.kernel.deb_sha256],
            "modules": kernel.MODULES,
            "tools": self.tools,
            "files": {p: _sha256(d) for p, d in sorted(self.files.items())},
            "guest": {p: _sha256(d) for p, d in sorted(self.guest_files.items())},
            "busybox": _sha256(self.busybox),
        }
        return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _builder_digest() -> str:
    """The code that lays out an image is one of its inputs: a change to it makes new images."""
    digest = hashlib.sha256()
    for module in (cpio, kernel, sys.modules[__name__]):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def _plan(tools: Iterable[str], flavour: str, cache: Path) -> _Plan:
    tool_list = sorted(set(tools))
    hosts = host_files(tool_list)  # first: a missing tool is the likeliest error
    kern = kernel.fetch(flavour, cache / "kernels")
    files = {guest: host.read_bytes() for guest, host in hosts.items()}
    pkg = resources.files("hvbench.guest") / "files"
    guest_files = {dest: (pkg / src).read_bytes() for dest, src in GUEST_FILES.items()}
    busybox = _which("busybox").read_bytes()
    if _libraries(_which("busybox")):
        raise HvbenchError(
            "guest image: busybox must be the static one (apt-get install busybox-static)"
        )
    return _Plan(kern, tool_list, hosts, files, guest_files, busybox)


def _applets() -> list[str]:
    out = subprocess.run(["busybox", "--list"], capture_output=True, text=True, check=True).stdout
    return sorted(set(out.split()) - {"busybox"})


def _entries(plan: _Plan) -> dict[str, cpio.Entry]:
    entries: dict[str, cpio.Entry] = {}
    add = functools.partial(cpio.add, entries)

    for d in ("/dev", "/proc", "/sys", "/tmp", "/run", "/mnt", "/root", "/var"):
        add(cpio.directory(d))
    add(cpio.chardev("/dev/console", 5, 1))
    add(cpio.symlink("/var/run", "/run"))
    add(cpio.regular("/bin/busybox", plan.busybox, executable=True))
    for applet in _applets():
        add(cpio.symlink(f"/bin/{applet}", "busybox"))
    add(cpio.symlink("/init", "/bin/busybox"))
    add(cpio.symlink("/sbin/modprobe", "/bin/busybox"))  # the kernel's module autoloader
    add(cpio.regular("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"))
    add(cpio.regular("/etc/group", b"root:x:0:\n"))
    # mount without -t tries these, which makes the kernel load ext4 when first needed
    add(cpio.regular("/etc/filesystems", b"ext4\n"))
    for path, data in plan.guest_files.items():
        add(cpio.regular(path, data, executable=data.startswith(b"#!")))
    for path, data in plan.files.items():
        add(cpio.regular(path, data, executable=data.startswith((b"\x7fELF", b"#!"))))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        release = plan.kernel.release
        for rel in kernel.module_closure(plan.kernel):
            dest = root / "lib" / "modules" / release / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plan.kernel.modules_dir / rel, dest)
        subprocess.run(["busybox", "depmod", "-b", tmp, release], check=True)
        for module in sorted(root.rglob("*")):
            if module.is_file():
                add(cpio.regular("/" + str(module.relative_to(root)), module.read_bytes()))
    return entries


def _manifest(plan: _Plan, key: str, entries: dict[str, cpio.Entry], kernels: dict) -> dict:
    hosts = {guest: Path(guest) for guest in plan.hosts}
    owners = _packages([*hosts.values(), _which("busybox")])
    packages: dict[str, str] = {plan.kernel.package: plan.kernel.version}
    for owner in owners.values():
        name, _, version = owner.partition(" ")
        packages[name] = version
    files = {}
    for path, entry in sorted(entries.items()):
        if stat.S_ISREG(entry.mode):
            host = hosts.get(path)
            files[path] = {
                "sha256": _sha256(entry.data),
                "size": len(entry.data),
                **({"package": owners.get(host)} if host else {}),
            }
    return {
        "key": key,
        "format": FORMAT_VERSION,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": {
            "package": plan.kernel.package,
            "version": plan.kernel.version,
            "release": plan.kernel.release,
            "deb_sha256": plan.kernel.deb_sha256,
            **kernels,
        },
        "tools": plan.tools,
        "packages": dict(sorted(packages.items())),
        "files": files,
    }


def _link_or_copy(src: Path, dest: Path) -> None:
    """Images share their kernel's files with the kernel cache (they are never written to)."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache, across processes (parallel test workers, two runs)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(
    tools: Iterable[str] = (),
    flavour: str = "amd64",
    cache: Path | None = None,
    force: bool = False,
) -> GuestImage:
    """The image for these tools and kernel flavour, from the cache or built now."""
    cache = cache or cache_root()
    with locked(cache):
        plan = _plan(tools, flavour, cache)
        key = plan.key()
        final = cache / key
        if final.is_dir() and (final / "manifest.json").exists() and not force:
            return GuestImage(key, final)
        shutil.rmtree(final, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        try:
            entries = _entries(plan)
            with (staging / "initrd.cpio").open("wb") as out:
                cpio.write(out, entries)
            _link_or_copy(plan.kernel.bzimage, staging / "vmlinuz")
            kernels = {"bzimage_sha256": _sha256((staging / "vmlinuz").read_bytes())}
            if plan.kernel.vmlinux:
                _link_or_copy(plan.kernel.vmlinux, staging / "vmlinux")
                kernels["vmlinux_sha256"] = _sha256((staging / "vmlinux").read_bytes())
            kernels["initrd_sha256"] = _sha256((staging / "initrd.cpio").read_bytes())
            manifest = _manifest(plan, key, entries, kernels)
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return GuestImage(key, final)


def images(cache: Path | None = None) -> list[GuestImage]:
    """Built images in the cache, newest first."""
    cache = cache or cache_root()
    if not cache.is_dir():
        return []
    found = [GuestImage(d.name, d) for d in cache.iterdir() if (d / "manifest.json").is_file()]
    return sorted(found, key=lambda i: (i.dir / "manifest.json").stat().st_mtime, reverse=True)


def find(prefix: str, cache: Path | None = None) -> GuestImage:
    """The image whose key starts with ``prefix``."""
    matches = [i for i in images(cache) if i.key.startswith(prefix)]
    if len(matches) != 1:
        what = "no image" if not matches else f"{len(matches)} images"
        raise HvbenchError(f"{what} with a key starting {prefix!r} (see hvbench image list)")
    return matches[0]


def prune(keep: int = 0, cache: Path | None = None) -> list[GuestImage]:
    """Remove all but the ``keep`` newest images; return those removed. Kernels stay cached."""
    cache = cache or cache_root()
    with locked(cache):
        removed = images(cache)[keep:]
        for image in removed:
            shutil.rmtree(image.dir, ignore_errors=True)
    return removed
