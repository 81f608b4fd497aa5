"""Helpers every workload shares: running a tool inside an instance, keeping its output, reading
numbers out of it. Only ``Instance.exec`` is used, so the same code runs on every platform."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hvbench.errors import InstanceError
from hvbench.host.process import ExecResult
from hvbench.workloads.base import Context, ParseError, RawOutput, W, Workload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

SMALL_COMMAND_S = 300.0
"""The timeout of a command a healthy instance ends at once (mktemp, chmod, cat, ls): long,
because a slow guest is not a hung one. Five Firecracker microVMs booting under two levels of
emulation on one CPU (the KVM lab's opt-in run, 2026-11-29) left mktemp unanswered for 60 s."""
RAW_LIMIT = 4 * 1024 * 1024
"""Characters of one tool output kept in the store; the head and the tail survive, because the
head says what ran and the tail holds the summary or the error."""


def keep(tool: str, argv: Sequence[str], content: str) -> RawOutput:
    """A RawOutput bounded to RAW_LIMIT characters."""
    if len(content) > RAW_LIMIT:
        half = RAW_LIMIT // 2
        cut = len(content) - 2 * half
        content = f"{content[:half]}\n[... {cut} characters left out ...]\n{content[-half:]}"
    return RawOutput(tool=tool, command=list(argv), content=content)


def run(
    instance: Instance, argv: Sequence[str], timeout: float, stdin: bytes | None = None
) -> ExecResult:
    """Run argv inside the instance; a non-zero exit fails the cell with the tool's last words."""
    result = instance.exec(list(argv), timeout, stdin)
    if not result.ok:
        raise InstanceError(f"{instance.name}: {result.describe_failure()}")
    return result


def combined(result: ExecResult) -> str:
    """stdout then stderr, as a user would have seen them on a terminal."""
    err = result.stderr.decode("utf-8", errors="replace")
    return result.text() + (f"\n[stderr]\n{err}" if err.strip() else "")


def scratch_dir(instance: Instance, parent: str | None = None) -> str:
    """A fresh directory inside the instance (under ``parent`` or the instance's /tmp)."""
    argv = ["mktemp", "-d", f"{parent or '/tmp'}/hvbench.XXXXXX"]
    path = run(instance, argv, timeout=SMALL_COMMAND_S).text().strip()
    if not path.startswith("/") or "\n" in path:
        raise InstanceError(f"{instance.name}: mktemp -d printed {path[:80]!r}, not a path")
    return path


def remove(instance: Instance, path: str) -> None:
    """Remove a scratch path inside the instance; a failure here must not hide the measurement."""
    with contextlib.suppress(InstanceError):
        instance.exec(["rm", "-rf", "--", path], timeout=600)


def number(field: object, what: str) -> float:
    """A finite float from a tool's field (its text, or a number of its JSON or YAML), or
    ParseError naming the field."""
    try:
        value = float(field) if isinstance(field, str | int | float) else None
    except ValueError:
        value = None
    if value is None:
        raise ParseError(f"{what}: expected a number, found {str(field)[:40]!r}")
    if not math.isfinite(value):
        raise ParseError(f"{what}: expected a finite number, found {field!r}")
    return value


def search(pattern: str, text: str, what: str, flags: int = re.MULTILINE) -> re.Match[str]:
    """The first match of pattern in a tool's output, or ParseError saying what was missing."""
    m = re.search(pattern, text, flags)
    if m is None:
        tail = " | ".join(text.strip().splitlines()[-2:])[:160]
        raise ParseError(f"{what} not found in the output (ends with: {tail or '(nothing)'})")
    return m


class ScratchWorkload(Workload[W]):
    """A workload that works in a fresh directory of its own inside each instance, made in
    ``prepare`` and removed in ``cleanup`` (with whatever a killed tool left behind)."""

    def __init__(self, settings: W) -> None:
        super().__init__(settings)
        self._scratch: dict[str, str] = {}
        """Per instance name: one Workload object serves every instance of a cell."""

    def scratch_parent(self, instance: Instance) -> str:
        """Where the scratch directory goes (the instance's scratch root unless overridden)."""
        return instance.scratch_root

    def scratch(self, instance: Instance) -> str:
        return self._scratch[instance.name]

    def prepare(self, instance: Instance, ctx: Context) -> None:
        self._scratch[instance.name] = scratch_dir(instance, self.scratch_parent(instance))

    def cleanup(self, instance: Instance, ctx: Context) -> None:
        path = self._scratch.pop(instance.name, None)
        if path:
            remove(instance, path)
