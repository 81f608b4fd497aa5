"""The store: versioned schema, one transaction per sample, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from alembic import command
from builders import run_record, sample_record
from sqlalchemy import Engine, create_engine, text

from hvbench.errors import HvbenchError
from hvbench.store import (
    UNNAMED_HOST,
    CellRecord,
    FunctionRecord,
    Inventory,
    PlatformState,
    ProfileRecord,
    Store,
    WhatRan,
)
from hvbench.store.upgrade import _config, head


def exercise(store: Store) -> None:
    """The same round trip on any backend."""
    store.create_run(run_record("r1"))
    cell = CellRecord(
        key="native|disk|1",
        platform="native",
        driver="native",
        workload="disk",
        workload_name="disk",
        instances=1,
        platform_settings={"driver": "native"},
        workload_settings={"name": "disk"},
        ran=WhatRan(bare=True),
    )
    cell_id = store.cell_id("r1", cell)
    again = CellRecord(**vars(cell))
    assert store.cell_id("r1", again) == cell_id  # a resumed run finds its cell
    profiled = sample_record(1, 123.5)
    profiled.profile = ProfileRecord(
        200, 99, ["perf", "record"], [FunctionRecord(1, 150, 75.0, "vmx_vcpu_run", "kvm")]
    )
    store.add_sample(cell_id, profiled)
    store.add_sample(cell_id, sample_record(2, None, "+++++"))
    with pytest.raises(HvbenchError, match="cannot store a sample"):
        store.add_sample(cell_id, sample_record(2, 1.0))  # the same repetition twice is refused
    assert store.done("r1") == {("native|disk|1", 1), ("native|disk|1", 2)}
    rows = sorted(store.metric_rows("r1"), key=lambda r: r.repetition)
    assert rows[0].value == 123.5 and rows[1].value is None and rows[1].text == "+++++"
    assert (rows[0].resolution, rows[1].resolution) == (0.5, None)
    assert store.raw_outputs("r1")[0].command == ["bonnie++", "-q"]
    (f,) = store.profile_functions("r1")
    assert (f.repetition, f.symbol, f.dso, f.samples, f.profile_samples) == (
        1,
        "vmx_vcpu_run",
        "kvm",
        150,
        200,
    )
    assert [s.repetition for s in store.samples("r1")] == [1, 2]
    assert store.samples("r1")[0].host_cpu == profiled.host_cpu  # the typed reading, back
    assert store.samples("r1")[0].platform_state == profiled.platform_state
    assert store.cells("r1")[0].id == cell_id
    assert store.cells("r1")[0].ran == cell.ran
    store.add_artifact("r1", "image", {"sha256": "ab"})
    store.add_artifact("r1", "image", {"sha256": "cd"})
    assert store.artifacts("r1") == {"image": {"sha256": "ab"}}
    store.add_artifact("r1", "image", {"sha256": "ef"}, replace=True)
    assert store.artifacts("r1") == {"image": {"sha256": "ef"}}
    store.set_run_status("r1", "finished", finished=True)
    assert store.run("latest").status == "finished"
    with pytest.raises(HvbenchError, match="no run 'nope'"):
        store.run("nope")


def test_sqlite_round_trip(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    exercise(store)
    with store.engine.connect() as conn:
        assert conn.execute(text("select version_num from alembic_version")).scalar() == head()


def test_reopening_keeps_data_and_does_not_migrate_twice(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    exercise(Store(url))
    assert Store(url).run("r1").status == "finished"


def _old_store(url: str, revision: str) -> Engine:
    """A store at an older schema ``revision`` holding one run made then, r0."""
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = _config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.execute(text("insert into runs values ('r0', 's', 'name: s', 's.yaml', 'finished', "
                          "'2026-01-01', null, 'old', null, '{}', '{}')"))  # fmt: skip
    return engine


def test_a_store_of_schema_0002_is_upgraded_in_place(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _old_store(url, "0002").dispose()
    store = Store(url)
    assert store.run("r0").hvbench_version == "old"
    assert store.profile_functions("r0") == []
    exercise(store)


OLD_INVENTORY = {
    "hostname": "lab1",
    "cpu_model": "AMD EPYC 7B13",
    "cpu_flags": ["fpu", "vmx"],
    "cores_logical": 2,
    "cores_physical": 1,
    "memory_bytes": 8 << 30,
    "kernel": "6.1.0-28-amd64",
    "distribution": "Debian GNU/Linux 12 (bookworm)",
    "virtualization": "kvm",
    "python": "3.11.2",
    "tools": {"fio": "fio-3.33", "iperf": None},
    "conditions": [{"name": "cpu.governor", "value": "performance", "tune": []}],
}
"""A host's inventory as ``host.inventory.collect`` stored it while it was a dict."""


