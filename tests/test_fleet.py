"""Fleets for real: Ansible installs hvbench on three hosts and runs a study on each.

Each host is a network namespace of this machine with an sshd of the test's own on an address
inside it (keys, host keys and known_hosts in a temporary directory; nothing written to root's
ssh configuration); a PostgreSQL server of the suite's own is the one store they write into, or
each host's SQLite comes back and is imported. Traffic stays on this machine.

What the test skips, and why: the hosts share this machine's filesystem and packages and have no
network, so the playbook's `setup.sh` step (apt-get and pip, which need the Debian and PyPI
mirrors) is replaced by the site-virtualenv path (`hvbench_venv`: the suite's own virtualenv);
the playbook still copies and unpacks this checkout into each host's own `hvbench_dir`, checks
the Debian packages, and runs that copy of hvbench.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import require
from test_store import postgres_url  # noqa: F401 (the suite's PostgreSQL server)

from hvbench.store import Store

STUDY = """\
name: fleet-smoke
baseline: native
platforms:
  native: {driver: native}
workloads:
  - {name: cpu, suite: micro}
instances: [1]
repetitions: 1
"""
SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/id.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
"""
SSH_CONFIG = """\
IdentityFile {dir}/id
IdentitiesOnly yes
UserKnownHostsFile {dir}/known_hosts
GlobalKnownHostsFile /dev/null
StrictHostKeyChecking accept-new
ConnectTimeout 5
"""
HOSTS = ("alpha", "beta", "gamma")


