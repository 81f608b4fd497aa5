"""The ledger of everything a run creates on the host.

Each resource is written to the ledger *before* it is created, so that it can be removed on a
normal exit, on Ctrl-C or SIGTERM (the runner releases the ledger in a ``finally``), and after a
SIGKILL or power loss (``hvbench cleanup`` releases the ledgers whose owner process is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

STATE_ROOT = Path(os.environ.get("HVBENCH_STATE_DIR", "/run/hvbench"))
KEPT = "kept.json"
"""Beside a ledger's journal: its resources stay after their owner ends (``Ledger.keep``)."""


@dataclass
class Resource:
    """One thing on the host that must not outlive its run."""

    id: int
    kind: str
    name: str
    extra: dict = field(default_factory=dict)


def _run_quiet(argv: list[str]) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _stop_process(res: Resource) -> None:
    try:
        proc = psutil.Process(int(res.name))
        if abs(proc.create_time() - float(res.extra.get("create_time", 0))) > 1:
            return  # the pid was reused by something that is not ours
        procs = [*proc.children(recursive=True), proc]
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
    except (psutil.NoSuchProcess, ValueError):
        return


def _delete_netns(res: Resource) -> None:
    pids = subprocess.run(
        ["ip", "netns", "pids", res.name], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(psutil.Error, ValueError):
            psutil.Process(int(pid)).kill()
    _run_quiet(["ip", "netns", "delete", res.name])


def _delete_link(res: Resource) -> None:
    netns = res.extra.get("netns")
    _run_quiet(["ip", *(["-n", netns] if netns else []), "link", "delete", res.name])


def _detach_loop(res: Resource) -> None:
    _run_quiet(["losetup", "-d", res.name])


def _mounted(path: str) -> bool:
    """Whether something is mounted on ``path``, a bind mount of a directory on itself too
    (which ``os.path.ismount`` does not see: the same device as its parent). mountinfo
    escapes a space in a path as ``\\040``."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4].replace("\\040", " ") == path for line in f)


def _unmount(res: Resource) -> None:
    """Every mount on the path: some are stacked there (runsc mounts its empty network
    namespace on the same path once per sandbox)."""
    for _ in range(256):
        if not _mounted(res.name):
            return
        _run_quiet(["umount", "-l", res.name])


def _delete_container(res: Resource) -> None:
    """An OCI container (runc, runsc): its runtime kills its processes, removes its cgroups and
    its state; ``extra["runtime"]`` is the runtime's argv up to the subcommand."""
    _run_quiet([*res.extra["runtime"], "delete", "--force", res.name])


def _run_command(res: Resource) -> None:
    """What undoes something a program made (an engine's container or image, a user, an ACL):
    ``extra["argv"]``, run once."""
    _run_quiet([str(a) for a in res.extra["argv"]])


def _destroy_domain(res: Resource) -> None:
    """A libvirt domain: stopped and its definition removed (a transient one has none);
    ``extra["uri"]`` is the connection it lives on."""
    uri = str(res.extra["uri"])
    _run_quiet(["virsh", "-c", uri, "destroy", res.name])
    _run_quiet(["virsh", "-c", uri, "undefine", res.name])


def _delete_volume(res: Resource) -> None:
    """A storage volume hvbench made on a libvirt host (an uploaded image, a data disk);
    ``extra["uri"]`` and ``extra["pool"]`` say where."""
    _run_quiet(["virsh", "-c", str(res.extra["uri"]), "vol-delete", "--pool",
                str(res.extra["pool"]), res.name])  # fmt: skip


def _destroy_xen_domain(res: Resource) -> None:
    """A Xen domain, by name: xl tears down its backends and hotplug state with it."""
    _run_quiet(["xl", "destroy", res.name])


def _give_back_hugepages(res: Resource) -> None:
    """Huge pages a run added to the host's pool (``name`` is the pool's nr_hugepages file):
    the pool shrinks by as many, never below what others hold in it."""
    path = Path(res.name)
    current = int(path.read_text())
    path.write_text(str(max(0, current - int(res.extra["pages"]))))


def _remove_path(res: Resource) -> None:
    path = Path(res.name)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_back(res: Resource) -> None:
    """A kernel setting hvbench changed (``hvbench host tune``; ``name`` is its file under /sys
    or /proc/sys): the value it had before, written back."""
    Path(res.name).write_text(str(res.extra["old"]))


def _remove_cgroup(res: Resource) -> None:
    """Kill what still runs in a cgroup tree (a client of an interrupted run), then remove its
    directories, children first: a cgroup goes with rmdir once its processes have left it,
    which killed ones do a moment later."""
    path = Path(res.name)
    if not path.is_dir():
        return
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    for _ in range(100):
        with contextlib.suppress(OSError):
            for child in sorted((p for p in path.rglob("*") if p.is_dir()), reverse=True):
                child.rmdir()
            path.rmdir()
            return
        time.sleep(0.02)


UNDO: dict[str, Callable[[Resource], None]] = {
    "process": _stop_process,
    "netns": _delete_netns,
    "link": _delete_link,
    "loop": _detach_loop,
    "mount": _unmount,
    "path": _remove_path,
    "container": _delete_container,
    "command": _run_command,
    "domain": _destroy_domain,
    "volume": _delete_volume,
    "xendomain": _destroy_xen_domain,
    "hugepages": _give_back_hugepages,
    "cgroup": _remove_cgroup,
    "setting": _write_back,
}


class Ledger:
    """Append-only journal of a run's host resources, kept under ``/run/hvbench/<run id>``."""

    def __init__(self, run_id: str, root: Path | None = None) -> None:
        self.run_id = run_id
        self.dir = (root or STATE_ROOT) / run_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self._journal = self.dir / "ledger.jsonl"
        self._lock = threading.Lock()
        self._live: dict[int, Resource] = {r.id: r for r in self._replay()}
        self._next = max(self._live, default=0) + 1

    def claim(self) -> None:
        """Mark this process as the ledger's owner (a dead owner makes the ledger an orphan),
        and the ledger as no longer kept (``keep``) while it changes."""
        me = psutil.Process()
        owner = {"pid": me.pid, "create_time": me.create_time(), "since": time.time()}
        (self.dir / "owner.json").write_text(json.dumps(owner))
        (self.dir / KEPT).unlink(missing_ok=True)

    def keep(self) -> None:
        """Let the resources outlive their owner: what ``hvbench host tune`` leaves in place on
        purpose until ``hvbench host reset``. A kept ledger is never an orphan."""
        (self.dir / KEPT).write_text(json.dumps({"since": time.time()}))

    @property
    def kept(self) -> bool:
        return (self.dir / KEPT).exists()

    def add(self, kind: str, name: str, **extra: object) -> Resource:
        """Record a resource about to be made; call before creating it."""
        if kind not in UNDO:
            raise ValueError(f"unknown resource kind {kind!r}")
        with self._lock:
            res = Resource(self._next, kind, name, dict(extra))
            self._next += 1
            self._write({"op": "add", "id": res.id, "kind": kind, "name": name, "extra": extra})
            self._live[res.id] = res
        return res

    def add_process(self, proc: psutil.Process | int) -> Resource:
        """Record a started process by pid and start time (so a reused pid is never killed)."""
        p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return self.add("process", str(p.pid), create_time=p.create_time())

    def release(self, res: Resource) -> None:
        """Remove one resource now."""
        with contextlib.suppress(Exception):
            UNDO[res.kind](res)
        with self._lock:
            if self._live.pop(res.id, None) is not None:
                self._write({"op": "del", "id": res.id})

    def forget(self, res: Resource) -> None:
        """Drop a resource that was recorded but, as it turned out, never made."""
        with self._lock:
            if self._live.pop(res.id, None) is not None:
                self._write({"op": "del", "id": res.id})

    def release_all(self) -> None:
        """Remove every live resource, newest first, then the ledger itself."""
        for res in sorted(self._live.values(), key=lambda r: r.id, reverse=True):
            self.release(res)
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def live(self) -> list[Resource]:
        return sorted(self._live.values(), key=lambda r: r.id)

    def owner_alive(self) -> bool:
        try:
            owner = json.loads((self.dir / "owner.json").read_text())
            proc = psutil.Process(owner["pid"])
            created: float = owner["create_time"]
            return abs(proc.create_time() - created) < 1
        except (OSError, ValueError, KeyError, psutil.Error):
            return False

    def _write(self, entry: dict) -> None:
        with self._journal.open("a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _replay(self) -> list[Resource]:
        live: dict[int, Resource] = {}
        if not self._journal.exists():
            return []
        for line in self._journal.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a torn last line after power loss
            if e.get("op") == "add":
                live[e["id"]] = Resource(e["id"], e["kind"], e["name"], e.get("extra") or {})
            elif e.get("op") == "del":
                live.pop(e.get("id"), None)
        return list(live.values())


def orphan_ledgers(root: Path | None = None) -> list[Ledger]:
    """Ledgers of runs whose owning process is gone (killed, crashed, machine rebooted) and
    which were not kept on purpose (``Ledger.keep``)."""
    base = root or STATE_ROOT
    if not base.is_dir():
        return []
    ledgers = [Ledger(d.name, base) for d in sorted(base.iterdir()) if d.is_dir()]
    return [ledger for ledger in ledgers if not ledger.kept and not ledger.owner_alive()]