def test_an_inventory_stored_as_a_dict_reads_into_its_record_and_is_stored_alike(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "insert into runs values ('r0', 's', 'name: s', 's.yaml', 'finished', "
                "'2026-01-01', null, 'old', null, '{}', :inventory)"
            ),
            {"inventory": json.dumps(OLD_INVENTORY)},
        )
    inventory = store.run("r0").inventory
    assert (inventory.name, inventory.cores_logical, inventory.tools["iperf"]) == ("lab1", 2, None)
    assert inventory.conditions[0]["value"] == "performance"
    assert inventory.described()["kernel"] == "6.1.0-28-amd64"
    store.create_run(replace(run_record("r1"), inventory=inventory))
    with store.engine.connect() as conn:
        stored = conn.execute(text("select inventory from runs where id = 'r1'")).scalar_one()
    assert json.loads(stored) == OLD_INVENTORY
    # a run stored without an inventory's items (before they were collected) has none of them
    assert Inventory.from_json({}) == Inventory() and Inventory().name == UNNAMED_HOST


def test_store_from_a_newer_hvbench_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = Store(url)
    with store.engine.begin() as conn:
        conn.execute(text("update alembic_version set version_num = '9999'"))
    with pytest.raises(HvbenchError, match="newer than this hvbench"):
        Store(url)


def test_bad_url_is_one_line():
    with pytest.raises(HvbenchError, match="not a database URL"):
        Store("not a url")


@pytest.mark.postgres
def test_postgresql_round_trip(postgres_url):
    store = Store(postgres_url)
    assert store.engine.dialect.name == "postgresql"
    exercise(store)


def test_a_store_of_schema_0003_gets_what_workloads_now_declare(tmp_path):
    """Metrics stored before the workloads declared composite and direction get what the
    analysis used to infer of them: a cpu cell's higher-is-better figures are sub-scores, and
    the word inbound or outbound in a name is the direction."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = _old_store(url, "0003")
    with engine.begin() as conn:
        for cell_id, workload in ((1, "cpu"), (2, "net")):
            conn.execute(
                text("insert into cells values (:id, 'r0', :key, 'kvm', 'qemu', :w, :w, 1, "
                     "'{}', '{}')"),
                {"id": cell_id, "key": f"kvm|{workload}|1", "w": workload},
            )  # fmt: skip
            conn.execute(
                text("insert into samples values (:id, :id, 1, 'ok', null, '2026-01-01', 1.0, "
                     "'{}', '{}')"),
                {"id": cell_id},
            )  # fmt: skip
        metrics = [
            (1, "cpu.a.ops", True),
            (1, "cpu.a.seconds", False),
            (2, "net.iperf3.inbound_gbps", True),
            (2, "net.iperf3.outbound_retransmits", False),
            (2, "net.rtt_ms", False),
        ]
        for sample_id, name, hib in metrics:
            conn.execute(
                text("insert into metrics (sample_id, instance, name, value, unit, "
                     "higher_is_better) values (:s, 0, :n, 1.0, 'x', :h)"),
                {"s": sample_id, "n": name, "h": hib},
            )  # fmt: skip
    engine.dispose()
    rows = {r.name: (r.composite, r.direction) for r in Store(url).metric_rows("r0")}
    assert rows == {
        "cpu.a.ops": (True, None),
        "cpu.a.seconds": (False, None),
        "net.iperf3.inbound_gbps": (False, "inbound"),
        "net.iperf3.outbound_retransmits": (False, "outbound"),
        "net.rtt_ms": (False, None),
    }


def test_a_store_of_schema_0004_keeps_its_metrics_with_no_resolution(tmp_path):
    """A metric stored before resolutions were recorded reads back with None: its tool's
    resolution is unknown, and the analysis must not invent one."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = _old_store(url, "0004")
    with engine.begin() as conn:
        conn.execute(text("insert into cells values (1, 'r0', 'native|cpu|1', 'native', "
                          "'native', 'cpu', 'cpu', 1, '{}', '{}')"))  # fmt: skip
        conn.execute(text("insert into samples values (1, 1, 1, 'ok', null, '2026-01-01', 1.0, "
                          "'{}', '{}')"))  # fmt: skip
        conn.execute(text("insert into metrics (sample_id, instance, name, value, unit, "
                          "higher_is_better) values (1, 0, 'cpu.xz', 4.2, 'MB', 1)"))  # fmt: skip
    engine.dispose()
    (row,) = Store(url).metric_rows("r0")
    assert (row.value, row.resolution) == (4.2, None)


