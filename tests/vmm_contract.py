"""Firecracker and Cloud Hypervisor as their API descriptions say they answer, for proving
hvbench's drivers without the VMMs' binaries (test_vmm_contracts.py).

Only the VMM process is replaced: ``Vmm.launch`` makes a ``ContractVmm`` whose API client goes
through a ``ContractTransport`` instead of a Unix socket. Each request is validated against the
VMM's own description in ``../shared/vmm`` by a maintained validator (bravado-core for
Firecracker's Swagger 2.0, openapi-core for Cloud Hypervisor's OpenAPI 3.0): path, method, body
schema, required fields, enums. A model of the VMM's states (``FirecrackerModel``,
``CloudHypervisorModel``) checks the order its documents require and answers as the VMM would,
writing the files it writes (snapshots, sockets); each answer is validated against the same
description. Anything out of contract is a ``Violation``, which fails the test.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from bravado_core.request import IncomingRequest, unmarshal_request
from bravado_core.response import OutgoingResponse, get_response_spec, validate_response
from bravado_core.spec import Spec

from hvbench.drivers.api_vmm import Vmm
from hvbench.drivers.last_words import VmmFailed
from hvbench.drivers.vmm_api import VmmApi
from hvbench.guest.agent import VsockAgent
from hvbench.host.resources import Ledger

DESCRIPTIONS = Path(__file__).resolve().parents[1].parent / "shared" / "vmm"
"""The VMMs' API descriptions, beside the checkout (CI has shared/ there too)."""


class Violation(AssertionError):
    """A request, an order of requests or an answer that the VMM's description or documents do
    not allow."""


def description(vmm: str) -> dict[str, Any]:
    """The VMM's API description, closed: a schema that names its properties takes no others
    (``additionalProperties: false`` where it says nothing), since a field the VMM does not
    know is a setting of hvbench's that takes no effect (or that the VMM refuses)."""
    path = DESCRIPTIONS / f"{vmm}-api.yaml"
    if not path.exists():
        pytest.fail(f"no {path}: the VMMs' API descriptions are in the project's shared/vmm")
    # JSON's round trip makes the response codes strings, as both validators want them
    data = json.loads(json.dumps(yaml.safe_load(path.read_text())))
    named = data.get("definitions") or data["components"]["schemas"]  # Swagger 2.0, OpenAPI 3
    for schema in named.values():
        _close(schema)
    _close_inline(data["paths"])
    return data


def _close(schema: Any) -> None:
    """Close one schema and those inside it (a property may be named "properties")."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("properties"), dict):
        schema.setdefault("additionalProperties", False)
        for inner in schema["properties"].values():
            _close(inner)
    for key in ("items", "additionalProperties"):
        _close(schema.get(key))


def _close_inline(node: Any) -> None:
    """Close the schemas written inside the paths' requests and responses."""
    if isinstance(node, dict):
        for key, value in node.items():
            _close(value) if key == "schema" else _close_inline(value)
    elif isinstance(node, list):
        for value in node:
            _close_inline(value)


class Contract(ABC):
    """One VMM's API description and a validator made for its version of OpenAPI."""

    @abstractmethod
    def check_request(self, method: str, path: str, body: Any) -> None:
        """Raise Violation unless the description allows the request."""

    @abstractmethod
    def check_response(self, method: str, path: str, status: int, body: Any) -> None:
        """Raise Violation unless the description allows the answer."""


class _FirecrackerRequest(IncomingRequest):  # type: ignore[misc]
    def __init__(self, path: dict[str, str], body: Any) -> None:
        self.path, self.query, self.headers, self.form, self.files = path, {}, {}, {}, {}
        self._body = body

    def json(self) -> Any:
        return self._body


class _FirecrackerResponse(OutgoingResponse):  # type: ignore[misc]
    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self.headers, self._body = status, {}, body
        self.content_type = "application/json"
        self.text = self.raw_bytes = json.dumps(body) if body is not None else ""

    def json(self, **kwargs: Any) -> Any:
        return self._body


class FirecrackerContract(Contract):
    """Firecracker's Swagger 2.0 description through bravado-core."""

    def __init__(self) -> None:
        data = description("firecracker")
        for operations in data["paths"].values():  # bravado-core names resources by tag or
            for operation in operations.values():  # by path, which "/" has none of
                operation.setdefault("tags", ["firecracker"])
        config = {"use_models": False, "validate_requests": True, "validate_responses": True}
        spec = Spec.from_dict(data, config=config)
        self.operations = {
            (op.http_method.upper(), op.path_name): op
            for resource in spec.resources.values()
            for op in resource.operations.values()
        }

    def _operation(self, method: str, path: str) -> tuple[Any, dict[str, str]]:
        for (m, template), op in self.operations.items():
            pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
            if m == method and (match := re.fullmatch(pattern, path)):
                return op, match.groupdict()
        raise Violation(f"Firecracker's API has no {method} {path}")

    def check_request(self, method: str, path: str, body: Any) -> None:
        op, params = self._operation(method, path)
        try:
            unmarshal_request(_FirecrackerRequest(params, body), op)
        except Exception as e:
            raise Violation(f"{method} {path} {json.dumps(body)}: {_first_line(e)}") from e

    def check_response(self, method: str, path: str, status: int, body: Any) -> None:
        op, _ = self._operation(method, path)
        try:
            spec = get_response_spec(status, op)
            validate_response(spec, op, _FirecrackerResponse(status, body))
        except Exception as e:
            raise Violation(f"answer {status} to {method} {path}: {_first_line(e)}") from e