@dataclass
class Lab:
    dir: Path
    addresses: dict[str, str]
    links: dict[str, str]
    """Host -> the root-namespace end of its veth (down: the host is unreachable)."""

    def inventory(self, name: str, hosts: tuple[str, ...] = HOSTS, extra: str = "") -> Path:
        """An INI inventory of ``hosts`` (plus ``extra`` lines), or YAML for a ``.yml`` name."""
        common = {
            "ansible_user": "root",
            "ansible_ssh_common_args": f"-F {self.dir}/ssh_config",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_remote_tmp": f"{self.dir}/remote-tmp",
            "hvbench_venv": sys.prefix,
        }
        each = {
            h: {"ansible_host": self.addresses[h], "hvbench_dir": f"{self.dir}/hosts/{h}"}
            for h in hosts
        }
        path = self.dir / name
        if name.endswith(".yml"):
            tree = {"all": {"vars": common, "children": {"fleet": {"hosts": each}}}}
            path.write_text(yaml.safe_dump(tree))
            return path
        lines = ["[fleet]"]
        lines += [" ".join([h, *(f"{k}={v}" for k, v in each[h].items())]) for h in hosts]
        lines += [extra, "[fleet:vars]"]
        lines += [f"{k}='{v}'" for k, v in common.items()]
        path.write_text("\n".join(lines) + "\n")
        return path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """Three namespaces, each with its sshd; removed after, also when a test failed."""
    require(Path("/usr/sbin/sshd").exists(), "sshd (apt-get install openssh-server)")
    require(shutil.which("ansible-playbook") is not None, "ansible (apt-get install ansible-core)")
    d = tmp_path_factory.mktemp("fleet")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / key], check=True)
    (d / "ssh_config").write_text(SSH_CONFIG.format(dir=d))
    tag = f"hvf{os.getpid() % 100000}"
    net = 16 + os.getpid() % 200
    lab = Lab(d, {}, {})
    namespaces: list[str] = []
    daemons: list[subprocess.Popen] = []
    try:
        for i, host in enumerate(HOSTS, 1):
            ns, outer, inner = f"{tag}-{host}", f"{tag}o{i}", f"{tag}i{i}"
            _ip("netns", "add", ns)
            namespaces.append(ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            _ip("addr", "add", f"10.252.{net}.{4 * i + 1}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", ns, "addr", "add", f"10.252.{net}.{4 * i + 2}/30", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            lab.addresses[host], lab.links[host] = f"10.252.{net}.{4 * i + 2}", outer
            config = d / f"sshd_{host}"
            config.write_text(SSHD_CONFIG.format(address=lab.addresses[host], dir=d))
            # sshd wants /run/sshd: a private, empty /run is made for it (and for what the
            # host's hvbench keeps in /run: its ledgers)
            command = [
                *("ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private"),
                *("--", "sh", "-c", 'mount -t tmpfs sshd /run && mkdir /run/sshd && exec "$@"'),
                *("sh", "/usr/sbin/sshd", "-D", "-e", "-f", str(config)),
            ]
            with (d / f"sshd_{host}.log").open("wb") as log:
                daemons.append(
                    subprocess.Popen(
                        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        for host, address in lab.addresses.items():
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection((address, 22), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, (d / f"sshd_{host}.log").read_text()
                    time.sleep(0.2)
        yield lab
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(15)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "delete", ns], check=False)


@pytest.fixture
def fleet_env(lab: Lab, tmp_path, monkeypatch) -> Path:
    """Ansible's and hvbench's own files of one test in its temporary directory."""
    for var, sub in (
        ("ANSIBLE_HOME", "ansible"),
        ("ANSIBLE_LOCAL_TEMP", "ansible-tmp"),
        ("ANSIBLE_SSH_CONTROL_PATH_DIR", "cp"),
        ("XDG_DATA_HOME", "data"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("ANSIBLE_PIPELINING", "true")  # fewer ssh round trips per task
    study = tmp_path / "fleet-smoke.yaml"
    study.write_text(STUDY)
    return study


def _fleet(*args: str) -> tuple[int, dict | None, str]:
    done = subprocess.run(
        [sys.executable, "-m", "hvbench", "fleet", "run", *args, "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout.split("\n", 1)
    report = json.loads(out[1]) if len(out) > 1 and out[1].strip() else None
    return done.returncode, report, done.stderr


def _hosts(report: dict) -> dict[str, dict]:
    return {h["host"]: h for h in report["hosts"]}


@pytest.mark.postgres
def test_three_hosts_into_postgresql_one_unreachable_then_resumed(lab, fleet_env, postgres_url):  # noqa: F811
    """gamma is made unreachable: reported, alpha and beta finish; the same command again
    leaves alpha's and beta's runs alone and runs gamma's."""
    inventory = lab.inventory("hosts.ini")
    _ip("link", "set", lab.links["gamma"], "down")
    try:
        code, report, said = _fleet(str(fleet_env), "-i", str(inventory), "--db", postgres_url)
    finally:
        _ip("link", "set", lab.links["gamma"], "up")
    assert code == 2, said
    hosts = _hosts(report)
    assert set(hosts) == set(HOSTS)
    assert hosts["gamma"]["status"] == "failed"
    assert "unreachable" in hosts["gamma"]["error"]
    assert [line for line in said.splitlines() if line.startswith("gamma: FAILED")], said
    for host in ("alpha", "beta"):
        assert hosts[host]["run_status"] == "finished", said
        assert f"{host}: Run the study" in said  # progress per host, as it went
    store = Store(postgres_url)
    assert set(store.fleet_runs(report["fleet"])) == {"alpha", "beta"}

    code, again, said = _fleet(str(fleet_env), "-i", str(inventory), "--db", postgres_url)
    assert code == 0, said
    assert again["fleet"] == report["fleet"]
    rerun = _hosts(again)
    for host in ("alpha", "beta"):
        assert rerun[host]["run"] == hosts[host]["run"]
    runs = store.fleet_runs(report["fleet"])
    assert {h: r.id for h, r in runs.items()} == {h: rerun[h]["run"] for h in HOSTS}
    assert all(r.status == "finished" for r in runs.values())
    assert len({r.id for r in runs.values()}) == 3


def test_a_hosts_sqlite_store_comes_back_and_is_imported(lab, fleet_env):
    inventory = lab.inventory("hosts.yml")
    code, report, said = _fleet(str(fleet_env), "-i", str(inventory), "--limit", "beta")
    assert code == 0, said
    (beta,) = report["hosts"]
    assert beta["run_status"] == "finished", said
    assert beta["imported"] == {beta["run"]: "added"}
    local = Store()
    assert {h: r.id for h, r in local.fleet_runs(report["fleet"]).items()} == {"beta": beta["run"]}
    run = local.run(beta["run"])
    assert run.status == "finished"
    assert run.inventory["hostname"]  # provenance came along
    assert local.metric_rows(run.id)
    # alpha and gamma never ran: the fleet run is not complete, the same command continues it
    assert fleet_state(report["fleet"])["complete"] is False


def fleet_state(fleet: str) -> dict:
    (state,) = [
        json.loads(p.read_text())
        for p in (Path(os.environ["XDG_DATA_HOME"]) / "hvbench" / "fleets").glob("*.json")
    ]
    assert state["fleet"] == fleet
    return state


def test_bad_inventories_are_one_line_before_anything_runs(lab, fleet_env, tmp_path):
    empty = tmp_path / "empty.ini"
    empty.write_text("")
    for inventory, complaint in (
        (tmp_path / "missing.ini", "no such file"),
        (empty, "holds no hosts"),
    ):
        code, report, said = _fleet(str(fleet_env), "-i", str(inventory))
        assert code == 2
        assert report is None
        assert said.count("\n") == 1 and complaint in said, said


def test_a_host_without_root_is_one_line(lab, fleet_env):
    """The same sshd as alpha, but the host's commands run as nobody (sudo -u nobody)."""
    inventory = lab.inventory(
        "noroot.ini",
        hosts=(),
        extra=(
            f"noroot ansible_host={lab.addresses['alpha']} hvbench_dir={lab.dir}/hosts/noroot "
            "ansible_become=true ansible_become_user=nobody"
        ),
    )
    code, report, said = _fleet(str(fleet_env), "-i", str(inventory))
    assert code == 2, said
    (host,) = report["hosts"]
    assert "needs root on noroot" in host["error"]
    assert [line for line in said.splitlines() if "noroot: FAILED" in line] == [
        f"noroot: FAILED {host['error']}"
    ]
