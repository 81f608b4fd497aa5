"""Fleets: one study on every host of an Ansible inventory, into one store.

hvbench drives Debian's ``ansible-playbook`` with the playbook shipped beside this module
(``hvbench.yml``, readable and runnable alone) and a stdout callback of its own
(``callback_plugins/hvbench_events.py``) whose JSON lines say what each host does. Ansible
reaches the hosts, installs hvbench there and runs the study; this module only checks the
inventory, packs this checkout, follows the hosts and remembers the fleet run so that the same
command resumes it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import platformdirs

from hvbench.errors import HvbenchError

HERE = Path(__file__).parent
PLAYBOOK = HERE / "hvbench.yml"
RUN_TASK = "Run the study"
"""The playbook's task that runs the study: a host that failed before it never ran anything."""
PACKED = ("pyproject.toml", "setup.sh", "README.md", "scripts", "src")
"""What of this checkout a host needs to install hvbench (setup.sh's inputs)."""


@dataclass
class HostProgress:
    """One host's progress through the playbook, as its events tell it."""

    name: str
    step: str = "waiting"
    status: str = "pending"
    """pending, running, finished (its run ended), failed (with ``error``)."""
    error: str | None = None
    failed_before_run: bool = False
    """Unreachable, no root, setup failed: nothing of the study ran on this host."""
    run_id: str | None = None
    run_status: str | None = None
    """The run's own status: finished, or failed when some of its cells failed."""


@dataclass
class FleetRun:
    """A fleet run: its name (the tag every host's run carries) and its hosts."""

    fleet: str
    hosts: dict[str, HostProgress] = field(default_factory=dict)
    fetched: dict[str, Path] = field(default_factory=dict)
    """Host name -> its SQLite store fetched back (SQLite path only)."""


def _ansible(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise HvbenchError(f"{tool} is not installed: ./setup.sh --with-fleet")
    return path


def _env() -> dict[str, str]:
    """Ansible's environment: inventories that do not parse are errors, not warnings."""
    return os.environ | {
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_NOCOLOR": "true",
    }


def list_hosts(inventory: Path, limit: str | None = None) -> list[str]:
    """The hosts the fleet run will act on, refused when there is none (exit 2)."""
    if not inventory.is_file():
        raise HvbenchError(
            f"inventory {inventory}: no such file; give an Ansible inventory (INI or YAML) with -i"
        )
    cmd = [_ansible("ansible"), "all", "-i", str(inventory), "--list-hosts"]
    cmd += ["--limit", limit] if limit else []
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    said = " ".join(done.stderr.split())
    if done.returncode != 0:
        if limit and "no hosts to target" in said:
            raise HvbenchError(f"inventory {inventory}: --limit {limit!r} matches no host")
        why = re.search(
            r"Failed to parse \S+ with (\w+) plugin: (.*?)(?= \[WARNING\]| ERROR!|$)", said
        )
        reason = f"{why[2]} ({why[1]} plugin)" if why else said
        raise HvbenchError(
            f"inventory {inventory}: not an Ansible inventory Ansible can read: {reason}"
        )
    hosts = [line.strip() for line in done.stdout.splitlines()[1:] if line.strip()]
    if not hosts:
        raise HvbenchError(f"inventory {inventory} holds no hosts; add at least one")
    return hosts


def checkout() -> Path:
    """This hvbench's source tree (a host installs it with setup.sh)."""
    root = HERE.parents[2]
    if not all((root / name).exists() for name in PACKED):
        raise HvbenchError(
            f"hvbench at {root} is not a source checkout (no setup.sh): fleet run installs "
            "the hosts from one; run it from a clone of hvbench"
        )
    return root


def pack(root: Path, dest: Path) -> Path:
    """This checkout as a reproducible .tar.gz: the same sources give the same bytes, so the
    playbook's copy step leaves a host that already has them alone."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name or info.name.endswith(".pyc") or ".egg-info" in info.name:
            return None
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in PACKED:
            paths = [root / name]
            if (root / name).is_dir():
                paths = sorted(p for p in (root / name).rglob("*") if not p.is_dir())
            for path in paths:
                tar.add(path, arcname=str(path.relative_to(root)), filter=clean)
    data = gzip.compress(buf.getvalue(), mtime=0)
    if not dest.exists() or dest.read_bytes() != data:
        dest.write_bytes(data)
    return dest


def state_dir() -> Path:
    return platformdirs.user_data_path("hvbench") / "fleets"


def fleet_name(
    study_text: str, study_name: str, quick: bool, inventory: Path, db: str, labels: dict[str, str]
) -> str:
    """The fleet run this command continues: the one it started before, while some host of
    the inventory has not finished; a new one once they all had, or with other labels (the
    next night's build)."""
    key = hashlib.sha256(
        json.dumps([study_text, quick, str(inventory.resolve()), db, labels]).encode()
    ).hexdigest()[:16]
    path = state_dir() / f"{key}.json"
    if path.exists():
        state = json.loads(path.read_text())
        if not state["complete"]:
            unfinished: str = state["fleet"]
            return unfinished
    fleet = f"{study_name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fleet": fleet, "complete": False, "key": key}))
    return fleet


