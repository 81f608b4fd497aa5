"""A guest image's root filesystem as a directory, for platforms that run it without a kernel.

OS-level platforms (containers, gVisor) run the very tree a QEMU guest boots, so that a tool
runs at the same version, with the same libraries, on every platform: the image's initramfs is
unpacked with the system ``cpio`` into a directory of the run's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.guest.image import GuestImage
from hvbench.host.resources import Ledger


def unpack(image: GuestImage, dest: Path, ledger: Ledger) -> Path:
    """The image's tree at ``dest``, unpacked now or by an earlier call of the same run (each
    group of instances of a platform asks again). Every directory made is in the ledger; the
    tree is unpacked beside ``dest`` and renamed, so an existing ``dest`` is always complete."""
    if dest.is_dir():
        return dest
    partial = dest.with_name(f"{dest.name}.partial")
    ledger.add("path", str(dest))
    ledger.add("path", str(partial))
    partial.mkdir(parents=True)
    with image.initrd.open("rb") as archive:
        proc = subprocess.run(
            ["cpio", "-idm", "--quiet", "--no-absolute-filenames", "-D", str(partial)],
            stdin=archive,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise HvbenchError(
            f"unpacking guest image {image.key} into {partial} failed: "
            f"{proc.stderr.strip()[-300:]} (cpio is in Debian's cpio package)"
        )
    partial.rename(dest)
    return dest
