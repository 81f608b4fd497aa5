"""User-mode Linux: the XSAVE shim against the real host kernel, doctor's verdict, and a real UML
guest running cpu, disk and net workloads through the runner, with nothing left behind."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import guest_fixtures
import pytest
from guest_fixtures import GuestRun
from polling import wait_for
from pydantic import ValidationError
from run_checks import leftovers

from hvbench.drivers import DRIVERS
from hvbench.drivers.base import Needs
from hvbench.drivers.last_words import log_excerpt
from hvbench.drivers.serial_relay import LineRelay
from hvbench.drivers.uml import (
    MeteredLineRelay,
    UmlDriver,
    UmlSettings,
    build_shim,
    init_ran,
    probe_boot,
    xstate_verdict,
)
from hvbench.errors import HvbenchError, InstanceError
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study

PTRACE_TRACEME, PTRACE_GETREGSET, PTRACE_SETREGSET = 0, 0x4204, 0x4205
NT_X86_XSTATE = 0x202
UML_XSTATE_BYTES = 832
"""sizeof(struct _xstate): the buffer UML 6.1 knows (legacy area, header, AVX)."""
XMM0 = 160
"""Offset of XMM0 in the XSAVE legacy area."""


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _ptrace(lib: ctypes.CDLL):
    fn = lib.ptrace
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return fn


def _xstate(ptrace, pid: int) -> bytes:
    buf = ctypes.create_string_buffer(1 << 16)
    iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), len(buf))
    assert ptrace(PTRACE_GETREGSET, pid, NT_X86_XSTATE, ctypes.byref(iov)) == 0
    return buf.raw[: iov.len]


def test_shim_turns_a_short_xstate_write_into_a_full_one(tmp_path):
    """The host kernel refuses a short NT_X86_XSTATE write (what kills UML on AMX hosts); through
    the shim the same write succeeds and lands in the tracee's registers. Where the host's XSAVE
    area is no larger than UML's buffer (832 bytes on some machines of this kind), the kernel
    takes UML's write as it is: the shim must pass it through, and does."""
    libc = _ptrace(ctypes.CDLL(None, use_errno=True))
    shim = _ptrace(ctypes.CDLL(str(build_shim(tmp_path)), use_errno=True))
    pid = os.fork()
    if pid == 0:  # the tracee: stop until the parent has written its registers
        libc(PTRACE_TRACEME, 0, None, None)
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    try:
        os.waitpid(pid, os.WUNTRACED)
        full = _xstate(libc, pid)
        if len(full) <= UML_XSTATE_BYTES:
            whole = ctypes.create_string_buffer(full, len(full))
            whole[XMM0 : XMM0 + 16] = b"hvbench-xstate!!"
            iov = _Iovec(ctypes.cast(whole, ctypes.c_void_p), len(full))
            assert shim(PTRACE_SETREGSET, pid, NT_X86_XSTATE, ctypes.byref(iov)) == 0
            assert _xstate(libc, pid)[XMM0 : XMM0 + 16] == b"hvbench-xstate!!"
            return
        short = ctypes.create_string_buffer(full[:UML_XSTATE_BYTES], UML_XSTATE_BYTES)
        short[XMM0 : XMM0 + 16] = b"hvbench-xstate!!"
        iov = _Iovec(ctypes.cast(short, ctypes.c_void_p), UML_XSTATE_BYTES)
        assert libc(PTRACE_SETREGSET, pid, NT_X86_XSTATE, ctypes.byref(iov)) == -1
        assert ctypes.get_errno() == 14  # EFAULT, as UML reports it
        assert shim(PTRACE_SETREGSET, pid, NT_X86_XSTATE, ctypes.byref(iov)) == 0
        after = _xstate(libc, pid)
        assert after[XMM0 : XMM0 + 16] == b"hvbench-xstate!!"
        assert after[UML_XSTATE_BYTES:] == full[UML_XSTATE_BYTES:]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_probe_whose_init_died_of_the_fp_write_is_no_success():
    """Real consoles of the probe on a host with AMX's XSAVE area: without the shim, init is
    killed by the failed FP write (the same panic as a clean exit), with it, init exits."""
    fixtures = Path(__file__).parent / "fixtures" / "uml"
    assert not init_ran((fixtures / "probe-fp-failed.txt").read_bytes())
    assert init_ran((fixtures / "probe-init-ran.txt").read_bytes())


