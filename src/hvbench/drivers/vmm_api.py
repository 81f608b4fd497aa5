"""The REST API that Firecracker and Cloud Hypervisor serve on a Unix socket, through httpx
(its transport speaks HTTP over a Unix socket): one client for both, so that every call's
failure reads the same way, naming the VMM, the call and the VMM's own message."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from hvbench.errors import InstanceError

CALL_TIMEOUT_S = 120.0
"""Seconds one API call may take: a snapshot of a large guest is written inside the call."""
POLL_S = 0.02


class VmmApi:
    """A VMM's API on its socket, for one VMM process (``name`` says which in errors)."""

    def __init__(
        self, socket_path: str, name: str, transport: httpx.BaseTransport | None = None
    ) -> None:
        """``transport``: where the calls go, the VMM's socket unless given (the contract
        tests give one that checks each call against the VMM's API description)."""
        self.path = socket_path
        self.name = name
        self._client = httpx.Client(
            transport=transport or httpx.HTTPTransport(uds=socket_path),
            base_url="http://localhost",
            timeout=CALL_TIMEOUT_S,
        )

    def close(self) -> None:
        self._client.close()

    def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        timeout: float | None = CALL_TIMEOUT_S,
    ) -> Any:
        """One call; its JSON answer (None where it has no body). A refusal raises
        InstanceError with the VMM's own message (Firecracker's ``fault_message``, Cloud
        Hypervisor's text). ``timeout``: None for a call that answers only once a long
        operation ended (a migration's), bounded by its caller."""
        try:
            answer = self._client.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as e:
            raise InstanceError(f"{self.name}: API {method} {path}: {e}") from e
        if answer.is_error:
            raise InstanceError(
                f"{self.name}: API {method} {path} refused ({answer.status_code}): "
                f"{_message(answer.text)}"
            )
        if not answer.content:
            return None
        try:
            return answer.json()
        except ValueError:
            return answer.text

    def wait(self, deadline: float, alive: Callable[[], bool], probe: str) -> None:
        """Wait until the VMM answers ``GET probe`` (its socket made and served), or raise
        InstanceError once it died or ``deadline`` passed."""
        while True:
            try:
                self._client.get(probe, timeout=5.0)
                return
            except httpx.TransportError as e:
                if not alive():
                    raise InstanceError(f"{self.name}: the VMM exited before its API") from e
                if time.monotonic() > deadline:
                    raise InstanceError(f"{self.name}: no API on {self.path} in time") from e
            time.sleep(POLL_S)


@dataclass(frozen=True)
class Endpoint:
    """One path of a VMM's API, named once in its driver's list of them (as Firecracker's own
    test framework writes ``api.vm.patch(state="Paused")``), so that no call site spells a
    path."""

    api: VmmApi
    path: str

    def get(self) -> Any:
        return self.api.call("GET", self.path)

    def put(self, body: dict | None = None, timeout: float | None = CALL_TIMEOUT_S) -> Any:
        return self.api.call("PUT", self.path, body, timeout)

    def patch(self, body: dict) -> Any:
        return self.api.call("PATCH", self.path, body)


def _message(text: str) -> str:
    """The VMM's error message, one line: Firecracker's JSON ``fault_message`` or the text."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "fault_message" in data:
        text = str(data["fault_message"])
    return " ".join(text.split())[:500] or "(no message)"
