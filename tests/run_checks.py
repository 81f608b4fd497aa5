"""What the tests of whole runs share: the shortest cpu workload a study can name, and what a
run left behind on the host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hvbench.host.resources import STATE_ROOT, resource_name

CPU = (
    "{name: cpu, suite: micro, integer: {duration: 1}, float: {duration: 1}, memory: {duration: 1},"
    " branchy: {duration: 1}}"
)


def leftovers(run_id: str, state: Path = STATE_ROOT) -> list[str]:
    """Namespaces, loop devices, ledgers and work directories a run left behind (``state``:
    the state directory it was given)."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line for line in netns.splitlines() if resource_name(run_id) in line]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [line for line in loops.splitlines() if run_id in line]
    found += [str(p) for p in (state / run_id, f"/var/tmp/hvbench/{run_id}") if os.path.exists(p)]
    return found
