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

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sshd
import yaml
from builders import run_record, sample_record
from conftest import require
from polling import wait_for

from hvbench.errors import HvbenchError
from hvbench.host.resources import Ledger
from hvbench.store import CellRecord, Inventory, Store, WhatRan

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


def _listens(address: str, port: int) -> bool:
    """Whether something accepts connections at the address and port."""
    try:
        socket.create_connection((address, port), timeout=1).close()
    except OSError:
        return False
    return True


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """Three namespaces, each with its sshd; removed after, also when a test failed."""
    require(shutil.which("ansible-playbook") is not None, "ansible (apt-get install ansible-core)")
    d = tmp_path_factory.mktemp("fleet")
    sshd.keys(d)
    tag = f"hvf{os.getpid() % 100000}"
    net = 16 + os.getpid() % 200
    lab = Lab(d, {}, {})
    # hvbench's own ledger undoes them: a namespace with every process still in it (sshd gives
    # each connection a session of its own, which the daemon's group does not hold), the root
    # namespace's veth ends before it (a deleted namespace takes its veths only when the kernel
    # gets to destroy it, in the background, maybe during a later test that compares the
    # host's links before and after, as test_gvisor's did)
    ledger = Ledger(f"test-fleet-{tag}")
    ledger.claim()
    daemons: list[subprocess.Popen] = []
    try:
        for i, host in enumerate(HOSTS, 1):
            ns, outer, inner = f"{tag}-{host}", f"{tag}o{i}", f"{tag}i{i}"
            ledger.add("netns", ns)
            _ip("netns", "add", ns)
            ledger.add("link", outer)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            lab.links[host] = outer
            _ip("addr", "add", f"10.252.{net}.{4 * i + 1}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", ns, "addr", "add", f"10.252.{net}.{4 * i + 2}/30", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            lab.addresses[host] = f"10.252.{net}.{4 * i + 2}"
            daemons.append(
                sshd.start(d, f"sshd_{host}", lab.addresses[host], 22, ("ip", "netns", "exec", ns))
            )
        for host, address in lab.addresses.items():
            log = d / f"sshd_{host}.log"
            wait_for(
                functools.partial(_listens, address, 22),
                20,
                f"sshd of {host} listening",
                interval=0.2,
                detail=log.read_text,
            )
        yield lab
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(15)
        ledger.release_all()


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


def _hvbench(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hvbench", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _hosts(report: dict) -> dict[str, dict]:
    return {h["host"]: h for h in report["hosts"]}


@pytest.mark.postgres
def test_three_hosts_into_postgresql_one_unreachable_then_resumed(lab, fleet_env, postgres_url):
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

    # the cross-host report: the host is a dimension, % of native on each
    figures = json.loads(
        _hvbench("fleet", "report", report["fleet"], "--db", postgres_url, "--json")
    )
    assert {f["host"] for f in figures} == set(HOSTS)
    assert {(f["host"], f["run_id"]) for f in figures} == {(h, r.id) for h, r in runs.items()}
    assert all(f["platform"] == "native" and f["pct_of_native"] == 100 for f in figures)
    # compare two hosts of the fleet run (one run each: the comparison itself is not tested)
    done = subprocess.run(
        [sys.executable, "-m", "hvbench", "compare", f"{report['fleet']}/alpha",
         f"{report['fleet']}/beta", "--db", postgres_url, "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr
    assert runs["alpha"].id in done.stdout and runs["beta"].id in done.stdout


def test_a_hosts_sqlite_store_comes_back_and_is_imported(lab, fleet_env):
    inventory = lab.inventory("hosts.yml")
    code, report, said = _fleet(
        str(fleet_env), "-i", str(inventory), "--limit", "beta", "--label", "night=7"
    )
    assert code == 0, said
    (beta,) = report["hosts"]
    assert beta["run_status"] == "finished", said
    assert beta["imported"] == {beta["run"]: "added"}
    local = Store()
    assert {h: r.id for h, r in local.fleet_runs(report["fleet"]).items()} == {"beta": beta["run"]}
    run = local.run(beta["run"])
    assert run.status == "finished" and run.labels == {"night": "7"}
    assert run.inventory.hostname  # provenance came along
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


def test_a_host_without_root_and_one_whose_setup_fails_are_one_line_each(lab, fleet_env):
    """All on alpha's sshd: on ``noroot`` the commands run as nobody (sudo -u nobody); on
    ``nosetup`` the install directory cannot be made (it would be in /proc); ``badopt``, outside
    the group that names a site virtualenv, runs setup.sh with the ``--setup`` option given,
    which it does not know."""
    reach = (
        f"ansible_host={lab.addresses['alpha']} ansible_user=root ansible_ssh_common_args="
        f"'-F {lab.dir}/ssh_config' ansible_python_interpreter=/usr/bin/python3 "
        f"ansible_remote_tmp={lab.dir}/remote-tmp"
    )
    inventory = lab.inventory(
        "broken.ini",
        hosts=(),
        extra="\n".join(
            [
                f"noroot ansible_host={lab.addresses['alpha']} hvbench_dir={lab.dir}/hosts/noroot"
                " ansible_become=true ansible_become_user=nobody",
                f"nosetup ansible_host={lab.addresses['alpha']} hvbench_dir=/proc/hvbench",
                "[other]",
                f"badopt {reach} hvbench_dir={lab.dir}/hosts/badopt",
            ]
        ),
    )
    code, report, said = _fleet(str(fleet_env), "-i", str(inventory), "--setup=--with-nothing")
    assert code == 2, said
    hosts = _hosts(report)
    assert "needs root on noroot" in hosts["noroot"]["error"]
    assert "Make the install directory" in hosts["nosetup"]["error"]
    assert "setup.sh: unknown option --with-nothing" in hosts["badopt"]["error"]
    for name, host in hosts.items():
        assert host["status"] == "failed" and host["run"] is None
        assert [line for line in said.splitlines() if f"{name}: FAILED" in line] == [
            f"{name}: FAILED {host['error']}"
        ]


def _host_store(path: Path, run_id: str, reps: int, status: str) -> Store:
    store = Store(f"sqlite:///{path}")
    if run_id not in {r.id for r in store.runs()}:
        store.create_run(run_record(run_id))
        store.add_artifact(run_id, "fleet", {"fleet": "f1", "host": path.stem})
    cell = CellRecord(
        key="native|disk|1",
        platform="native",
        driver="native",
        workload="disk",
        workload_name="disk",
        instances=1,
        platform_settings={},
        workload_settings={},
        ran=WhatRan(bare=True),
    )
    cell_id = store.cell_id(run_id, cell)
    for rep in range(1, reps + 1):
        if (cell.key, rep) not in store.done(run_id):
            store.add_sample(cell_id, sample_record(rep, 100.0 + rep))
    store.set_run_status(run_id, status, finished=True)
    return store


def test_store_import_keeps_run_ids_and_provenance_and_brings_a_resumed_runs_rest(tmp_path):
    """Two hosts' stores into one: ids, inventories, artifacts, samples, metrics and raw
    outputs kept; importing again is a no-op, a resumed host run replaces its first account,
    and a different run under an id already taken is refused."""
    a = _host_store(tmp_path / "alpha.db", "r-alpha", 1, "interrupted")
    _host_store(tmp_path / "beta.db", "r-beta", 2, "finished")
    local = Store(f"sqlite:///{tmp_path / 'local.db'}")
    assert local.import_runs(a) == {"r-alpha": "added"}
    assert local.import_runs(Store(f"sqlite:///{tmp_path / 'beta.db'}")) == {"r-beta": "added"}
    assert local.import_runs(a) == {"r-alpha": "present"}
    assert set(local.fleet_runs("f1")) == {"alpha", "beta"}
    beta = local.run("r-beta")
    assert (beta.inventory, beta.status) == (Inventory(hostname="h"), "finished")
    assert [m.value for m in local.metric_rows("r-beta")] == [101.0, 102.0]
    assert [r.content for r in local.raw_outputs("r-beta")] == ["raw,csv,line"] * 2

    a = _host_store(tmp_path / "alpha.db", "r-alpha", 3, "finished")  # resumed on its host
    assert local.import_runs(a) == {"r-alpha": "replaced"}
    assert [m.value for m in local.metric_rows("r-alpha")] == [101.0, 102.0, 103.0]
    assert local.run("r-alpha").status == "finished"

    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    other.create_run(run_record("r-alpha"))  # the same id, made at another time
    with pytest.raises(HvbenchError, match="not the run of that id"):
        local.import_runs(other)


def test_store_import_of_a_missing_file_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hvbench", "store", "import", str(tmp_path / "nope.db")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no such file" in done.stderr
