"""The second form of a guest image: a Debian root filesystem, for workloads that need a full
userland (kernbench's compiler and make, consolidation's servers).

``debootstrap --variant=minbase`` installs the base packages and those the study's workloads ask
for (``Workload.packages``) into a directory from the mirror the
host's own apt uses (so the versions are the host's release), the guest's hvbench files and the
initramfs's kernel modules are added, and ``mkfs.ext4 -d`` makes the ext4 image from the
directory, without mounting anything. The image is cached by a content hash of its inputs, like
the initramfs; each instance boots a qcow2 overlay of it, so the cached image is never written.
The initramfs of the same image boots it: ``rdinit=`` names a script that mounts the disk and
switches to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hvbench.errors import HvbenchError, ToolMissing
from hvbench.guest import image as initramfs
from hvbench.guest.files import GUEST_FILES, SWITCH_ROOT

PACKAGES = (
    "busybox-static",
    "qemu-guest-agent",
    "e2fsprogs",
    "kmod",
    "util-linux",
    "iproute2",
)
"""What every hvbench root filesystem has; workloads add their own (``Needs.packages``)."""

ROOT_SERIAL = "hvbench-root"
FREE_SPACE = 4 << 30
"""Room left on the root filesystem for the workloads (a kernel build tree)."""


@dataclass(frozen=True)
class RootImage:
    """A built root filesystem image in the cache."""

    key: str
    dir: Path

    def boot_args(self, device: str) -> str:
        """Kernel arguments that make the initramfs boot this image from ``device``."""
        return f"rdinit={SWITCH_ROOT} hvbench.root={device}"

    @property
    def disk(self) -> Path:
        return self.dir / "root.ext4"

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = json.loads((self.dir / "manifest.json").read_text())
        return manifest

    def summary(self) -> dict:
        """What a driver's ``describe`` records of the image: its manifest with the files' list
        folded into a count and one hash (the full list is in the cache, thousands of lines)."""
        manifest = self.manifest
        listing = "".join(f"{p} {f['sha256']}\n" for p, f in sorted(manifest["files"].items()))
        return {
            **{k: v for k, v in manifest.items() if k != "files"},
            "files": len(manifest["files"]),
            "files_sha256": hashlib.sha256(listing.encode()).hexdigest(),
        }


def _host_suite_and_mirror() -> tuple[str, str]:
    """The release and main mirror the host's apt uses (deb822 or one-line sources)."""
    texts = []
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        if path.suffix in ("", ".list", ".sources") and path.is_file():
            texts.append(path.read_text(errors="replace"))
    text = "\n".join(texts)
    stanza = re.search(r"^URIs:\s*(\S+/debian)\s*$.*?^Suites:\s*(\w+)", text, re.M | re.S)
    if stanza:
        return stanza.group(2), stanza.group(1)
    line = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s+(\w+)\s", text, re.M)
    if line:
        return line.group(2), line.group(1)
    raise HvbenchError("guest root filesystem: no Debian mirror found in the host's apt sources")


def build(
    tools: Iterable[str],
    image: initramfs.GuestImage,
    packages: Iterable[str] = (),
    cache: Path | None = None,
) -> RootImage:
    """The root filesystem image for these tools and extra Debian packages, from the cache or
    built now (minutes). The same package set makes the same image whichever study asks."""
    if not shutil.which("debootstrap"):
        raise ToolMissing(
            "guest root filesystem: debootstrap is missing (apt-get install debootstrap)"
        )
    cache = cache or initramfs.cache_root()
    suite, mirror = _host_suite_and_mirror()
    tool_list = sorted(set(tools))
    package_list = sorted(set(PACKAGES) | set(packages))
    hosts = initramfs.host_files(tool_list)
    inputs = {
        "format": initramfs.FORMAT_VERSION,
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "suite": suite,
        "packages": package_list,
        "tools": {p: hashlib.sha256(h.read_bytes()).hexdigest() for p, h in sorted(hosts.items())},
        "initramfs": image.key,
    }
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    final = cache / f"rootfs-{key}"
    with initramfs.locked(cache):
        if (final / "manifest.json").exists():
            return RootImage(key, final)
        staging = Path(tempfile.mkdtemp(prefix=f".rootfs-{key}-", dir=cache))
        try:
            tree = staging / "tree"
            _debootstrap(suite, mirror, tree, package_list)
            _unpack_kernel_source(tree)
            _add_hvbench(tree, image, hosts)
            manifest = _manifest(tree, key, suite, image, tool_list, package_list)
            _mkfs(tree, staging / "root.ext4")
            shutil.rmtree(tree)
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return RootImage(key, final)