def test_uml_reaches_user_space_through_the_shim(tmp_path):
    """Every FP register write of a real UML goes through the shim (which also reads the full
    state first), and its guest still runs its init."""
    output, ok = probe_boot({"LD_PRELOAD": str(build_shim(tmp_path))})
    assert ok, output[-500:]


def _connect_soon(path: str) -> socket.socket:
    """A connection the relay accepts within seconds (a full backlog refuses at once)."""

    def connect() -> socket.socket | None:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(5)
        try:
            client.connect(path)
        except BlockingIOError:
            client.close()
            return None
        return client

    return wait_for(connect, 5, "the relay accepting a client", interval=0.01)


def test_relay_serves_clients_even_when_the_guest_reads_nothing(tmp_path):
    """A guest that stops reading its serial line must not stall the host side: clients still
    connect (none waits on a full backlog), and what the guest says reaches the newest one."""
    guest, ours = socket.socketpair()
    path = str(tmp_path / "agent.sock")
    relay = LineRelay(ours.detach(), path, log=tmp_path / "console.log")
    relay.start()
    try:
        for _ in range(20):  # 2 MB in all: more than the socket buffers and the relay's queue
            client = _connect_soon(path)
            with contextlib.suppress(OSError):  # a client flooding a stuck guest is dropped
                client.sendall(b"x" * 100_000)
            client.close()
        client = _connect_soon(path)
        client.settimeout(0.2)
        heard = b""
        deadline = time.monotonic() + 5
        while b"hello" not in heard and time.monotonic() < deadline:
            guest.sendall(b"hello\n")  # until the relay has accepted this client
            with contextlib.suppress(TimeoutError):
                heard += client.recv(100)
        assert b"hello" in heard
        client.close()
    finally:
        relay.stop()
        guest.close()
    assert not relay.is_alive()
    assert log_excerpt(relay.log).endswith(
        "hello"
    )  # what the guest said is also in the console log


def _sync(token: int) -> bytes:
    return json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": token}}).encode()


def test_relay_meters_what_reaches_a_guest_that_is_not_reading(tmp_path):
    """UML reads its line only when new bytes arrive, and goes deaf for good once ~4 KB reach
    the guest's tty at once. So while the guest reads nothing (its agent not up yet), a client
    resending its sync must not pile up: the guest then finds the first request and newlines
    that wake UML, and once it has read those, the newest request alone; a long request comes
    in chunks, each once the one before was read."""
    guest, ours = socket.socketpair()
    path = str(tmp_path / "agent.sock")
    relay = MeteredLineRelay(ours.detach(), path)
    relay.start()
    try:
        client = _connect_soon(path)
        for token in range(30):  # 3 s of GuestAgent.wait_ready against a guest still booting
            client.sendall(_sync(token) + b"\n")
            time.sleep(0.1)
        guest.settimeout(1)
        pile = guest.recv(1 << 20)
        assert pile.startswith(_sync(0) + b"\n") and len(pile) < 200
        assert pile.count(b"\n") > 10  # the newlines
        rest = guest.recv(1 << 20)
        assert rest == _sync(29) + b"\n"

        request = b'{"execute": "guest-exec", "arguments": {"input-data": "' + b"A" * 10_000
        client.sendall(request + b'"}}\n')
        time.sleep(0.2)
        got = guest.recv(1 << 20)
        assert len(got) == MeteredLineRelay.CHUNK  # the rest waits until the guest has read this
        while not got.endswith(b"\n"):
            got += guest.recv(1 << 20)
        assert got == request + b'"}}\n'
        client.close()
    finally:
        relay.stop()
        guest.close()


