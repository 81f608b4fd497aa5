"""Ansible stdout callback of ``hvbench fleet run``: one JSON line per host and task.

Ansible loads this file itself (``ANSIBLE_CALLBACK_PLUGINS``, ``ANSIBLE_STDOUT_CALLBACK``), in
its own Python: it imports Ansible, never hvbench. hvbench reads the lines to show each host's
progress and to tell a host's failure from the others' success, without parsing Ansible's
human output. A sysadmin running the playbook with plain ``ansible-playbook`` keeps Ansible's
default output.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from ansible.plugins.callback import CallbackBase

if TYPE_CHECKING:
    from ansible.executor.task_result import TaskResult
    from ansible.inventory.host import Host
    from ansible.playbook.task import Task

DOCUMENTATION = """
name: hvbench_events
type: stdout
short_description: one JSON line per host event, for hvbench fleet run
description: [one JSON object per line on stdout, read by hvbench fleet run]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "hvbench_events"

    def _emit(self, event: str, host: str, task: str = "", **fields: object) -> None:
        line = {"event": event, "host": host, "task": task, **fields}
        sys.stdout.write(json.dumps(line, default=str) + "\n")
        sys.stdout.flush()

    @staticmethod
    def _error(result: dict[str, Any]) -> str:
        """The one line that says what went wrong: Ansible's message, else the command's last
        line of stderr (hvbench's own one-line error), else its return code."""
        stderr = (result.get("stderr") or "").strip().splitlines()
        if stderr:
            return stderr[-1]
        msg = result.get("msg") or ""
        if isinstance(msg, str) and msg.strip():
            return msg.strip().splitlines()[0]
        return f"exit code {result.get('rc')}"

    def v2_runner_on_start(self, host: Host, task: Task) -> None:
        self._emit("start", host.get_name(), task.get_name())

    def v2_runner_on_ok(self, result: TaskResult) -> None:
        res = result._result
        self._emit(
            "ok",
            result._host.get_name(),
            result._task.get_name(),
            stdout=(res.get("stdout") or "")[-4000:],
            changed=bool(res.get("changed")),
        )

    def v2_runner_on_skipped(self, result: TaskResult) -> None:
        self._emit("skipped", result._host.get_name(), result._task.get_name())

    def v2_runner_on_failed(self, result: TaskResult, ignore_errors: bool = False) -> None:
        res = result._result
        self._emit(
            "failed",
            result._host.get_name(),
            result._task.get_name(),
            error=self._error(res),
            stdout=(res.get("stdout") or "")[-4000:],
            ignored=ignore_errors,
        )

    def v2_runner_on_unreachable(self, result: TaskResult) -> None:
        self._emit(
            "unreachable",
            result._host.get_name(),
            result._task.get_name(),
            error=self._error(result._result),
        )

    def v2_playbook_on_no_hosts_matched(self) -> None:
        self._emit("no_hosts", "")
