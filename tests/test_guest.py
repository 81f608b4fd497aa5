"""Guest images (reproducible initramfs, manifest) and the control channel (qemu-ga)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import guest_fixtures
import pytest
from guest_fixtures import GUEST_TOOLS

from hvbench.drivers.base import Needs
from hvbench.drivers.qemu import QemuDriver
from hvbench.drivers.qemu_machine import QemuSettings
from hvbench.errors import CommandTimeout, InstanceError, ToolMissing
from hvbench.guest import cpio, image
from hvbench.guest.agent import LINE_LIMIT, POLL, GuestAgent

# the initramfs ----------------------------------------------------------------------------


def _archive(entries: dict[str, cpio.Entry]) -> bytes:
    out = io.BytesIO()
    cpio.write(out, entries)
    return out.getvalue()


def test_cpio_is_reproducible_and_readable(tmp_path: Path):
    entries = {
        e.path: e
        for e in (
            cpio.directory("/etc"),
            cpio.regular("/etc/motd", b"hello\n"),
            cpio.regular("/bin/tool", b"#!/bin/sh\n", executable=True),
            cpio.symlink("/bin/sh", "busybox"),
            cpio.chardev("/dev/console", 5, 1),
        )
    }
    first = _archive(entries)
    assert first == _archive(dict(reversed(entries.items())))
    listing = subprocess.run(
        ["busybox", "cpio", "-tv"], input=first, capture_output=True, check=True
    ).stdout.decode()
    assert "etc/motd" in listing and "bin/sh -> busybox" in listing
    assert "crw-------" in listing


def test_image_manifest_matches_its_initramfs(guest_image: image.GuestImage, tmp_path: Path):
    """Every regular file in the initramfs is in the manifest with its sha256, and the packages
    the guest was made of are named with their versions."""
    manifest = guest_image.manifest
    assert manifest["key"] == guest_image.key
    assert manifest["tools"] == sorted(GUEST_TOOLS)
    for package in ("qemu-guest-agent", "iperf3", "busybox-static", "e2fsprogs"):
        assert package in manifest["packages"], package
    assert manifest["kernel"]["package"] in manifest["packages"]
    subprocess.run(
        ["busybox", "cpio", "-id"],
        stdin=guest_image.initrd.open("rb"),
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    found = {
        "/" + str(p.relative_to(tmp_path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
    assert found == {path: f["sha256"] for path, f in manifest["files"].items()}
    iperf = manifest["files"]["/usr/bin/iperf3"]
    assert iperf["package"].startswith("iperf3 ")
    host = hashlib.sha256(Path("/usr/bin/iperf3").read_bytes()).hexdigest()
    assert iperf["sha256"] == host  # the guest runs the host's own binary


def test_image_is_cached_by_content(guest_image: image.GuestImage):
    again = image.build(GUEST_TOOLS)
    assert again.key == guest_image.key
    assert image.find(guest_image.key[:8]).dir == guest_image.dir
    other = image.build(GUEST_TOOLS | {"true"})
    try:
        assert other.key != guest_image.key
        assert "/usr/bin/true" in other.manifest["files"]
    finally:
        shutil.rmtree(other.dir)


def test_missing_tool_is_one_clear_line():
    with pytest.raises(ToolMissing, match=r"no-such-benchmark-tool.*install"):
        image.build({"no-such-benchmark-tool"})


def test_a_tool_given_by_path_brings_its_data_files_and_directories():
    """povray (by path, as cpu apps names it) brings its configuration, its include directory
    and the benchmark scene, at their host paths."""
    files = image.host_files(["/usr/bin/povray"])
    assert "/etc/povray/3.7/povray.conf" in files
    assert "/usr/share/povray-3.7/include/colors.inc" in files
    assert "/usr/share/doc/povray/examples/advanced/benchmark/benchmark.pov" in files
    assert "/usr/bin/povray" in files and any("libstdc++" in f for f in files)


def test_vmlinux_is_an_elf(guest_image: image.GuestImage):
    assert guest_image.vmlinux is not None
    assert guest_image.vmlinux.read_bytes()[:4] == b"\x7fELF"


# the agent protocol against a misbehaving peer (a real socket, no QEMU) --------------------


def _serve(tmp_path: Path, respond: Callable[[socket.socket, bytes], None]) -> str:
    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def loop():
        conn, _ = server.accept()
        with conn:
            buf = b""
            while data := conn.recv(65536):
                buf += data
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    # 0xFF resets the parser, as in qemu-ga: what came before it is dropped
                    respond(conn, line.rpartition(b"\xff")[2])
        server.close()

    threading.Thread(target=loop, daemon=True).start()
    return path


def _sync_then(answer: bytes) -> Callable[[socket.socket, bytes], None]:
    """A peer that syncs properly, then answers every command with ``answer``."""

    def respond(conn: socket.socket, line: bytes) -> None:
        request = json.loads(line)
        if request["execute"] == "guest-sync-delimited":
            token = request["arguments"]["id"]
            conn.sendall(b"junk before the sentinel\xff" + json.dumps({"return": token}).encode())
            conn.sendall(b"\n")
        else:
            conn.sendall(answer)

    return respond


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (b"this is not json\n", "non-JSON"),
        (b'["a list"]\n', "unexpected answer"),
        (b'{"error": {"desc": "nope"}}\n', "nope"),
        (b'{"return": {"pid": "seven"}}\n', "no pid"),
        (b"x" * (LINE_LIMIT + 10), "over-long"),
    ],
)
def test_agent_garbage_raises_instance_error(tmp_path: Path, answer: bytes, complaint: str):
    agent = GuestAgent(_serve(tmp_path, _sync_then(answer)), "g")
    with pytest.raises(InstanceError, match=complaint):
        agent.spawn(["/bin/true"])


def test_agent_silence_times_out(tmp_path: Path):
    agent = GuestAgent(_serve(tmp_path, lambda conn, line: None), "g")
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        agent.wait_ready(time.monotonic() + 1.5)
    assert time.monotonic() - start < 5


def test_agent_slower_than_the_poll_is_ready_and_in_sync(tmp_path: Path):
    """qemu-ga on a loaded host answers each sync later than POLL: ready all the same (the
    answer to an earlier sync counts), and the next command gets its own answer, not a sync's."""

    def slow(conn: socket.socket, line: bytes) -> None:
        request = json.loads(line)
        if request["execute"] == "guest-sync-delimited":
            time.sleep(3 * POLL)  # qemu-ga answers in order, one request at a time
            conn.sendall(b"\xff" + json.dumps({"return": request["arguments"]["id"]}).encode())
            conn.sendall(b"\n")
        else:
            conn.sendall(b'{"return": {"pong": 1}}\n')

    agent = GuestAgent(_serve(tmp_path, slow), "g")
    agent.wait_ready(time.monotonic() + 10)
    assert agent.call("guest-ping", 10) == {"pong": 1}