def test_registered_and_settings_checked():
    assert DRIVERS["uml"] is UmlDriver
    with pytest.raises(ValidationError, match="at least 64M"):
        UmlSettings(driver="uml", memory="32M")
    with pytest.raises(ValidationError, match="needs a path"):
        UmlSettings(driver="uml", disk={"backing": "block"})
    with pytest.raises(ValidationError):
        UmlSettings(driver="uml", vcpus=2)  # UML 6.1 is uniprocessor: no such field


def test_a_userland_needs_the_ubd_root(tmp_path):
    """kernbench's and consolidation's root filesystem image boots on a ubd, not over hostfs:
    one line naming the setting and the fix, before anything is built or started."""
    settings = UmlSettings(driver="uml", root="hostfs")
    no_run: Any = None  # refused before it needs the run's ledger or network
    driver = UmlDriver("h", settings, Needs(userland=True), no_run, no_run, tmp_path)
    with pytest.raises(HvbenchError, match=r"platform h: .*root: hostfs cannot; use root: ubd"):
        driver.start(1, time.monotonic() + 10)


def test_doctor_says_whether_the_shim_is_needed():
    verdict = xstate_verdict()
    assert verdict is not None and verdict.usable
    found = UmlDriver.check()
    assert found.ok
    assert "shim" in found.detail or "unaided" in found.detail
    assert found.detail.startswith("UML 6.")


STUDY = """\
name: uml-test
platforms:
  uml: {driver: uml, memory: 512M, disk: {size: 256M}}
workloads:
  - {name: cpu, suite: micro, integer: {duration: 1}, float: {duration: 1}, memory: {duration: 1},
     branchy: {duration: 1}}
  - {name: disk, tool: dd, size: 16M}
  - {name: net, tool: iperf3, directions: [in, out], parallel: 1, seconds: 2}
instances: [1]
repetitions: 1
"""


@pytest.mark.guest
def test_cpu_disk_and_net_run_in_a_uml_guest_and_nothing_is_left():
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(STUDY, "t"), quick=True))
    assert session.run().status == "finished", [s.error for s in store.samples(session.run_id)]
    names = {r.name for r in store.metric_rows(session.run_id)}
    assert "cpu.branchy.primes_events_per_s" in names
    assert any(n.startswith("disk.dd.") for n in names)
    assert {"net.iperf3.inbound_gbps", "net.iperf3.outbound_gbps"} <= names
    assert all(s.status == "ok" for s in store.samples(session.run_id))
    assert leftovers(session.run_id) == []
    uml = subprocess.run(["pgrep", "-a", "-x", "linux.uml"], capture_output=True, text=True)
    assert session.run_id not in uml.stdout


@pytest.mark.guest
def test_hostfs_root_data_disk_and_a_crash(guest_run: GuestRun):
    """The other root (a host directory), the data disk as ubdb beside it, the NIC, and a UML
    killed under the harness: dead, and commands fail with an InstanceError."""
    settings = UmlSettings(driver="uml", memory="128M", root="hostfs", disk={"size": "64M"})
    needs = Needs(tools=guest_fixtures.GUEST_TOOLS, data_disk=True)
    driver = UmlDriver("h", settings, needs, guest_run.ledger, guest_run.network, guest_run.workdir)
    (inst,) = driver.start(1, time.monotonic() + 120).instances
    try:
        mounts = inst.exec(["cat", "/proc/mounts"], timeout=30).text()
        assert "root / hostfs" in mounts
        assert "/dev/ubdb /mnt/hvbench-data ext4" in mounts
        assert inst.exec(["ping", "-c", "1", "-W", "5", "198.18.0.1"], timeout=30).ok
        pids = inst.host_pids()
        assert len(pids) > 1  # the UML kernel and the host processes of its guest
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: not inst.alive(), 10, "the killed UML dead")
        with pytest.raises(InstanceError):
            inst.exec(["true"], timeout=10)
    finally:
        driver.stop([inst])
    assert (
        subprocess.run(["pgrep", "-f", str(guest_run.workdir)], capture_output=True).stdout == b""
    )
