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
from hvbench.host.process import failed
from hvbench.host.resources import Ledger, Resource


def unpack(image: GuestImage, dest: Path, ledger: Ledger, made: list[Resource]) -> Path:
    """The image's tree unpacked at ``dest``, which is in the ledger and in ``made`` before it
    exists."""
    made.append(ledger.add("path", str(dest)))
    dest.mkdir(parents=True, exist_ok=True)
    with image.initrd.open("rb") as archive:
        proc = subprocess.run(
            ["cpio", "-idm", "--quiet", "--no-absolute-filenames", "-D", str(dest)],
            stdin=archive,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise HvbenchError(
            f"{failed(f'unpacking guest image {image.key} into {dest}', proc)} "
            "(cpio is in Debian's cpio package)"
        )
    return dest
