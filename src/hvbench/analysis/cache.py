"""Keys for what is worked out of a finished run and kept (``Store.keep_derived``): a finished
run's analysis changes only with hvbench's code, so the key is that code's digest and the run's
end; a run not ended has none (running, or interrupted: a resume adds samples and may be
interrupted again) and is worked out every time."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import hvbench
from hvbench.store import RunRecord

ANALYSIS = ("analysis", "store")
"""The packages a run's analysis is made by (it reads the store's records)."""


@functools.cache
def code_digest(packages: tuple[str, ...]) -> str:
    """hvbench's version and the source of its ``packages`` (their .py and .j2 files)."""
    root = Path(hvbench.__file__).parent
    h = hashlib.sha256(hvbench.__version__.encode())
    for sub in packages:
        for p in sorted((root / sub).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".j2"):
                h.update(p.relative_to(root).as_posix().encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def run_key(run: RunRecord, packages: tuple[str, ...] = ANALYSIS) -> str | None:
    """What a run's derived figures depend on besides its samples: the code that makes them,
    its status and its end (every resume ends anew); None for a run not ended."""
    if run.status == "running" or run.finished_at is None:
        return None
    return f"{code_digest(packages)}|{run.status}|{run.finished_at.isoformat()}"
