"""``hvbench host tune`` and ``hvbench host reset``: the tunable conditions set to
benchmark-grade, and back.

Tunable are the kernel's own files that a root process can write and write back at will: the
frequency governor (``performance``), turbo (off), KSM (``run`` 0: ksmd stops; pages already
merged stay merged until written) and THP (``enabled`` and ``defrag`` from ``always`` to
``madvise``, not ``never``: QEMU asks for huge pages for its guests' memory, as on the servers
whose figures a study stands for, while every other process gets what it asks for). What needs a
reboot or changes the host's shape (C-states, SMT), a service (irqbalance), or the user's
judgement (swap, load) is reported with its fix and left alone. Only conditions that are not
benchmark-grade are written.

Every change goes into a ledger of its own, ``host-tune`` under the state directory, before the
file is written, with the value it had (kind ``setting``). The ledger outlives ``tune``, which
marks it kept once all its changes are made (``Ledger.keep``): ``hvbench cleanup`` then leaves
the tuning alone, and ``hvbench host reset`` writes back every old value (newest first, so a knob
tuned twice goes back to its first value) and removes the ledger. A tune that did not finish
(SIGKILL, a crash) never marked the ledger kept, its owner is gone, and ``hvbench cleanup``
takes it for an orphan like a killed run's: it undoes the whole ledger, earlier tunes included,
so that the host is as it was before any tune rather than half tuned. A later ``tune`` adds to
the same ledger, and until it ends it is as unfinished as the first one was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from hvbench.host.conditions import Condition, selected
from hvbench.host.resources import STATE_ROOT, Ledger

LEDGER = "host-tune"


@dataclass(frozen=True)
class Change:
    """One file written (by ``tune``) or written back (by ``reset``); ``error`` when it was
    refused or reads back otherwise."""

    name: str
    path: str
    old: str
    new: str
    error: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def _current(path: Path) -> str:
    return selected(path.read_text())


def _root(root: Path | None) -> Path:
    return root or STATE_ROOT


def tuned(root: Path | None = None) -> list[Change]:
    """The changes a tune has in place, oldest first (none if the host is not tuned)."""
    if not (_root(root) / LEDGER).is_dir():
        return []
    return [
        Change(str(r.extra.get("condition", "")), r.name, str(r.extra["old"]), str(r.extra["new"]))
        for r in Ledger(LEDGER, root).live
    ]


def tune(conditions: list[Condition], root: Path | None = None) -> list[Change]:
    """Write every condition's ``tune`` values, each recorded in the ledger first."""
    ledger = Ledger(LEDGER, root)
    ledger.claim()
    changes = []
    try:
        for c in conditions:
            for w in c.tune:
                path = Path(w.path)
                try:
                    old = _current(path)
                except OSError as e:
                    changes.append(Change(c.name, w.path, "", w.value, f"cannot read: {e}"))
                    continue
                res = ledger.add("setting", w.path, old=old, new=w.value, condition=c.name)
                try:
                    path.write_text(w.value)
                except OSError as e:
                    ledger.forget(res)
                    changes.append(Change(c.name, w.path, old, w.value, f"refused: {e}"))
                    continue
                now = _current(path)
                error = "" if now == w.value else f"written, but it reads {now}"
                changes.append(Change(c.name, w.path, old, w.value, error))
    except BaseException:
        ledger.release_all()  # interrupted: undone whole, as cleanup would after a SIGKILL
        raise
    if ledger.live:
        ledger.keep()
    else:
        ledger.release_all()
    return changes


def reset(root: Path | None = None) -> list[Change]:
    """Write back what every tune changed and remove its ledger; each value is read back."""
    if not (_root(root) / LEDGER).is_dir():
        return []
    ledger = Ledger(LEDGER, root)
    first: dict[str, Change] = {}  # per file, the value before its first tune
    for c in reversed(tuned(root)):
        first[c.path] = Change(c.name, c.path, c.new, c.old)
    ledger.release_all()
    out = []
    for c in first.values():
        try:
            now = _current(Path(c.path))
        except OSError as e:
            now = f"unreadable ({e})"
        out.append(c if now == c.new else Change(**{**asdict(c), "error": f"it reads {now}"}))
    return out
