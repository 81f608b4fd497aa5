"""Every request hvbench's Firecracker and Cloud Hypervisor drivers send, checked against the
VMMs' own API descriptions and documents without their binaries (vmm_contract.py): for every
workload that reaches the API differently (an initramfs guest for boot, memory, cpu and net, a
data disk for disk, a root filesystem for kernbench and consolidation; snapshots; Cloud
Hypervisor's live migration) and for every value of every enumerated or yes/no setting a study
can give, one at a time, with the numeric ones that change a request's shape. The drivers' own
code makes the requests; only the VMM process is replaced."""

from __future__ import annotations

import time
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from vmm_contract import (
    Answer,
    CloudHypervisorModel,
    FirecrackerModel,
    Violation,
    VmmWorld,
    contracts,
)

from hvbench.drivers.api_vmm import ApiVmmDriver, ApiVmmOpened, ApiVmmSettings, GuestSpec, Vmm
from hvbench.drivers.cloud_hypervisor import (
    CloudHypervisorDriver,
    CloudHypervisorLifecycle,
)
from hvbench.drivers.disks import DataImage
from hvbench.drivers.firecracker import FirecrackerDriver, FirecrackerLifecycle
from hvbench.errors import InstanceError
from hvbench.host.network import RunNetwork, tap_and_mac
from hvbench.host.resources import Ledger
from hvbench.runner import needs_of
from hvbench.study import parse_study

DRIVERS: dict[str, type[ApiVmmDriver]] = {
    "firecracker": FirecrackerDriver,
    "cloud-hypervisor": CloudHypervisorDriver,
}
MODELS = {"firecracker": FirecrackerModel, "cloud-hypervisor": CloudHypervisorModel}

WORKLOADS = {
    "boot": "{name: boot}",
    "memory": "{name: memory}",
    "cpu": "{name: cpu, suite: micro}",
    "disk": "{name: disk, tool: dd, size: 16M}",
    "net": "{name: net, tool: iperf3, seconds: 2}",
    "kernbench": "{name: kernbench}",
    "consolidation": "{name: consolidation, sets: 1}",
}
"""The workloads that run on both VMMs: what each needs of a guest (``needs_of``) decides the
requests (a data disk, a root filesystem)."""

NOT_IN_THE_API = {"driver", "backing"}
"""Settings that reach no request: the driver's name, and where the data disk's image lives
(the request names only its path)."""

NUMERIC = {
    "firecracker": [{"vcpus": 2}, {"memory": "1G"}, {"vcpus": 2, "smt": True}],
    "cloud-hypervisor": [
        {"vcpus": 2},
        {"memory": "1G"},
        {"vcpus": 2, "disk": {"num_queues": 2, "queue_size": 256}},
        {"net": {"num_queues": 4, "queue_size": 512}},
        {"hugepages": True, "shared": True},
    ],
}
"""Numbers a study may set that change what a request holds, and pairs that go together."""


def choices(model: type[BaseModel]) -> list[dict[str, Any]]:
    """One settings dict for each value of each enumerated (Literal) or yes/no setting of
    ``model``, its nested models' too, the others left at their defaults: a setting added to
    a driver is covered without a test's change."""
    out: list[dict[str, Any]] = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if name in NOT_IN_THE_API:
            continue
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += [{name: inner} for inner in choices(kind)]
        elif typing.get_origin(kind) is typing.Literal:
            out += [{name: value} for value in typing.get_args(kind)]
        elif kind is bool:
            out += [{name: False}, {name: True}]
    return out


def variants(vmm: str) -> list[dict[str, Any]]:
    settings = DRIVERS[vmm].settings_model
    return [*choices(settings), *NUMERIC[vmm]]