@dataclass
class _Request:
    """A request as openapi-core reads one."""

    path: str
    method: str
    body: bytes | None
    host_url: str = "http://localhost"
    content_type: str = "application/json"
    parameters: Any = field(default_factory=lambda: _parameters())


def _parameters() -> Any:
    from openapi_core.datatypes import RequestParameters

    return RequestParameters()


@dataclass
class _Response:
    status_code: int
    data: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


class CloudHypervisorContract(Contract):
    """Cloud Hypervisor's OpenAPI 3.0 description through openapi-core."""

    def __init__(self) -> None:
        from openapi_core import OpenAPI  # after Firecracker's: see ``contracts``

        self.api = OpenAPI.from_dict(description("cloud-hypervisor"))

    @staticmethod
    def _request(method: str, path: str, body: Any) -> _Request:
        data = json.dumps(body).encode() if body is not None else None
        return _Request(path, method.lower(), data, content_type="application/json" if data else "")

    def check_request(self, method: str, path: str, body: Any) -> None:
        try:
            self.api.validate_request(self._request(method, path, body))
        except Exception as e:
            raise Violation(f"{method} {path} {json.dumps(body)}: {_first_line(e)}") from e

    def check_response(self, method: str, path: str, status: int, body: Any) -> None:
        data, kind = b"", ""  # an error's text: the description gives no body for it
        if body is not None and not isinstance(body, str):
            data, kind = json.dumps(body).encode(), "application/json"
        try:
            self.api.validate_response(
                self._request(method, path, None), _Response(status, data, kind)
            )
        except Exception as e:
            raise Violation(f"answer {status} to {method} {path}: {_first_line(e)}") from e


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


@dataclass
class Answer:
    status: int
    body: Any = None
    """JSON, or the text of a Cloud Hypervisor error."""


class Model(ABC):
    """A VMM's states as its documents describe them, answering each call or raising Violation
    for one it takes out of order."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.refusals: dict[tuple[str, str], Answer] = {}
        """Calls answered with a refusal, as a test asks."""
        self.bound: Path | None = None
        """The guest's vsock socket, bound by the VMM as its guest runs."""

    def handle(self, method: str, path: str, body: Any) -> Answer:
        if (method, path) in self.refusals:
            return self.refusals[(method, path)]
        return self.answer(method, path, body)

    @abstractmethod
    def answer(self, method: str, path: str, body: Any) -> Answer: ...

    @abstractmethod
    def running(self) -> bool:
        """Whether the guest runs (its agent can answer)."""

    def bind(self, path: str) -> None:
        self.bound = Path(path)
        self.bound.touch()

    def exited(self) -> None:
        """The process ends, and unlinks the socket it bound."""
        if self.bound:
            self.bound.unlink(missing_ok=True)


PRE_BOOT = re.compile(r"/(machine-config|boot-source|drives/\w+|network-interfaces/\w+|vsock)")


