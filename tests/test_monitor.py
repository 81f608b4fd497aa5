"""The host CPU monitor: host states from a source, instances' CPU from their processes and
from what their platform accounts for them."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

from hvbench.host.monitor import LOCAL, STATES, CpuMonitor, HostCpuSource, read_proc_stat
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_an_instance_adds_what_its_platform_accounts_to_its_processes():
    """A Xen domain's vCPUs or a remote domain: seconds the platform reports, added to the
    instance's host processes (this test's own process here); None where there is no account."""
    domain = itertools.count(10.0, 2.5)  # 2.5 s of vCPU between the two readings
    monitor = CpuMonitor([[os.getpid()], [os.getpid()]], [lambda: next(domain), lambda: None])
    monitor.start()
    _spin(0.2)
    reading = monitor.stop()
    own, plain = reading.instances_s
    assert plain >= 0.15 and own - plain >= 2.5 - 0.05
    assert reading.host is None and reading.cores == LOCAL.cores


def test_the_instances_window_lies_within_the_hosts():
    """Host read first at the start and last at the stop: a domain's vCPU time, counted in the
    host's guest time too, is never more than the host's however long each read takes."""
    reads = []
    source = HostCpuSource(lambda: reads.append("host") or dict.fromkeys(STATES, 0.0), 2)
    monitor = CpuMonitor([[]], [lambda: reads.append("domain") or 0.0], source)
    monitor.start()
    monitor.stop()
    assert reads == ["host", "domain", "domain", "host"]


def test_states_come_from_the_source_of_the_host_the_instances_run_on():
    ticks = itertools.count(0.0, 3.0)

    def far_host() -> dict[str, float]:
        now = next(ticks)
        return {s: now if s in ("user", "idle") else 0.0 for s in STATES}

    monitor = CpuMonitor([[]], [lambda: None], HostCpuSource(far_host, 64, "far.example"))
    monitor.start()
    reading = monitor.stop()
    assert reading.host == "far.example" and reading.cores == 64
    assert reading.busy_s == 3.0 and reading.states_s["idle"] == 3.0
    assert reading.instances_s == [None]


def test_clients_in_their_cgroup_are_left_out_of_the_host_and_shown_apart(tmp_path):
    """A load generator spinning 0.3 s in the run's clients cgroup: its seconds appear as
    ``clients_s`` and come off the host's user time (which the spin also raised)."""
    ledger = Ledger("test-clients", tmp_path)
    network = RunNetwork(f"test-{os.getpid()}", ledger)
    try:
        group = network.clients().child("spin")
        monitor = CpuMonitor([[]], [lambda: None], clients=network.clients_cpu)
        monitor.start()
        spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
        subprocess.run(group.argv([sys.executable, "-c", spin]), check=True)
        stat = read_proc_stat()
        reading = monitor.stop()
        used = reading.clients_s
        assert used is not None
        assert used["user"] + used["system"] >= 0.25
        raw_user = stat["user"] - monitor._stat0["user"]
        assert reading.states_s["user"] <= raw_user - used["user"] + 0.05
    finally:
        ledger.release_all()
    assert not group.path.exists()
