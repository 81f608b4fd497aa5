"""Subordinate user and group ids (/etc/subuid, /etc/subgid) of a user's own, for the containers
whose root is an unprivileged range of the host's ids: rootless Podman's user's, and LXC's
unprivileged containers' (root's, which LXC insists on where newuidmap is installed)."""

from __future__ import annotations

from pathlib import Path

from hvbench.host.process import checked
from hvbench.host.resources import Ledger, Resource

SUBIDS = 65536
"""Subordinate ids of a user of an engine's: what useradd gives a user by default."""
FIRST = 100000
"""Where useradd starts giving them out."""
TABLES = ("/etc/subuid", "/etc/subgid")


def subordinate_ids(ledger: Ledger, resources: list[Resource], user: str) -> int:
    """A range of SUBIDS subordinate uids and gids of ``user``'s own, in ``resources`` (and the
    ledger) before it is made: its line is removed from the tables after (``usermod
    --del-subuids`` refuses root while it runs anything). Its first id."""
    first = _free()
    line = f"{user}:{first}:{SUBIDS}"
    undo = ["sed", "-i", f"/^{line}$/d", *TABLES]
    resources.append(ledger.add("command", f"{user} ids", argv=undo))
    ids = f"{first}-{first + SUBIDS - 1}"
    checked(["usermod", "--add-subuids", ids, "--add-subgids", ids, user])
    return first


def _free() -> int:
    """The first subordinate id after every range the tables give out (and after FIRST)."""
    ends = [FIRST]
    for table in TABLES:
        path = Path(table)
        for line in path.read_text().splitlines() if path.exists() else []:
            fields = line.split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                ends.append(int(fields[1]) + int(fields[2]))
    return max(ends)