def _run(argv: list[str], what: str, timeout: float = 3600) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise HvbenchError(f"guest root filesystem: {what} took over {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise HvbenchError(f"guest root filesystem: {what} failed: {last[0]}")
    return proc.stdout


def _debootstrap(suite: str, mirror: str, tree: Path, packages: list[str]) -> None:
    _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(tree),
         mirror],
        "debootstrap",
    )  # fmt: skip
    # the package cache is not part of the guest
    for deb in (tree / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()


def _unpack_kernel_source(tree: Path) -> None:
    """Unpack linux-source's tarball now, on the host, in seconds: kernbench in a TCG guest
    would spend minutes on xz before compiling anything. kernbench copies an unpacked tree."""
    for tarball in (tree / "usr/src").glob("linux-source-*.tar.*"):
        _run(["tar", "-xf", str(tarball), "-C", str(tarball.parent)], f"unpacking {tarball.name}")
        tarball.unlink()


def _add_hvbench(tree: Path, image: initramfs.GuestImage, hosts: dict[str, Path]) -> None:
    """The guest's hvbench files, the kernel's modules, busybox applets for the guest scripts,
    and the host's own tool binaries with their libraries (as in the initramfs)."""
    files = resources.files("hvbench.guest") / "files"
    for guest_file, src in GUEST_FILES.items():
        path = tree / guest_file.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (files / src).read_bytes()
        path.write_bytes(data)
        path.chmod(0o755 if data.startswith(b"#!") else 0o644)
    with tempfile.TemporaryDirectory() as tmp:
        with image.initrd.open("rb") as archive:
            subprocess.run(["busybox", "cpio", "-id", "lib/modules/*"], stdin=archive, cwd=tmp,
                           capture_output=True, check=True)  # fmt: skip
        shutil.copytree(Path(tmp) / "lib/modules", tree / "lib/modules", dirs_exist_ok=True)
    applets = tree / "usr/lib/hvbench/bin"
    applets.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(["busybox", "--list"], capture_output=True, text=True, check=True)
    for applet in listing.stdout.split():
        (applets / applet).unlink(missing_ok=True)
        (applets / applet).symlink_to("/bin/busybox")
    for guest_path, host in hosts.items():
        dest = tree / guest_path.lstrip("/")
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host, dest)
    (tree / "etc/hostname").write_text("hvbench\n")


def _manifest(
    tree: Path,
    key: str,
    suite: str,
    image: initramfs.GuestImage,
    tools: list[str],
    requested: list[str],
) -> dict:
    """What the image holds: every installed package's version (``packages``), those asked for
    (``requested``), and every file's hash."""
    out = _run(
        ["dpkg-query", f"--admindir={tree}/var/lib/dpkg", "-W", "-f", "${Package} ${Version}\n"],
        "dpkg-query",
    )
    packages = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    files = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files["/" + str(path.relative_to(tree))] = {
                "sha256": digest,
                "size": path.stat().st_size,
            }
    return {
        "key": key,
        "form": "rootfs",
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "suite": suite,
        "initramfs": image.key,
        "tools": tools,
        "requested": requested,
        "packages": packages,
        "files": files,
    }


def _mkfs(tree: Path, disk: Path) -> None:
    used = int(_run(["du", "-sb", str(tree)], "du").split()[0])
    size = (used * 13 // 10 + FREE_SPACE) >> 20
    _run(
        ["mkfs.ext4", "-q", "-F", "-L", "hvbench-root", "-E", "root_owner=0:0", "-d", str(tree),
         str(disk), f"{size}M"],
        "mkfs.ext4 -d",
    )  # fmt: skip
