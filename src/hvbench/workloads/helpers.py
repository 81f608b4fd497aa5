"""hvbench's own small programs (``*.c`` beside this module), compiled statically on the host
once into the image cache, named by their source's hash: guests, containers and the host run
the same binary, copied into images like any host tool, with no libraries to bring along."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from hvbench.errors import HvbenchError
from hvbench.guest.image import cache_root

HIDDEN = (Path("/tmp"), Path("/run"), Path("/dev"))
"""Where every instance mounts a fresh filesystem, hiding a helper copied there from the host."""


@functools.cache
def static_helper(name: str, source: str, *flags: str) -> Path:
    """The binary ``name`` built from ``source`` with gcc -static, built if not cached."""
    text = resources.files("hvbench.workloads").joinpath(source).read_bytes()
    out = cache_root() / f"{name}-{hashlib.sha256(text + repr(flags).encode()).hexdigest()[:16]}"
    for hidden in HIDDEN:
        if out.is_relative_to(hidden):
            raise HvbenchError(
                f"the image cache {cache_root()} lies under {hidden}, which every instance "
                f"mounts afresh, hiding {name} there: set HVBENCH_IMAGE_CACHE (or "
                f"XDG_CACHE_HOME, or HOME) to a directory outside {', '.join(map(str, HIDDEN))}"
            )
    if out.exists():
        return out
    if not shutil.which("gcc"):
        raise HvbenchError(f"{name} is built with gcc: apt-get install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src, binary = Path(tmp) / source, Path(tmp) / name
        src.write_bytes(text)
        argv = ["gcc", "-static", "-O2", "-Wall", *flags, "-o", str(binary), str(src)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise HvbenchError(f"building {name} from {source} failed: {last}")
        os.rename(binary, out)
    return out