class FirecrackerModel(Model):
    """Firecracker: pre-boot configuration, InstanceStart, pause and resume, snapshots of a
    paused guest, and a snapshot's load into a Firecracker not configured otherwise
    (getting-started.md, snapshot-support.md)."""

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self.state = "Not started"
        self.configured: dict[str, Any] = {}

    def running(self) -> bool:
        return self.state == "Running"

    def answer(self, method: str, path: str, body: Any) -> Answer:
        if (method, path) == ("GET", "/"):
            info = {"app_name": "Firecracker", "id": "contract", "vmm_version": "1.17.0-dev"}
            return Answer(200, info | {"state": self.state})
        if method == "PUT" and PRE_BOOT.fullmatch(path):
            if self.state != "Not started":
                raise Violation(f"PUT {path} after the guest started: it is pre-boot only")
            self.configured[path] = body
            return Answer(204)
        if (method, path) == ("PUT", "/actions") and body["action_type"] == "InstanceStart":
            if "/boot-source" not in self.configured:
                raise Violation("InstanceStart before PUT /boot-source")
            self.state = "Running"
            if "/vsock" in self.configured:
                self.bind(self.configured["/vsock"]["uds_path"])
            return Answer(204)
        if (method, path) == ("PATCH", "/vm"):
            before = {"Paused": "Running", "Resumed": "Paused"}[body["state"]]
            if self.state != before:
                raise Violation(f"PATCH /vm {body['state']} while {self.state}")
            self.state = "Paused" if body["state"] == "Paused" else "Running"
            return Answer(204)
        if (method, path) == ("PUT", "/snapshot/create"):
            return self._create(body)
        if (method, path) == ("PUT", "/snapshot/load"):
            return self._load(body)
        raise Violation(f"the contract model has no answer to {method} {path}")

    def _create(self, body: dict[str, Any]) -> Answer:
        if self.state != "Paused":
            raise Violation(
                f"a snapshot of a guest {self.state}: Firecracker snapshots a paused one"
            )
        mib = self.configured.get("/machine-config", {}).get("mem_size_mib", 128)
        Path(body["snapshot_path"]).write_bytes(b"state")
        full = body.get("snapshot_type", "Full") == "Full"
        with open(body["mem_file_path"], "wb") as f:  # guest memory's size, sparse: a full
            f.truncate(mib << 20)  # snapshot's first pages, a diff's every 4096th
            for page in range(8) if full else range(0, mib << 8, 4096):
                f.seek(page * 4096)
                f.write(b"F" if full else b"D")
        return Answer(204)

    def _load(self, body: dict[str, Any]) -> Answer:
        if self.configured or self.state != "Not started":
            raise Violation("PUT /snapshot/load into a Firecracker already configured")
        for path in (body["snapshot_path"], body["mem_backend"]["backend_path"]):
            if not os.path.exists(path):
                raise Violation(f"PUT /snapshot/load of {path}, which is not there")
        self.state = "Running" if body.get("resume_vm") else "Paused"
        self.bind(body["vsock_override"]["uds_path"])
        return Answer(204)


class CloudHypervisorModel(Model):
    """Cloud Hypervisor: vm.create then vm.boot, pause and resume, a snapshot of a paused guest,
    vm.restore into a VMM with no VM then vm.resume, and live migration from vm.send-migration
    to a VMM waiting in vm.receive-migration (api.md, snapshot_restore.md, live_migration.md).
    Its vsock socket is bound as its guest runs, and unlinked as the VMM ends."""

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self.state = "none"
        self.config: dict[str, Any] = {}

    def running(self) -> bool:
        return self.state == "Running"

    def answer(self, method: str, path: str, body: Any) -> Answer:
        action = path.removeprefix("/api/v1/")
        if (method, action) == ("GET", "vmm.ping"):
            return Answer(200, {"version": "v53.0", "build_version": "v53.0", "pid": os.getpid()})
        want = {
            "vm.create": "none", "vm.boot": "Created", "vm.pause": "Running",
            "vm.resume": "Paused", "vm.snapshot": "Paused", "vm.restore": "none",
            "vm.receive-migration": "none", "vm.send-migration": "Running",
        }  # fmt: skip
        if method != "PUT" or action not in want:
            raise Violation(f"the contract model has no answer to {method} {path}")
        if self.state != want[action]:
            raise Violation(f"{action} while the VM is {self.state}, not {want[action]}")
        return getattr(self, "_" + action.removeprefix("vm.").replace("-", "_"))(body)

    def _create(self, body: dict[str, Any]) -> Answer:
        self.config, self.state = body, "Created"
        return Answer(204)

    def _boot(self, body: None) -> Answer:
        self._bind()
        self.state = "Running"
        return Answer(204)

    def _pause(self, body: None) -> Answer:
        self.state = "Paused"
        return Answer(204)

    def _resume(self, body: None) -> Answer:
        self.state = "Running"
        return Answer(204)

    def _snapshot(self, body: dict[str, Any]) -> Answer:
        directory = Path(_file(body["destination_url"]))
        (directory / "config.json").write_text(json.dumps(self.config))
        (directory / "state.json").write_text("{}")
        (directory / "memory-ranges").write_bytes(b"\0" * 4096)
        return Answer(204)

    def _restore(self, body: dict[str, Any]) -> Answer:
        config = Path(_file(body["source_url"])) / "config.json"
        if not config.exists():
            raise Violation(f"vm.restore from {body['source_url']}, which holds no snapshot")
        self.config, self.state = json.loads(config.read_text()), "Paused"
        self._bind()
        return Answer(204)

    def _receive_migration(self, body: dict[str, Any]) -> Answer:
        url = body["receiver_url"]
        Path(url.removeprefix("unix:")).touch()  # the destination listens there
        source = self.hub.receive(url)
        self.config, self.state = source.config, "Running"
        self._bind()
        return Answer(204)

    def _send_migration(self, body: dict[str, Any]) -> Answer:
        self.hub.send(body["destination_url"], self)
        self.state = "moved"
        return Answer(204)

    def _bind(self) -> None:
        self.bind(self.config["vsock"]["socket"])


