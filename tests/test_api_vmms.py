"""Firecracker and Cloud Hypervisor on this host: their settings as a study states them, doctor's
word and a run's refusal without their binaries, and the snapshot's merge; with the binaries on
PATH (opt-in: vmm_binaries.py), their real API's answers through hvbench's client. Their guests
boot in the KVM lab (test_kvm_lab.py): this host's /dev/kvm runs no stock guest. Every request
the drivers send is checked against the VMMs' API descriptions in test_vmm_contracts.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from oslevel_checks import cleaned_up, container_leftovers
from polling import wait_for
from vmm_binaries import VMMS, vmm_binary

from hvbench.drivers import DRIVERS
from hvbench.drivers.api_vmm import room_for_copies
from hvbench.drivers.firecracker import merge_layer
from hvbench.drivers.vmm_api import VmmApi
from hvbench.errors import HvbenchError, InstanceError
from hvbench.host.resources import resource_name
from hvbench.study import parse_study

HEAD = "name: s\nbaseline: a\nworkloads: [{name: boot}]\nplatforms:\n"


def _refusal(platforms: str, workloads: str = "[{name: boot}]") -> str:
    text = HEAD.replace("[{name: boot}]", workloads) + platforms
    with pytest.raises(HvbenchError) as e:
        parse_study(text, "s.yaml")
    return str(e.value)


@pytest.mark.parametrize(
    ("platform", "words"),
    [
        ("{driver: firecracker, nic: e1000}", "a.nic: expected one of 'virtio-net' or 'none'"),
        ("{driver: cloud-hypervisor, nic: rtl8139}", "expected one of 'virtio-net' or 'none'"),
        ("{driver: firecracker, machine: q35}", "known settings: driver, instances, binary"),
        ("{driver: cloud-hypervisor, disk: {bus: ide}}", "platforms.a.disk.bus: unknown setting"),
        ("{driver: firecracker, vcpus: 3}", "vcpus: 1 or an even number"),
        ("{driver: cloud-hypervisor, net: {num_queues: 3}}", "net num_queues: an even number"),
        ("{driver: cloud-hypervisor, disk: {num_queues: 2}}", "disk num_queues: at most vcpus"),
        ("{driver: firecracker, memory: 100M}", "memory: at least 128M"),
        ("{driver: firecracker, cpu_template: T9}", "expected one of 'None', 'C3'"),
    ],
)  # fmt: skip
def test_a_setting_the_vmm_lacks_is_refused_with_what_it_has(platform, words):
    assert words in _refusal(f"  a: {platform}\n")


def test_an_operation_the_vmm_lacks_is_refused_when_the_study_loads():
    fc = _refusal("  a: {driver: firecracker}\n", "[{name: migration}]")
    assert "migration cannot run on platform a: the firecracker driver has no live migration" in fc
    assert "restores from a snapshot instead" in fc
    ch = _refusal("  a: {driver: cloud-hypervisor}\n", "[{name: migration}]")
    assert "only a multi-queue tap allows (net: {num_queues: 4}, or nic: none)" in ch
    postcopy = _refusal(
        "  a: {driver: cloud-hypervisor, nic: none}\n", "[{name: migration, mode: postcopy}]"
    )
    assert "Cloud Hypervisor's migration copies guest memory in passes" in postcopy
    for settings in ("nic: none", "vcpus: 2, net: {num_queues: 4}"):
        ch = f"  a: {{driver: cloud-hypervisor, {settings}}}\n"
        parse_study((HEAD + ch).replace("boot", "migration"), "s.yaml")
    huge = _refusal("  a: {driver: firecracker, hugepages: 2M}\n", "[{name: snapshot}]")
    assert "userfaultfd" in huge
    parse_study((HEAD + "  a: {driver: cloud-hypervisor}\n").replace("boot", "snapshot"), "s.yaml")


def test_a_diff_layer_is_merged_onto_its_base_page_by_page(tmp_path):
    """Firecracker's diff snapshot holds the pages written since the full one, sparse, at their
    offsets: merged, the base holds the newest page wherever the layer has one, its own
    elsewhere."""
    page, pages = 4096, 64
    base, layer = tmp_path / "mem", tmp_path / "diff"
    old = os.urandom(page * pages)
    base.write_bytes(old)
    written = {3: os.urandom(page), 4: os.urandom(page), 40: os.urandom(page), 63: os.urandom(page)}
    with layer.open("wb") as f:
        f.truncate(page * pages)
        for index, data in written.items():
            f.seek(index * page)
            f.write(data)
    merge_layer(layer, base)
    merged = base.read_bytes()
    for index in range(pages):
        want = written.get(index, old[index * page : (index + 1) * page])
        assert merged[index * page : (index + 1) * page] == want, index
    assert len(merged) == page * pages


def test_root_filesystem_copies_that_cannot_fit_are_refused_before_any_is_made(tmp_path):
    """Each instance boots its own copy of the root filesystem: where the copies cannot fit in
    the run's directory (a tmpfs, which clones nothing) the start is refused in one line with
    the figures, and nothing is copied."""
    into = tmp_path / "small"
    into.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", str(into)], check=True)
    try:
        root = tmp_path / "root.ext4"
        with root.open("wb") as f:
            f.write(os.urandom(3 << 20))  # 3 MiB allocated
            f.truncate(64 << 20)  # of 64 MiB: the copies are sparse
        room_for_copies(root, 2, into, "platform fc")
        with pytest.raises(HvbenchError) as refused:
            room_for_copies(root, 3, into, "platform fc")
        assert str(refused.value).startswith(
            "platform fc: 3 instance(s) boot a copy each of the root filesystem (3M each, "
        )
        assert "9M in all, but " in str(refused.value) and "free space there" in str(refused.value)
        assert list(into.iterdir()) == []
    finally:
        subprocess.run(["umount", str(into)], check=True)


@pytest.mark.parametrize(
    ("vmm", "argv", "probe", "call", "message"),
    [
        (
            "firecracker",
            ["--api-sock", "{sock}", "--id", "t"],
            "/",
            ("PUT", "/boot-source", {"kernel_image_path": "/nonexistent/vmlinux"}),
            "refused (400)",
        ),
        (
            "cloud-hypervisor",
            ["--api-socket", "path={sock}"],
            "/api/v1/vmm.ping",
            ("PUT", "/api/v1/vm.boot", None),
            "refused (",
        ),
    ],
)
def test_an_api_error_is_one_line_with_the_vmms_own_message(
    tmp_path, vmm, argv, probe, call, message
):
    """The real VMM, its API up without a guest (that needs KVM): a call it refuses raises one
    line naming the VMM's instance, the call and what the VMM said."""
    sock = tmp_path / "api.sock"
    binary = vmm_binary(vmm)
    proc = subprocess.Popen(
        [binary, *(a.format(sock=sock) for a in argv)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    api = VmmApi(str(sock), f"{vmm}-0")
    try:
        api.wait(time.monotonic() + 30, lambda: proc.poll() is None, probe)
        assert api.call("GET", probe) is not None or vmm == "cloud-hypervisor"
        with pytest.raises(InstanceError) as e:
            api.call(*call)
    finally:
        api.close()
        proc.kill()
        proc.wait()
    text = str(e.value)
    assert text.startswith(f"{vmm}-0: API {call[0]} {call[1]} {message}"), text
    assert "\n" not in text and len(text.split(": ", 2)[2]) > 10, text


def test_a_vmm_that_exits_before_its_api_is_named(tmp_path):
    api = VmmApi(str(tmp_path / "none.sock"), "fc-0")
    with pytest.raises(InstanceError, match="fc-0: the VMM exited before its API"):
        api.wait(time.monotonic() + 5, lambda: False, "/")
    api.close()


def test_doctor_names_each_vmm_with_its_version_and_why_it_cannot_run_here(tmp_path):
    fc, ch = vmm_binary("firecracker"), vmm_binary("cloud-hypervisor")
    path = f"{Path(fc).parent}:{Path(ch).parent}:{os.environ['PATH']}"
    hvbench = Path(__file__).parents[1] / ".venv" / "bin" / "hvbench"
    out = subprocess.run(
        [str(hvbench if hvbench.exists() else "hvbench"), "doctor", "firecracker",
         "cloud-hypervisor", "--json"],
        capture_output=True, text=True, check=True, env={**os.environ, "PATH": path},
    )  # fmt: skip
    found = {f["name"]: f for f in json.loads(out.stdout) if f["kind"] == "driver"}
    assert found["firecracker"]["detail"].startswith("Firecracker v1."), found["firecracker"]
    assert found["cloud-hypervisor"]["detail"].startswith("cloud-hypervisor v"), found
    if Path("/sys/module/kvm_pvm").exists():  # this project's machines
        for name in ("firecracker", "cloud-hypervisor"):
            assert not found[name]["ok"]
            assert "/dev/kvm is kvm_pvm's, which runs only PVM-enabled" in found[name]["detail"]


def _without_vmms() -> dict[str, str]:
    """The environment with a PATH that holds no VMM binary, where one is installed."""
    dirs = os.environ["PATH"].split(":")
    kept = [d for d in dirs if not any((Path(d) / vmm).exists() for vmm in VMMS)]
    return {**os.environ, "PATH": ":".join(kept)}


def test_without_the_vmms_doctor_says_how_to_get_each(tmp_path):
    hvbench = Path(__file__).parents[1] / ".venv" / "bin" / "hvbench"
    out = subprocess.run(
        [str(hvbench if hvbench.exists() else "hvbench"), "doctor", *VMMS, "--json"],
        capture_output=True, text=True, check=True, env=_without_vmms(),
    )  # fmt: skip
    found = {f["name"]: f for f in json.loads(out.stdout) if f["kind"] == "driver"}
    assert found["firecracker"] == {
        "kind": "driver", "name": "firecracker", "ok": False, "detail": "Firecracker not found",
        "fix": "install Firecracker's release binary on PATH, or name it with binary:",
    }  # fmt: skip
    assert found["cloud-hypervisor"]["detail"] == "Cloud Hypervisor not found"


@pytest.mark.parametrize("vmm", VMMS)
def test_a_study_that_names_a_missing_vmm_is_refused_before_anything_runs(tmp_path, vmm):
    study = tmp_path / "study.yaml"
    study.write_text(f"name: s\nplatforms:\n  p: {{driver: {vmm}}}\nworkloads: [{{name: boot}}]\n")
    out = subprocess.run(
        [sys.executable, "-m", "hvbench", "run", str(study), "--db",
         f"sqlite:///{tmp_path / 'results.db'}"],
        capture_output=True, text=True, env=_without_vmms(), check=False,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    name = {"firecracker": "Firecracker", "cloud-hypervisor": "Cloud Hypervisor"}[vmm]
    assert out.stderr == (
        f"hvbench: {study}: cannot run on this host: platform p: {name} not found (fix: install "
        f"{name}'s release binary on PATH, or name it with binary:); or leave it out: hvbench "
        "run --skip-unavailable\n"
    )


@pytest.mark.guest
@pytest.mark.parametrize("driver", ["firecracker", "cloud-hypervisor"])
def test_a_killed_run_leaves_nothing_after_cleanup(tmp_path, driver):
    """SIGKILL ``hvbench run`` while the VMM boots its guest or runs dd in it: ``hvbench
    cleanup`` ends the VMM and removes its sockets, its data disk, its tap and the run's
    namespace and directories. Where KVM cannot run the VMM's guest (a PVM host), a run refuses
    the platform before it starts: nothing to kill."""
    binary = vmm_binary(driver)
    usable = DRIVERS[driver].check()
    if not usable.ok:
        pytest.skip(f"opt-in: {driver} cannot run a guest here ({usable.detail})")
    study = tmp_path / "study.yaml"
    study.write_text(
        f"name: killed\nplatforms:\n  p: {{driver: {driver}, binary: {binary}, "
        "memory: 256M, boot_timeout: 900, disk: {size: 64M}}\n"
        "workloads:\n  - {name: disk, tool: dd, size: 16M}\nrepetitions: 1\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hvbench", "run", str(study), "--db",
         f"sqlite:///{tmp_path / 'results.db'}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    run_id = proc.stdout.readline().split()[1]

    def vmm_started() -> bool:
        assert proc.poll() is None, f"hvbench run ended before {driver} started"
        return any(f.startswith("process") and driver in f for f in container_leftovers(run_id))

    # the guest image may be built first
    wait_for(vmm_started, 600, f"{driver} started for run {run_id}", interval=0.5)
    proc.kill()
    proc.wait()
    left = container_leftovers(run_id)
    assert any(resource_name(run_id) in f for f in left), left  # the namespace with the tap
    cleaned_up(run_id)
