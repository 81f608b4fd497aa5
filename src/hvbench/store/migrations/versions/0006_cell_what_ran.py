"""cells.ran: what the driver ran, as the typed fields it writes (``store.WhatRan``)

Cells stored before are given what the analysis used to work out of their driver's name and
recorded settings, once, here: qemu's and libvirt's accelerator (the one ``auto`` resolved to,
and why), xen's mode (libvirt's too, with a xen URI), gVisor's interception, the disk paths
that go through the host page cache, KVM nested in a virtual machine, and native as the host
itself.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ACCELS = ["kvm", "tcg"]
XEN_MODES = ["pv", "pvh", "hvm"]
GVISOR_PLATFORMS = ["systrap", "ptrace"]
CACHING = ("writeback", "writethrough", "unsafe")


def ran(driver: str, settings: dict) -> dict:
    """What the analysis made of a cell before its driver wrote it."""
    resolved = settings.get("resolved") or {}
    disk = settings.get("disk") or {}
    out: dict = {"bare": driver == "native", "nested": bool(resolved.get("nested"))}
    if driver in ("qemu", "libvirt") and "accel" in settings:
        chosen = resolved.get("accel")
        given = settings["accel"]
        out["mode"] = chosen if chosen in ACCELS else given if given in ACCELS else None
        out["modes"] = ACCELS
        if given == "auto":
            out["mode_reason"] = resolved.get("accel_reason")
        if disk.get("cache") in CACHING:
            out["disk_cache"] = f"QEMU disk cache={disk['cache']}"
    elif driver in ("xen", "libvirt") and settings.get("mode") in XEN_MODES:
        out["mode"], out["modes"] = settings["mode"], XEN_MODES
    elif driver == "gvisor" and settings.get("platform") in GVISOR_PLATFORMS:
        out["mode"], out["modes"] = settings["platform"], GVISOR_PLATFORMS
    if driver == "uml":
        sync = ", O_SYNC writes" if disk.get("sync") else ""
        out["disk_cache"] = f"UML's ubd has no O_DIRECT{sync}"
    elif driver == "gvisor":
        out["disk_cache"] = "gVisor's Sentry opens the disk's files without O_DIRECT"
    elif driver in ("xen", "libvirt") and disk.get("backend") == "qdisk":
        out["disk_cache"] = "Xen's qdisk backend avoids O_DIRECT without direct-io-safe"
    return out


def upgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        batch.add_column(sa.Column("ran", sa.JSON(), nullable=False, server_default="{}"))
    conn = op.get_bind()
    cells = sa.table(
        "cells",
        sa.column("id", sa.Integer),
        sa.column("driver", sa.String),
        sa.column("platform_settings", sa.JSON),
        sa.column("ran", sa.JSON),
    )
    for cell_id, driver, settings in list(
        conn.execute(sa.select(cells.c.id, cells.c.driver, cells.c.platform_settings))
    ):
        conn.execute(
            cells.update().where(cells.c.id == cell_id).values(ran=ran(driver, settings or {}))
        )


def downgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        batch.drop_column("ran")
