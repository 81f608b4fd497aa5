"""Options several commands take, and what several require, declared once so that each reads
and is explained alike."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from hvbench.errors import HvbenchError

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="SQLAlchemy URL of the store, SQLite or PostgreSQL (default: $HVBENCH_DB, else "
        "SQLite in ~/.local/share/hvbench/results.db)",
    ),
]


def require_root(command: str, why: str) -> None:
    """One line where ``command``, which changes the host, runs without root: what needs root
    and ``why``, and what runs without it."""
    if os.geteuid() != 0:
        raise HvbenchError(
            f"{command} needs root: {why} (sudo hvbench {command}); report, compare, history, "
            "doctor and study need none"
        )