OLD_CELLS = [
    # (driver, platform_settings as its describe() wrote them then, what it ran)
    ("native", {"driver": "native"}, WhatRan(bare=True)),
    (
        "qemu",
        {
            "accel": "auto",
            "disk": {"cache": "writeback"},
            "resolved": {"accel": "kvm", "accel_reason": "probe booted", "nested": True},
        },
        WhatRan(
            "kvm",
            ("kvm", "tcg"),
            "probe booted",
            nested=True,
            disk_cache="QEMU disk cache=writeback",
        ),
    ),
    ("qemu", {"accel": "tcg", "disk": {"cache": "none"}}, WhatRan("tcg", ("kvm", "tcg"))),
    ("qemu", {"accel": "auto"}, WhatRan(None, ("kvm", "tcg"))),  # failed before it resolved
    (
        "libvirt",
        {"uri": "xen:///system", "mode": "pvh", "disk": {"backend": "qdisk"}},
        WhatRan(
            "pvh",
            ("pv", "pvh", "hvm"),
            disk_cache="Xen's qdisk backend avoids O_DIRECT without direct-io-safe",
        ),
    ),
    (
        "gvisor",
        {"platform": "ptrace"},
        WhatRan(
            "ptrace",
            ("systrap", "ptrace"),
            disk_cache="gVisor's Sentry opens the disk's files without O_DIRECT",
        ),
    ),
    (
        "uml",
        {"disk": {"sync": True}},
        WhatRan(disk_cache="UML's ubd has no O_DIRECT, O_SYNC writes"),
    ),
    ("container", {"driver": "container"}, WhatRan()),
]


def test_a_store_of_schema_0005_gets_what_its_drivers_ran(tmp_path):
    """Cells stored before the drivers wrote what ran get what the analysis used to work out of
    their driver's name and settings; samples' platform states of then read as typed records."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = _old_store(url, "0005")
    with engine.begin() as conn:
        for cell_id, (driver, settings, _) in enumerate(OLD_CELLS, start=1):
            conn.execute(
                text("insert into cells values (:id, 'r0', :key, :p, :d, 'disk', 'disk', 1, "
                     ":s, '{}')"),
                {"id": cell_id, "key": f"p{cell_id}|disk|1", "p": f"p{cell_id}", "d": driver,
                 "s": json.dumps(settings)},
            )  # fmt: skip
        conn.execute(
            text("insert into samples values (1, 1, 1, 'ok', null, '2026-01-01', 1.0, :state, "
                 "'{}')"),
            {"state": json.dumps({"instances": ["p1-0"], "vcpus_total": 4, "host_cores": 2,
                                  "overcommit": True})},
        )  # fmt: skip
    engine.dispose()
    store = Store(url)
    assert [c.ran for c in store.cells("r0")] == [ran for _, _, ran in OLD_CELLS]
    (sample,) = store.samples("r0")
    assert sample.platform_state == PlatformState(["p1-0"], 4, 2, True)
