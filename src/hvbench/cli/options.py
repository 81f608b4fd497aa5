"""Options several commands take, declared once so that each reads and is explained alike."""

from __future__ import annotations

from typing import Annotated

import typer

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="SQLAlchemy URL of the store, SQLite or PostgreSQL (default: $HVBENCH_DB, else "
        "SQLite in ~/.local/share/hvbench/results.db)",
    ),
]
