"""The ledger of everything a run creates on the host.

Each resource is written to the ledger *before* it is created, so that it can be removed on a
normal exit, on Ctrl-C or SIGTERM (the runner releases the ledger in a ``finally``), and after a
SIGKILL or power loss (``hvbench cleanup`` releases the ledgers whose owner process is gone).
A SIGKILL loses nothing the ledger wrote; a power loss loses what was not synced to disk, so
the ledger syncs before anything that outlives a reboot is made (``DURABLE``): a reboot itself
ends every process, namespace, mount, loop device and cgroup of the run (and on most hosts
empties /run, the ledger with it).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import psutil

from hvbench.errors import HvbenchError
from hvbench.host.process import processes

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


def _delete_netns_many(resources: Sequence[Resource]) -> None:
    """Network namespaces, with what still runs in them, by two ``ip -batch`` runs however
    many there are."""
    names = [res.name for res in resources]
    pids = subprocess.run(
        ["ip", "-force", "-batch", "-"],
        input="".join(f"netns pids {name}\n" for name in names),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(psutil.Error, ValueError):
            psutil.Process(int(pid)).kill()
    subprocess.run(
        ["ip", "-force", "-batch", "-"],
        input="".join(f"netns delete {name}\n" for name in names),
        capture_output=True,
        text=True,
        check=False,
    )


def _delete_link(res: Resource) -> None:
    netns = res.extra.get("netns")
    _run_quiet(["ip", *(["-n", netns] if netns else []), "link", "delete", res.name])


LOOP_DETACH_S = 5.0


def _detach_loop(res: Resource) -> None:
    """``losetup -d`` of a device still open (its filesystem going in the background after a
    container's lazy unmount) only marks it to go once closed: waited for, up to
    LOOP_DETACH_S, so that a stop returns with the device gone."""
    _run_quiet(["losetup", "-d", res.name])
    backing = Path("/sys/block") / Path(res.name).name / "loop" / "backing_file"
    deadline = time.monotonic() + LOOP_DETACH_S
    while backing.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


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


CONTAINER_START_S = 60.0
"""How long ``hvbench cleanup`` waits for a runtime still making a container (its owner killed
mid-storm) before it deletes that container."""


def _delete_container(res: Resource) -> None:
    """An OCI container (runc, runsc): its runtime kills its processes, removes its cgroups and
    its state; ``extra["runtime"]`` is the runtime's argv up to the subcommand. Where there is
    no such container yet, a runtime may still be making it (its ``run`` in flight when a storm's
    owner was killed): that one is waited for first, so that its container is not left behind."""
    delete = [*res.extra["runtime"], "delete", "--force", res.name]
    gone = subprocess.run(delete, capture_output=True, check=False)
    if gone.returncode == 0:
        return
    making = [
        proc
        for proc in processes(["cmdline"])
        if (argv := proc.info["cmdline"] or []) and argv[-1] == res.name and "delete" not in argv
    ]
    if making:
        psutil.wait_procs(making, timeout=CONTAINER_START_S)
        _run_quiet(delete)


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


DURABLE = frozenset({"path", "command", "domain", "volume"})
"""Kinds of resource that outlive a reboot: files, what a command undoes (a user, an engine's
container in its data directory), libvirt's domains and volumes (on another host, too)."""

UNDO_MANY: dict[str, Callable[[Sequence[Resource]], None]] = {"netns": _delete_netns_many}
"""Kinds whose resources ``Ledger.release_many`` undoes together, in fewer commands than one
each."""


def resource_name(run_id: str, *parts: object, prefix: str = "hvb") -> str:
    """The name of something the run makes on the host (its namespace, a container, a domain,
    a cgroup, a user): ``prefix``, the run id's last 8 characters, then ``parts``, joined by
    "-". Short, for the host's limits on names (a unix socket's path 108 bytes, a user's name
    32 characters), and the run's own, so that two runs on one host never share one."""
    return "-".join([prefix, run_id[-8:], *map(str, parts)])


class Ledger:
    """Append-only journal of a run's host resources, kept under ``/run/hvbench/<run id>``."""

    def __init__(self, run_id: str, root: Path | None = None) -> None:
        self.run_id = run_id
        self.dir = state_dir(run_id, root)
        self._journal = self.dir / "ledger.jsonl"
        self._lock = threading.Lock()
        """Held while entries are numbered and written (``_write``), not while they sync."""
        self._syncing = threading.Lock()
        self._file: TextIO | None = None
        self._written = self._synced = 0
        """Writes to the journal so far, and how many of them are on disk (``_sync``)."""
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
        return self.add_many([(kind, name, extra)])[0]

    def add_many(self, entries: Sequence[tuple[str, str, dict]]) -> list[Resource]:
        """Record resources about to be made, each (kind, name, extra), in one write, and
        synced to disk where one outlives a reboot (``DURABLE``); call before creating any of
        them (a storm's N namespaces cost one write)."""
        for kind, _, _ in entries:
            if kind not in UNDO:
                raise ValueError(f"unknown resource kind {kind!r}")
        with self._lock:
            made = [Resource(self._next + i, k, n, dict(x)) for i, (k, n, x) in enumerate(entries)]
            self._next += len(made)
            lines = [
                {"op": "add", "id": r.id, "kind": r.kind, "name": r.name, "extra": r.extra}
                for r in made
            ]
            written = self._write(lines)
            self._live.update((r.id, r) for r in made)
        if any(r.kind in DURABLE for r in made):
            self._sync(written)
        return made

    def add_process(self, proc: psutil.Process | int) -> Resource:
        """Record a started process by pid and start time (so a reused pid is never killed)."""
        p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return self.add("process", str(p.pid), create_time=p.create_time())

    def release(self, res: Resource) -> None:
        """Remove one resource now."""
        with contextlib.suppress(Exception):
            UNDO[res.kind](res)
        self._forget([res])

    def release_many(self, resources: Sequence[Resource]) -> None:
        """Remove resources now, in order; a run of one kind that has a batch undo
        (``UNDO_MANY``: a storm's namespaces) together."""
        for kind, run in itertools.groupby(resources, key=lambda r: r.kind):
            group = list(run)
            if kind in UNDO_MANY and len(group) > 1:
                with contextlib.suppress(Exception):
                    UNDO_MANY[kind](group)
                self._forget(group)
            else:
                for res in group:
                    self.release(res)

    def forget(self, res: Resource) -> None:
        """Drop a resource that was recorded but, as it turned out, never made (or that is
        gone already)."""
        self._forget([res])

    def _forget(self, resources: Sequence[Resource]) -> None:
        """Write that the resources are gone, in one write and no sync of its own: after a
        power loss, a removal lost with it only has ``hvbench cleanup`` undo again what is
        gone, which every undo bears (the next sync writes it down in any case)."""
        with self._lock:
            gone = [res.id for res in resources if self._live.pop(res.id, None) is not None]
            if gone:
                self._write([{"op": "del", "id": id_} for id_ in gone])

    def release_all(self) -> None:
        """Remove every live resource, newest first, then the ledger itself."""
        for res in sorted(self._live.values(), key=lambda r: r.id, reverse=True):
            self.release(res)
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
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

    def _write(self, entries: list[dict]) -> int:
        """Append the entries to the journal (the kernel has them: a SIGKILL loses none), under
        ``_lock``; the number of this write, for ``_sync``."""
        if self._file is None:
            self._file = self._journal.open("a")
        self._file.write("".join(json.dumps(e) + "\n" for e in entries))
        self._file.flush()
        self._written += 1
        return self._written

    def _sync(self, written: int) -> None:
        """Return once write number ``written`` is on disk (power loss loses none). Threads
        that write while another syncs share the next sync (group commit): a storm's
        instances, each recording what it makes, wait for one fsync together rather than for
        one each in turn."""
        with self._syncing:
            if self._synced >= written or self._file is None:
                return
            upto = self._written  # every write so far is in the kernel's hands: this covers it
            os.fsync(self._file.fileno())
            self._synced = upto

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


def state_dir(name: str = "", root: Path | None = None) -> Path:
    """The state directory (``root``, else ``STATE_ROOT``), or the directory ``name`` in it,
    made: a run writes down there what it makes on the host before making it, and cannot start
    where it cannot; one line naming the state directory and HVBENCH_STATE_DIR where it cannot
    be made or written."""
    base = root or STATE_ROOT
    path = base / name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HvbenchError(
            f"the state directory {base} (HVBENCH_STATE_DIR), where runs note what they make "
            f"on the host, cannot be made or written: {e.filename}: {e.strerror}; set "
            "HVBENCH_STATE_DIR to a directory this user can write"
        ) from None
    return path


def orphan_ledgers(root: Path | None = None) -> list[Ledger]:
    """Ledgers of runs whose owning process is gone (killed, crashed, machine rebooted) and
    which were not kept on purpose (``Ledger.keep``)."""
    base = root or STATE_ROOT
    if not base.is_dir():
        return []
    ledgers = [Ledger(d.name, base) for d in sorted(base.iterdir()) if d.is_dir()]
    return [ledger for ledger in ledgers if not ledger.kept and not ledger.owner_alive()]
