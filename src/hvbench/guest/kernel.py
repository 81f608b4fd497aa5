"""The guest kernel, taken from Debian's package without installing it on the host.

The package is fetched with ``apt-get download`` into the image cache and unpacked with
``dpkg-deb -x``. Its compressed bzImage is also unpacked into an ELF ``vmlinux``: under TCG the
guest spends seconds decompressing an xz kernel, while QEMU loads an ELF with a PVH note directly.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hvbench.errors import HvbenchError

FLAVOURS = {"amd64": "linux-image-amd64", "cloud-amd64": "linux-image-cloud-amd64"}
"""Kernel flavours by name: the stock one has e1000, rtl8139 and IDE drivers; cloud boots faster
but has neither."""

MODULES = (
    "virtio_pci",
    "virtio_mmio",
    "virtio_console",
    "vmw_vsock_virtio_transport",
    "virtio_net",
    "virtio_blk",
    "virtio_scsi",
    "sd_mod",
    "e1000",
    "8139cp",
    "8139too",
    "ata_piix",
    "ahci",
    "nvme",
    "xen_netfront",
    "xen_blkfront",
    "ext4",
    "crc32c_generic",
    "nfsd",
    "nfsv4",
)
"""Drivers the guest may need for the devices its VMM can give it (virtio-vsock: the agent's
channel under Firecracker and Cloud Hypervisor), the data disk's filesystem, and
the NFS server and client (consolidation's nfs role and the web role that mounts it); their
dependencies come along. Only modules whose hardware is present, or that a workload asks for,
get loaded."""


@dataclass(frozen=True)
class Kernel:
    """An unpacked kernel package in the cache."""

    package: str
    version: str
    release: str
    """The kernel release (``uname -r``), the name of its modules directory."""
    deb_sha256: str
    root: Path

    @property
    def bzimage(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def vmlinux(self) -> Path | None:
        """The uncompressed ELF kernel, if it could be extracted."""
        path = self.root / "vmlinux"
        return path if path.exists() else None

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.release


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise HvbenchError(f"{what}: {' '.join(argv[:3])} failed: {last}")
    return proc.stdout


@functools.cache
def resolve(flavour: str) -> tuple[str, str]:
    """The versioned kernel package that the flavour's meta-package depends on, and its version;
    asked of apt once per process: its two queries take seconds here and over a minute in a
    nested lab's L1, once for each platform the run opens, and apt's candidate holds for a run."""
    if flavour not in FLAVOURS:
        raise HvbenchError(f"guest kernel {flavour!r}: expected one of {', '.join(FLAVOURS)}")
    meta = FLAVOURS[flavour]
    out = _run(["apt-cache", "depends", meta], f"guest kernel {meta}")
    match = re.search(r"Depends:\s*(linux-image-\S+)", out)
    if not match:
        raise HvbenchError(
            f"guest kernel: {meta} names no linux-image dependency (apt-get update?)"
        )
    package = match.group(1)
    policy = _run(["apt-cache", "policy", package], f"guest kernel {package}")
    version = re.search(r"Candidate:\s*(\S+)", policy)
    if not version or version.group(1) == "(none)":
        raise HvbenchError(f"guest kernel: no candidate version of {package} (apt-get update?)")
    return package, version.group(1)


def fetch(flavour: str, cache: Path) -> Kernel:
    """Download and unpack the flavour's kernel package into ``cache`` once; reuse it after."""
    package, version = resolve(flavour)
    root = cache / f"{package}_{version}"
    done = root / ".complete"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            _run(
                ["apt-get", "download", f"{package}={version}"], "guest kernel download", Path(tmp)
            )
            debs = list(Path(tmp).glob("*.deb"))
            if len(debs) != 1:
                raise HvbenchError(f"guest kernel: apt-get download gave {len(debs)} files")
            staging = Path(tmp) / "root"
            _run(["dpkg-deb", "-x", str(debs[0]), str(staging)], "guest kernel unpack")
            (staging / "deb.sha256").write_text(_sha256(debs[0]))
            os.rename(staging, root)
        kernel = _load(package, version, root)
        _extract_vmlinux(kernel.bzimage, root / "vmlinux")
        _run([_depmod(), "-b", str(root), kernel.release], "guest kernel depmod")
        done.write_text("")
    return _load(package, version, root)


def _depmod() -> str:
    """kmod's depmod, which indexes the package's 4,000 modules for ``module_closure`` in 0.7 s
    (busybox's took 4-6 s of a first run; the image's few modules keep busybox's index, which
    the guest's busybox modprobe reads); in /sbin, which a user's PATH may lack."""
    # here, not at the top: the command line loads this module for FLAVOURS' names, and a report
    # loads nothing of the host
    from hvbench.host.process import SYSTEM_PATH

    found = shutil.which("depmod", path=SYSTEM_PATH)
    if found is None:
        raise HvbenchError("guest kernel: depmod not found (apt-get install kmod, or ./setup.sh)")
    return found


def _load(package: str, version: str, root: Path) -> Kernel:
    releases = [p.name for p in (root / "lib" / "modules").iterdir() if p.is_dir()]
    if len(releases) != 1:
        raise HvbenchError(f"guest kernel {package}: expected one modules directory in {root}")
    sha = (root / "deb.sha256").read_text().strip()
    return Kernel(package, version, releases[0], sha, root)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


_ELF_MAGIC = b"\x7fELF"
_COMPRESSORS = (
    (b"\xfd7zXZ\x00", ["xz", "-dcq"]),
    (b"\x02!L\x18", ["lz4", "-dcq"]),
    (b"(\xb5/\xfd", ["zstd", "-dcq"]),
    (b"\x1f\x8b\x08", ["gzip", "-dcq"]),
)
"""Magic numbers of the payloads a bzImage may hold, and the tool that unpacks each."""


def _extract_vmlinux(bzimage: Path, out: Path) -> None:
    """Find the compressed payload inside the bzImage and decompress it to an ELF, as the
    kernel's scripts/extract-vmlinux does; leave no file if that fails (the bzImage is booted
    then). The decompressors complain about the bytes after the payload; only the ELF counts."""
    data = bzimage.read_bytes()
    for magic, argv in _COMPRESSORS:
        start, tries = data.find(magic), 0
        while start >= 0 and tries < 8:  # a magic number may also occur by chance
            tries += 1
            proc = subprocess.run(argv, input=data[start:], capture_output=True, check=False)
            if proc.stdout.startswith(_ELF_MAGIC):
                out.write_bytes(proc.stdout)
                return
            start = data.find(magic, start + 1)


def module_closure(kernel: Kernel, names: tuple[str, ...] = MODULES) -> list[str]:
    """Paths (relative to the modules directory) of the named modules and all they depend on."""
    deps: dict[str, list[str]] = {}
    for line in (kernel.modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    wanted: list[str] = []
    todo = [by_name[n] for n in names if n in by_name]
    while todo:
        path = todo.pop()
        if path not in wanted:
            wanted.append(path)
            todo.extend(deps.get(path, []))
    return sorted(wanted)