def _id(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={_id(v) if isinstance(v, dict) else v}" for k, v in variant.items())


CASES = [
    pytest.param(vmm, variant, workload, id=f"{vmm}-{workload}-{_id(variant)}")
    for vmm in DRIVERS
    for variant in variants(vmm)
    for workload in WORKLOADS
]


@pytest.fixture
def world(request, monkeypatch) -> VmmWorld:
    """The VMMs of the test (``vmm`` among its parameters or its marker) as their contracts:
    ``Vmm.launch`` makes them; no violation may be left at the end."""
    vmm = request.node.callspec.params["vmm"]
    made = VmmWorld(contracts()[vmm], MODELS[vmm])
    monkeypatch.setattr(Vmm, "launch", made.launch)
    return made


def _driver(vmm: str, settings: dict[str, Any], workload: str, tmp_path: Path) -> ApiVmmDriver:
    platform = f"{{driver: {vmm}, " + ", ".join(f"{k}: {_yaml(v)}" for k, v in settings.items())
    study = parse_study(
        f"name: c\nplatforms:\n  p: {platform}}}\nworkloads:\n  - {WORKLOADS[workload]}\n",
        "contract.yaml",
    )
    ledger = Ledger("contract", tmp_path / "ledgers")
    driver = DRIVERS[vmm](
        "p", study.platforms["p"], needs_of(study), ledger, RunNetwork("contract", ledger), tmp_path
    )
    # what open() finds: the binary on PATH (no process of it is started); the test names the
    # guest's files itself (``_start``)
    opened = ApiVmmOpened(vmm, image=None, rootfs=None)  # type: ignore[arg-type]
    driver._resolve = lambda: opened
    driver.open()
    return driver


def _yaml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _start(driver: ApiVmmDriver, tmp_path: Path) -> Any:
    """An instance started as ``ApiVmmDriver._start_one`` starts one, up to its guest's agent:
    its tap's name and MAC, the files its spec names (the kernel, the initramfs, its copy of
    the root filesystem and its data disk where its workloads need them), the VMM launched and
    the guest booted through the API."""
    inst = driver._instance(0)
    inst.driver = driver
    if driver.settings.nic != "none":
        inst.tap, inst.mac = tap_and_mac(driver.tap_tag, driver.mac_byte, 0)
    files = {name: tmp_path / name for name in ("vmlinux", "initrd.cpio", "root.ext4")}
    for path in files.values():
        path.write_bytes(b"\0" * 512)
    data = None
    if driver.needs.data_disk:
        data = DataImage.make(driver, driver.data_settings(), "p-0.data.raw", inst.resources)
    root = str(files["root.ext4"]) if driver.needs.userland else None
    spec = GuestSpec(str(files["vmlinux"]), str(files["initrd.cpio"]), "console=ttyS0", data, root)
    deadline = time.monotonic() + 30
    inst.process = driver.launch(inst, tmp_path / "p-0", spec, deadline, inst.channels)
    inst.process.wait_ready(deadline)
    return inst


@pytest.mark.parametrize(("vmm", "settings", "workload"), CASES)
def test_every_request_of_a_guests_start_is_one_the_vmm_describes(
    vmm, settings, workload, world, tmp_path
):
    driver = _driver(vmm, settings, workload, tmp_path)
    _start(driver, tmp_path)
    assert world.violations == []
    calls = world.paths()
    if vmm == "firecracker":
        assert calls[0] == "GET /" and calls[-1] == "PUT /actions", calls
        drives = [c for c in calls if c.startswith("PUT /drives/")]
        assert (
            drives
            == ["PUT /drives/rootfs"] * driver.needs.userland
            + ["PUT /drives/data"] * driver.needs.data_disk
        )
        nics = calls.count("PUT /network-interfaces/eth0")
    else:
        assert calls == ["GET /api/v1/vmm.ping", "PUT /api/v1/vm.create", "PUT /api/v1/vm.boot"]
        config = world.calls[1][2]
        assert len(config["disks"]) == driver.needs.userland + driver.needs.data_disk
        nics = len(config["net"])
    assert nics == (driver.settings.nic != "none")


def _settings(vmm: str, variant: dict[str, Any]) -> ApiVmmSettings:
    return DRIVERS[vmm].settings_model.model_validate({"driver": vmm, **variant})


def _cases(operation: str, vmms: tuple[str, ...] = tuple(DRIVERS)) -> list[Any]:
    """Each VMM's setting variants whose platform the operation runs on (the others are
    refused when the study loads, as test_api_vmms.py shows)."""
    return [
        pytest.param(vmm, variant, id=f"{vmm}-{_id(variant)}")
        for vmm in vmms
        for variant in variants(vmm)
        if _settings(vmm, variant).refuses(operation) is None
    ]


@pytest.mark.parametrize(("vmm", "settings"), _cases("snapshot"))
def test_a_snapshot_and_its_restore_are_requests_in_the_documented_order(
    vmm, settings, world, tmp_path
):
    """Pause before a snapshot; Firecracker: a full snapshot, resume, a diff snapshot, the diff
    merged onto the full one and loaded (resumed) into a new Firecracker configured no other
    way; Cloud Hypervisor: vm.snapshot, then vm.restore into a new one and vm.resume."""
    driver = _driver(vmm, settings, "boot", tmp_path)
    inst = _start(driver, tmp_path)
    booted = len(world.calls)
    report = inst.lifecycle().snapshot(time.monotonic() + 60)
    assert world.violations == []
    calls = world.paths()[booted:]
    if vmm == "firecracker":
        assert isinstance(inst.lifecycle(), FirecrackerLifecycle)
        assert calls == [
            "PATCH /vm", "PUT /snapshot/create", "PATCH /vm", "PATCH /vm", "PUT /snapshot/create",
            "GET /", "PUT /snapshot/load",
        ], calls  # fmt: skip
        load = world.calls[-1][2]
        memory = Path(load["mem_backend"]["backend_path"])
        # the merged memory: the diff's pages (every 4096th) over the full snapshot's
        assert [_byte(memory, page) for page in (0, 1, 4096)] == [b"D", b"F", b"D"]
        assert {"save_s", "restore_s", "diff_save_s", "diff_size_mib"} <= set(report.figures)
    else:
        assert isinstance(inst.lifecycle(), CloudHypervisorLifecycle)
        assert calls == [
            "PUT /api/v1/vm.pause", "PUT /api/v1/vm.snapshot", "GET /api/v1/vmm.ping",
            "PUT /api/v1/vm.restore", "PUT /api/v1/vm.resume",
        ], calls  # fmt: skip
        assert report.figures["size_mib"] > 0
    assert [v.ended for v in world.vmms] == [True, False]


@pytest.mark.parametrize(("vmm", "settings"), _cases("migrate", ("cloud-hypervisor",)))
def test_a_live_migration_is_a_receive_there_and_a_send_here(vmm, settings, world, tmp_path):
    """Cloud Hypervisor's live migration: a second VMM waits in vm.receive-migration, the first
    sends; the guest's vsock socket, unlinked by the source as it ends, is the destination's."""
    driver = _driver(vmm, settings, "boot", tmp_path)
    inst = _start(driver, tmp_path)
    source = inst.process
    vsock = Path(source.agent.path)
    plan = None  # Cloud Hypervisor's migration takes no plan of QEMU's
    inst.lifecycle().migrate(plan, time.monotonic() + 60)
    assert world.violations == []
    assert world.paths()[3:] == [
        "GET /api/v1/vmm.ping",
        "PUT /api/v1/vm.send-migration",
        "PUT /api/v1/vm.receive-migration",
    ] or world.paths()[3:] == [
        "GET /api/v1/vmm.ping",
        "PUT /api/v1/vm.receive-migration",
        "PUT /api/v1/vm.send-migration",
    ]
    assert source.ended and inst.process is world.vmms[1] and not inst.process.ended
    assert vsock.exists()  # the destination's, kept through the source's end


@pytest.mark.parametrize(
    ("vmm", "call", "answer", "said"),
    [
        ("firecracker", ("PUT", "/boot-source"),
         Answer(400, {"fault_message": "Invalid kernel path:\n  No such file or directory"}),
         "API PUT /boot-source refused (400): Invalid kernel path: No such file or directory"),
        ("cloud-hypervisor", ("PUT", "/api/v1/vm.boot"),
         Answer(404, "Error from API\n\nCaused by:\n    0: VM is not created"),
         "API PUT /api/v1/vm.boot refused (404): Error from API Caused by: 0: VM is not created"),
    ],
)  # fmt: skip
def test_a_refusal_reaches_the_user_as_one_line(vmm, call, answer, said, world, tmp_path):
    """A call the VMM refuses, as its description allows it to (Firecracker's
    ``fault_message``, Cloud Hypervisor's text), fails the start in one line that names the
    instance, the call and the VMM's words."""
    world.model = _refusing(world.model, call, answer)
    with pytest.raises(InstanceError) as refused:
        _start(_driver(vmm, {}, "boot", tmp_path), tmp_path)
    text = str(refused.value)
    assert text.startswith(f"p-0: {said}"), text
    assert "\n" not in text
    assert world.violations == []


def _byte(memory: Path, page: int) -> bytes:
    with memory.open("rb") as f:
        f.seek(page * 4096)
        return f.read(1)


def _refusing(model: type, call: tuple[str, str], answer: Answer) -> type:
    """The VMM's model, refusing ``call`` with ``answer``."""

    class Refusing(model):  # type: ignore[misc, valid-type]
        def __init__(self, hub: Any) -> None:
            super().__init__(hub)
            self.refusals[call] = answer

    return Refusing


@pytest.mark.parametrize("vmm", ["firecracker"])
def test_a_request_the_description_does_not_allow_fails(vmm, world, tmp_path, monkeypatch):
    """The contract is not vacuous: one field broken (vcpu_count as a string, the settings'
    validation bypassed) is a violation, and so is a call out of the documented order."""
    driver = _driver(vmm, {}, "boot", tmp_path)
    driver.settings = driver.settings.model_copy(update={"vcpus": "1"})
    with pytest.raises(Violation, match=r"PUT /machine-config .*'1' is not of type 'integer'"):
        _start(driver, tmp_path)
    assert len(world.violations) == 1
    (tmp_path / "again").mkdir()
    inst = _start(_driver(vmm, {}, "boot", tmp_path / "again"), tmp_path / "again")
    files = {"snapshot_path": str(tmp_path / "s"), "mem_file_path": str(tmp_path / "m")}
    with pytest.raises(Violation, match="a snapshot of a guest Running"):
        inst.process.api.call("PUT", "/snapshot/create", files)
