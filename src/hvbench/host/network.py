"""The network of a run: a namespace of its own with a bridge and the peer endpoint.

Every instance, the native one included, reaches the peer through the same bridge, so that
"inbound" (peer -> instance) and "outbound" (instance -> peer) mean the same on every platform.
Nothing here touches the root namespace's addresses, routes or firewall. Addresses come from
198.18.0.0/15, the range RFC 2544 sets aside for benchmarking network devices.
"""

from __future__ import annotations

import ctypes
import ipaddress
import itertools
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import psutil

from hvbench.errors import HvbenchError
from hvbench.host.cgroup import Cgroup
from hvbench.host.process import failed
from hvbench.host.resources import Ledger, Resource, resource_name

PEER_ADDRESS = "198.18.0.1"
PREFIX = 16
FIRST_INSTANCE = ipaddress.IPv4Address("198.18.0.10")
INSTANCE_ADDRESSES = (1 << (32 - PREFIX)) - 10 - 1
"""Instances of one group the run's network has addresses for (``address``: 198.18.0.10 to
198.18.255.254): a storm of hundreds of containers, as their users start."""
ENGINE_HOSTS = range(2, 10)
"""The last byte of the addresses of the engines' hosts (``add_engine_netns``): 198.18.0.2-9."""
BRIDGE = "hvbr0"

_taps = itertools.count()


class NicNames(NamedTuple):
    """The host-side names of an instance's NIC."""

    tap: str
    mac: str


def tap_and_mac(tag: str, mac_byte: int, index: int) -> NicNames:
    """Names for the NIC of instance ``index``: a tap that no other hvbench process on the host
    names (``hv``, the driver's ``tag``, this process's id and a counter, within the kernel's
    15 characters), and a MAC in QEMU's range (52:54:00) whose fourth byte, ``mac_byte``,
    tells the drivers apart."""
    tap = f"hv{tag}{os.getpid() % 10000}t{next(_taps)}"
    return NicNames(tap, f"52:54:00:{mac_byte:02x}:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HvbenchError(
            f"{failed(' '.join(['ip', *args]), proc)} "
            "(hvbench needs root and iproute2 to make the run's network namespace)"
        )


