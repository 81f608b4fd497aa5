"""Bring a store's schema to the version this hvbench expects (alembic)."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

from hvbench.errors import HvbenchError


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("hvbench.store") / "migrations"))
    return cfg


def head() -> str:
    return ScriptDirectory.from_config(_config()).get_current_head() or ""


def upgrade(engine: Engine) -> None:
    """Create or upgrade the schema; refuse a store from a newer hvbench."""
    cfg = _config()
    with engine.begin() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
        if current is None and inspect(conn).has_table("runs"):
            raise HvbenchError(
                "the store has hvbench tables but no schema version; not touching it"
            )
        known = {rev.revision for rev in ScriptDirectory.from_config(cfg).walk_revisions()}
        if current is not None and current not in known:
            raise HvbenchError(
                f"the store's schema {current} is newer than this hvbench knows; upgrade hvbench"
            )
        if current != head():
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