def mark_complete(fleet: str) -> None:
    """Every host of the fleet finished: the next fleet command starts a new fleet run."""
    for path in state_dir().glob("*.json"):
        state = json.loads(path.read_text())
        if state["fleet"] == fleet:
            path.write_text(json.dumps(state | {"complete": True}))


RUN_LINE = re.compile(r"^run (\S+): (\w+)", re.M)


def play(
    fleet: FleetRun,
    inventory: Path,
    extra: dict,
    limit: str | None,
    forks: int,
    on_event: Callable[[HostProgress], None],
) -> None:
    """Run the playbook, updating each host as its events arrive."""
    workdir = Path(extra["hvbench_fetch_dir"]).parent
    (workdir / "vars.json").write_text(json.dumps(extra))
    cmd = [_ansible("ansible-playbook"), "-i", str(inventory), str(PLAYBOOK)]
    cmd += ["-e", f"@{workdir / 'vars.json'}", "--forks", str(forks)]
    cmd += ["--limit", limit] if limit else []
    env = _env() | {
        "ANSIBLE_STDOUT_CALLBACK": "hvbench_events",
        "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
    }
    with (workdir / "ansible.stderr").open("w+") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        assert proc.stdout is not None, "a pipe"
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            host = fleet.hosts.setdefault(event["host"], HostProgress(event["host"]))
            _follow(host, event)
            on_event(host)
        proc.wait()
        stderr.seek(0)
        said = stderr.read().strip()
    if proc.returncode != 0 and not any(h.status == "failed" for h in fleet.hosts.values()):
        raise HvbenchError(f"ansible-playbook failed: {said.splitlines()[-1] if said else ''}")
    for name, host in fleet.hosts.items():
        if host.status == "running":  # the playbook ended without the host's last task
            host.status = "finished"
        fetched = Path(extra["hvbench_fetch_dir"]) / f"{name}.db"
        if not extra["hvbench_db"] and host.run_id and fetched.exists():
            fleet.fetched[name] = fetched


def _follow(host: HostProgress, event: dict) -> None:
    """One event of the callback: move the host on, or mark it failed with its one line."""
    kind, task = event["event"], event["task"]
    if kind == "start":
        host.status, host.step = "running", task
    elif kind in ("failed", "unreachable") and not event.get("ignored"):
        host.status = "failed"
        host.failed_before_run = task != RUN_TASK
        host.error = f"{kind} at {task!r}: {event['error']}"
    elif kind == "ok" and task == RUN_TASK:
        found = RUN_LINE.findall(event.get("stdout", ""))
        if found:
            host.run_id, host.run_status = found[-1]