def _file(url: str) -> str:
    if not url.startswith("file://"):
        raise Violation(f"{url}: Cloud Hypervisor takes a file:// URL here")
    return url.removeprefix("file://")


class Hub:
    """What the VMMs of one test see of each other: a migration's two ends."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._sent: dict[str, CloudHypervisorModel] = {}

    def receive(self, url: str, timeout: float = 30) -> CloudHypervisorModel:
        with self._lock:
            if not self._lock.wait_for(lambda: url in self._sent, timeout):
                raise Violation(f"vm.receive-migration at {url}: nothing was sent there")
            return self._sent.pop(url)

    def send(self, url: str, source: CloudHypervisorModel) -> None:
        if not Path(url.removeprefix("unix:")).exists():
            raise Violation(f"vm.send-migration to {url}, where no VMM receives")
        with self._lock:
            self._sent[url] = source
            self._lock.notify_all()


class ContractTransport(httpx.BaseTransport):
    """One VMM process's API: each request checked against the description, answered by the
    model, the answer checked too. Violations are raised and kept (``VmmWorld.violations``)."""

    def __init__(self, contract: Contract, model: Model, world: VmmWorld) -> None:
        self.contract, self.model, self.world = contract, model, world

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        body = json.loads(request.content) if request.content else None
        try:
            self.contract.check_request(method, path, body)
            answer = self.model.handle(method, path, body)
            self.contract.check_response(method, path, answer.status, answer.body)
        except Violation as e:
            self.world.violations.append(str(e))
            raise
        self.world.calls.append((method, path, body))
        if isinstance(answer.body, str):
            return httpx.Response(answer.status, text=answer.body)
        if answer.body is None:
            return httpx.Response(answer.status)
        return httpx.Response(answer.status, json=answer.body)


class _Console:
    """What a VMM's console reader gives the drivers when no guest prints."""

    def __init__(self, log: Path) -> None:
        self.started, self.log = time.monotonic(), log
        self.phases: dict[str, float] = {}

    def join(self, timeout: float) -> None:
        pass


class ContractVmm(Vmm):
    """A VMM process replaced by its contract: its API through ``ContractTransport``; its guest
    answers (``wait_ready``) only while the model says it runs."""

    model: Model
    ended: bool

    def alive(self) -> bool:
        return not self.ended

    def wait_ready(self, deadline: float) -> None:
        if not self.model.running():
            raise Violation(f"{self.name}: waited for the guest's agent of a guest not running")

    def release_agent(self, deadline: float) -> None:
        self.wait_ready(deadline)

    def last_words(self) -> str:
        return "(the VMM's contract)"

    def failure(self, what: str) -> VmmFailed:
        return VmmFailed(what, None, (), self.last_words())  # no process: no exit, no argv

    def kill(self) -> None:
        self.api.close()
        if not self.ended:
            self.ended = True
            self.model.exited()


@dataclass
class VmmWorld:
    """The VMM processes of one test, as their contracts: what every call was, and every
    violation."""

    contract: Contract
    model: type[Model]
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    vmms: list[ContractVmm] = field(default_factory=list)
    hub: Hub = field(default_factory=Hub)

    def launch(
        self,
        argv: list[str],
        name: str,
        prefix: Path,
        sockets: tuple[str, str],
        ledger: Ledger,
        netns: str | None,
        log: Path | None = None,
    ) -> ContractVmm:
        """``Vmm.launch`` with the process replaced: the same API and agent sockets, an API
        through the contract."""
        model = self.model(self.hub)
        process = ledger.add("path", f"{prefix}.contract")
        vmm = ContractVmm(
            name, None, process, _Console(prefix.with_suffix(".console.log")),  # type: ignore[arg-type]
            VmmApi(sockets[0], name, ContractTransport(self.contract, model, self)),
            VsockAgent(sockets[1], name, 1024), prefix.with_suffix(".stderr"), log,
        )  # fmt: skip
        vmm.model, vmm.ended = model, False
        self.vmms.append(vmm)
        return vmm

    def paths(self) -> list[str]:
        """Each call as ``METHOD path``, in order."""
        return [f"{method} {path}" for method, path, _ in self.calls]


@functools.cache
def contracts() -> dict[str, Contract]:
    """Both VMMs' contracts, Firecracker's made first: importing openapi-core registers OpenAPI
    3.1's meta-schemas with jsonschema, whose RefResolver then hands them to bravado-core,
    which would follow their references to a host this machine cannot reach."""
    firecracker = FirecrackerContract()
    return {"firecracker": firecracker, "cloud-hypervisor": CloudHypervisorContract()}