def _ip_batch(netns: str | None, lines: Sequence[str], force: bool = False) -> None:
    """``ip -batch`` of ``lines``, inside ``netns`` where given: one process for many
    commands. ``force``: go on past a failing line and say nothing of it (a removal of what
    may be gone already); else HvbenchError with ``ip``'s words at the first."""
    if not lines:
        return
    where = ["-n", netns] if netns else []
    proc = subprocess.run(
        ["ip", *where, *(["-force"] if force else []), "-batch", "-"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 and not force:
        raise HvbenchError(
            f"{failed(' '.join(['ip', *where, '-batch']), proc)} "
            "(hvbench needs root and iproute2 to make the run's network namespace)"
        )


CLONE_NEWNET = 0x40000000
RTM_NEWLINK, RTM_NEWADDR, NLMSG_ERROR = 16, 20, 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFA_ADDRESS, IFA_LOCAL, IFF_UP = 1, 2, 0x1


def _configure_inside(namespaces: Sequence[tuple[str, str]]) -> None:
    """In each (namespace, address): lo up, the address on eth0, eth0 up, as ``ip -n NS``
    would, by netlink from this thread, which enters each namespace in turn (an ``ip`` each
    would cost a storm a process per instance). Run it in a thread of its own that ends after:
    it stays in the last namespace. HvbenchError with the kernel's word where one fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    for ns, address in namespaces:
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise HvbenchError(f"setns {ns}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)
        eth0 = socket.if_nametoindex("eth0")
        ip = socket.inet_aton(address)
        on_eth0 = struct.pack("=BBBBI", socket.AF_INET, PREFIX, 0, 0, eth0) + b"".join(
            struct.pack("=HH", 8, kind) + ip for kind in (IFA_LOCAL, IFA_ADDRESS)
        )
        requests = [
            (RTM_NEWLINK, _link_up(socket.if_nametoindex("lo")), 0),
            (RTM_NEWADDR, on_eth0, NLM_F_CREATE | NLM_F_EXCL),
            (RTM_NEWLINK, _link_up(eth0), 0),
        ]
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
            for seq, (kind, body, flags) in enumerate(requests):
                flags |= NLM_F_REQUEST | NLM_F_ACK
                nl.send(struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body)
                answer = nl.recv(65536)
                answered = struct.unpack("=H", answer[4:6])[0]
                error = struct.unpack("=i", answer[16:20])[0] if answered == NLMSG_ERROR else 0
                if error:
                    raise HvbenchError(f"netlink in {ns} ({address}): {os.strerror(-error)}")


def _link_up(index: int) -> bytes:
    """A link's ifinfomsg that sets it up."""
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, IFF_UP, IFF_UP)


class EngineHost(NamedTuple):
    """A container engine's namespace on the run's bridge (``RunNetwork.add_engine_netns``)."""

    netns: Resource
    """The namespace, in the ledger: its name is the namespace's."""
    address: str


class RunNetwork:
    """The run's namespace: bridge + peer address; hands out instance addresses and ports."""

    def __init__(self, run_id: str, ledger: Ledger) -> None:
        self.run_id = run_id
        self.ledger = ledger
        self.netns = resource_name(run_id)
        self._made = False
        self._lock = threading.Lock()
        self._clients: Cgroup | None = None
        self._engine_hosts = iter(ENGINE_HOSTS)

    # lifecycle ---------------------------------------------------------------------------

    def up(self) -> None:
        """Make the namespace and its bridge (idempotent; instances starting in parallel all
        call it)."""
        with self._lock:
            if self._made:
                return
            self.ledger.add("netns", self.netns)
            _ip("netns", "add", self.netns)
            _ip("-n", self.netns, "link", "set", "lo", "up")
            _ip("-n", self.netns, "link", "add", BRIDGE, "type", "bridge")
            _ip("-n", self.netns, "addr", "add", f"{PEER_ADDRESS}/{PREFIX}", "dev", BRIDGE)
            _ip("-n", self.netns, "link", "set", BRIDGE, "up")
            self._made = True

    @staticmethod
    def address(index: int) -> str:
        """The address of instance ``index`` of the group being run."""
        return str(FIRST_INSTANCE + index)

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    # ways in -----------------------------------------------------------------------------

    def add_tap(self, name: str, multi_queue: bool = False) -> Resource:
        """A tap on the bridge, for a guest whose VMM runs inside the namespace (one that opens
        it once per queue with ``multi_queue``); release the returned resource through the
        ledger to remove it."""
        self.up()
        res = self.ledger.add("link", name, netns=self.netns)
        flags = ["multi_queue"] if multi_queue else []
        _ip("-n", self.netns, "tuntap", "add", "dev", name, "mode", "tap", *flags)
        _ip("-n", self.netns, "link", "set", name, "master", BRIDGE, "up")
        return res

    def adopt_tap(self, name: str) -> Resource:
        """Move a tap that a VMM outside the namespace has just opened in the root namespace
        (libvirtd's QEMU) onto the bridge: the VMM keeps its file descriptor, the root
        namespace keeps nothing. Release the returned resource to remove the tap."""
        self.up()
        res = self.ledger.add("link", name, netns=self.netns)
        _ip("link", "set", name, "netns", self.netns)
        _ip("-n", self.netns, "link", "set", name, "master", BRIDGE, "up")
        return res

    def add_host_netns(self, index: int) -> Resource:
        """A namespace of its own for a host-side instance (native, containers), on the bridge
        through a veth pair; the resource's name is the namespace's."""
        return self.add_host_netns_many([index])[0]

    def add_host_netns_many(self, indices: Sequence[int]) -> list[Resource]:
        """``add_host_netns`` for a group's instances at once: all in the ledger in one write
        before any is made, made by three ``ip -batch`` runs and set up inside by netlink
        (``_configure_inside``): one ``ip`` command at a time, a storm of N would run 7N."""
        self.up()
        names = [f"{self.netns}-i{index}" for index in indices]
        made = self.ledger.add_many([("netns", ns, {}) for ns in names])
        pairs = list(zip(indices, names, strict=True))
        try:
            # the kernel destroys a deleted namespace in the background, with the veth it held:
            # the outer end of the previous group's instance may still be on the bridge
            _ip_batch(self.netns, [f"link delete hvv{index}" for index in indices], force=True)
            _ip_batch(None, [f"netns add {ns}" for ns in names])
            _ip_batch(self.netns, [
                line
                for index, ns in pairs
                for line in (f"link add hvv{index} type veth peer name eth0 netns {ns}",
                             f"link set hvv{index} master {BRIDGE} up")
            ])  # fmt: skip
            inside = [(ns, self.address(index)) for index, ns in pairs]
            with ThreadPoolExecutor(max_workers=1) as pool:  # a thread that enters them all
                pool.submit(_configure_inside, inside).result()
        except BaseException:
            self.ledger.release_many(made)
            raise
        return made

    def add_engine_netns(self) -> EngineHost:
        """A namespace on the bridge for a container engine that holds it for the whole run (a
        daemon, its bridge and NAT, its iptables rules and ip_forward: all inside), as a host of
        its own would be for it; the resource's name is the namespace's, with its address."""
        self.up()
        with self._lock:
            last = next(self._engine_hosts, None)
        if last is None:
            raise HvbenchError(
                f"a run has room for {len(ENGINE_HOSTS)} container engines' hosts; split the study"
            )
        ns, outer, address = f"{self.netns}-e{last}", f"hve{last}", f"198.18.0.{last}"
        res = self.ledger.add("netns", ns)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.netns, "link", "add", outer, "type", "veth", "peer", "name", "eth0",
            "netns", ns)  # fmt: skip
        _ip("-n", self.netns, "link", "set", outer, "master", BRIDGE, "up")
        _ip("-n", ns, "addr", "add", f"{address}/{PREFIX}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", PEER_ADDRESS)
        return EngineHost(res, address)

    def readdress_host_netns(self, index: int) -> None:
        """Put a host-side instance's address back on its namespace's link: gVisor's netstack
        takes it from there (runsc removes it from the link), and a restored sandbox reads it
        from the link again."""
        ns, address = f"{self.netns}-i{index}", f"{self.address(index)}/{PREFIX}"
        _ip("-n", ns, "addr", "replace", address, "dev", "eth0")

    # the peer ----------------------------------------------------------------------------

    def peer_argv(self, argv: Sequence[str]) -> list[str]:
        """argv run as the peer, inside the run's namespace."""
        return ["nsenter", f"--net={self.netns_path}", "--", *argv]

    def peer_run(self, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
        """Run a command on the peer and wait for it."""
        self.up()
        return subprocess.run(
            self.peer_argv(argv), capture_output=True, timeout=timeout, check=False
        )

    def clients(self) -> Cgroup:
        """The run's cgroup for load generators on the peer (made on first use): their CPU is
        theirs, not the platform's (see host/cgroup.py)."""
        with self._lock:
            if self._clients is None:
                self._clients = Cgroup.make(self.ledger, f"hvbench-{self.run_id}")
            return self._clients

    def clients_cpu(self) -> dict[str, float] | None:
        """User and system CPU seconds of the run's clients so far; None if none ever ran."""
        return self._clients.cpu_seconds() if self._clients else None

    def peer_start(self, argv: Sequence[str], log: Path) -> subprocess.Popen:
        """Start a long-lived peer process (a server), recorded in the ledger."""
        self.up()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                self.peer_argv(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.ledger.add_process(psutil.Process(proc.pid))
        return proc