# the channel in a real guest --------------------------------------------------------------


@pytest.fixture(scope="module")
def channel_guest(tmp_path_factory, guest_image):
    """One guest for the channel tests (the module's own run, checked for leftovers)."""
    with guest_fixtures.run_context(tmp_path_factory.mktemp("chan")) as run:
        settings = QemuSettings(driver="qemu", memory="256M", nic="none")
        needs = Needs(tools=GUEST_TOOLS)
        d = QemuDriver("chan", settings, needs, run.ledger, run.network, run.workdir)
        [inst] = d.start(1, time.monotonic() + 240).instances
        yield inst
        d.stop([inst])


@pytest.mark.guest
def test_large_output_survives(channel_guest):
    size = 24 << 20
    result = channel_guest.exec(["dd", "if=/dev/zero", "bs=1M", f"count={size >> 20}"], 120)
    assert result.ok and not result.truncated
    assert len(result.stdout) == size and result.stdout.count(b"\0") == size
    assert b"records out" in result.stderr


@pytest.mark.guest
def test_exit_codes_stdin_and_signals(channel_guest):
    assert channel_guest.exec(["false"], 30).exit_code == 1
    assert channel_guest.exec(["no-such-program"], 30).exit_code == 127
    echoed = channel_guest.exec(["cat"], 30, stdin=b"to the guest\n")
    assert echoed.stdout == b"to the guest\n"
    killed = channel_guest.exec(["sh", "-c", "kill -9 $$"], 30)
    assert killed.exit_code == 137
    timed = channel_guest.exec(["sleep", "1"], 30)
    assert 0.9 < timed.seconds < 10


@pytest.mark.guest
def test_timeout_kills_the_command_and_channel_goes_on(channel_guest):
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        channel_guest.exec(["sh", "-c", "sleep 300 & sleep 300"], timeout=2)
    assert time.monotonic() - start < 20
    left = channel_guest.exec(["ps"], 30).text()
    assert "sleep 300" not in left  # the whole process group went
    assert channel_guest.exec(["true"], 30).ok


def test_image_commands_list_show_prune(tmp_path: Path, monkeypatch, guest_image):
    """``hvbench image`` over a cache of two copies of a real image: list, show, prune."""
    from typer.testing import CliRunner

    from hvbench.cli.image import app

    monkeypatch.setenv("HVBENCH_IMAGE_CACHE", str(tmp_path))
    for minute, name in enumerate(("aaaa000000000000", "bbbb000000000000")):
        (tmp_path / name).mkdir()
        manifest = {**guest_image.manifest, "key": name}
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))
        # "newest first" goes by the manifest's time: bbbb's a minute after aaaa's
        stamp = time.time() + 60 * minute
        os.utime(tmp_path / name / "manifest.json", (stamp, stamp))
    cli = CliRunner()
    listed = cli.invoke(app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [i["key"] for i in json.loads(listed.output)] == [
        "bbbb000000000000",
        "aaaa000000000000",
    ]
    shown = cli.invoke(app, ["show", "aaaa", "--json"])
    assert shown.exit_code == 0, shown.output
    manifest = json.loads(shown.output)
    assert "qemu-guest-agent" in manifest["packages"] and "/usr/bin/iperf3" in manifest["files"]
    ambiguous = cli.invoke(app, ["show", "zz"])
    assert ambiguous.exit_code != 0 and "no image" in str(ambiguous.exception)
    (tmp_path / "uml").mkdir()
    for name in ("aaaa000000000000", "bbbb000000000000"):
        (tmp_path / "uml" / f"root-{name}.ext4").write_bytes(b"")  # UML's root of each image
    pruned = cli.invoke(app, ["prune", "--keep", "1"])
    assert pruned.exit_code == 0 and "aaaa000000000000" in pruned.output
    assert [i.key for i in image.images()] == ["bbbb000000000000"]
    assert [p.name for p in (tmp_path / "uml").glob("root-*")] == ["root-bbbb000000000000.ext4"]
