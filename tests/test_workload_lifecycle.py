"""Live migration and snapshot/restore: one real TCG guest is migrated to a second QEMU while
hvbench-dirty writes its memory (pre-copy, then post-copy with auto-converge), then saved to a
file and restored; each time the instance that
goes on is the new QEMU, and the ledger holds it (and no longer the old one). Drivers that
cannot do either are refused when the study is loaded, each saying why."""

from __future__ import annotations

import time

import psutil
import pytest
from workload_env import run_workload

from hvbench.drivers import container
from hvbench.drivers.base import Needs
from hvbench.drivers.oslevel import Criu
from hvbench.drivers.qemu import QemuDriver, QemuInstance
from hvbench.drivers.qemu_machine import QemuSettings
from hvbench.errors import StudyError
from hvbench.study import parse_study
from hvbench.workloads.migration import Migration, MigrationSettings, dirtier
from hvbench.workloads.snapshot import Snapshot, SnapshotSettings

RATE_MIB = 1


def _values(outcome) -> dict[str, float]:
    return {m.name: m.value for m in outcome.metrics}


def _live(ledger, kind: str) -> set[str]:
    return {r.name for r in ledger.live if r.kind == kind}


@pytest.mark.guest
def test_qemu_migrates_and_restores_a_running_guest(guest_run):
    settings = QemuSettings(driver="qemu", accel="tcg", memory=256 << 20)
    needs = Needs(tools=frozenset({str(dirtier())}))
    driver = QemuDriver("mig", settings, needs, guest_run.ledger, guest_run.network,
                        guest_run.workdir)  # fmt: skip
    (inst,) = driver.start(1, time.monotonic() + 300).instances
    assert isinstance(inst, QemuInstance) and inst.guest
    try:
        first = inst.guest.proc.pid
        migration = Migration(
            MigrationSettings(name="migration", dirty_rate=RATE_MIB << 20, buffer=32 << 20)
        )
        (moved,) = run_workload(migration, [inst], guest_run.network)
        v = _values(moved)
        assert inst.guest.proc.pid != first and not psutil.pid_exists(first)
        assert _live(guest_run.ledger, "process") == {str(inst.guest.proc.pid)}
        assert len(_live(guest_run.ledger, "link")) == 1, "the old tap is gone, the new one kept"
        assert v["migration.wrong_pages"] == 0, "every page the guest wrote arrived"
        assert 0 < v["migration.downtime_ms"] < v["migration.total_s"] * 1000
        assert v["migration.transferred_mib"] > 32, "at least the dirtier's buffer was sent"
        assert v["migration.passes"] >= 1
        assert 0 < v["migration.dirty_rate_mib_s"] <= RATE_MIB * 1.2
        assert v["migration.guest_pause_ms"] > 0
        assert inst.exec(["true"], timeout=60).ok, "the destination answers"

        post = Migration(
            MigrationSettings(name="migration", dirty_rate=RATE_MIB << 20, mode="postcopy",
                              auto_converge=True)
        )  # fmt: skip
        (again,) = run_workload(post, [inst], guest_run.network)
        p = _values(again)
        assert p["migration.wrong_pages"] == 0 and p["migration.passes"] >= 1
        assert 0 <= p["migration.throttle_pct"] <= 99, "auto-converge reports its throttle"
        raw = next(r.content for r in again.raw if r.tool == "migrate")
        assert '"postcopy": true' in raw and '"auto_converge": true' in raw

        second = inst.guest.proc.pid
        (restored,) = run_workload(Snapshot(SnapshotSettings(name="snapshot")), [inst],
                                   guest_run.network)  # fmt: skip
        s = _values(restored)
        assert inst.guest.proc.pid != second and not psutil.pid_exists(second)
        assert 10 < s["snapshot.size_mib"] < 256, "the guest's used memory, zero pages left out"
        assert s["snapshot.save_s"] > 0 and s["snapshot.restore_s"] > 0
        assert not list(guest_run.workdir.glob("*.snapshot")), "the file goes once restored"
        assert inst.exec(["cat", "/tmp/hvbench-dirty.out"], timeout=60).ok
    finally:
        driver.stop([inst])


STUDY = """\
name: refused
platforms:
  vm: {driver: qemu, accel: tcg}
  other: {driver: DRIVER}
workloads:
  - {name: WORKLOAD}
"""


@pytest.mark.parametrize("workload", ["migration", "snapshot"])
@pytest.mark.parametrize(
    ("driver", "why"),
    [
        ("native", "no guest to move or save"),
        ("uml", "user-mode Linux has no way"),
    ],
)
def test_study_refuses_drivers_without_the_operation(driver: str, why: str, workload: str):
    refused(driver, why, workload)


@pytest.mark.parametrize("workload", ["migration", "snapshot"])
def test_study_refuses_container_without_a_criu_that_works_here(monkeypatch, workload: str):
    monkeypatch.setattr(container, "criu", lambda: None)
    refused("container", "CRIU 4.1 or later (Debian 12's 3.17 fails", workload)


def test_study_refuses_libvirt_migration_and_takes_its_snapshot():
    refused("libvirt", "refuses to migrate a domain to the host it runs on", "migration")
    study = parse_study(STUDY.replace("DRIVER", "libvirt").replace("WORKLOAD", "snapshot"), "ok")
    assert {c.platform for c in study.cells()} == {"vm", "other"}


@pytest.mark.parametrize("workload", ["migration", "snapshot"])
@pytest.mark.parametrize("driver", ["gvisor", "container"])
def test_study_takes_gvisor_and_container_with_criu_for_both(monkeypatch, driver, workload):
    monkeypatch.setattr(container, "criu", lambda: Criu("/usr/sbin/criu", "4.1.1"))
    study = parse_study(STUDY.replace("DRIVER", driver).replace("WORKLOAD", workload), "ok")
    assert {c.platform for c in study.cells()} == {"vm", "other"}


@pytest.mark.parametrize("driver", ["gvisor", "container"])
def test_study_refuses_post_copy_and_auto_converge_on_a_checkpointing_runtime(monkeypatch, driver):
    monkeypatch.setattr(container, "criu", lambda: Criu("/usr/sbin/criu", "4.1.1"))
    for how in ("mode: postcopy", "auto_converge: true"):
        text = STUDY.replace("DRIVER", driver).replace("WORKLOAD", f"migration, {how}")
        with pytest.raises(StudyError) as e:
            parse_study(text, "refused.yaml")
        assert str(e.value).startswith(
            "refused.yaml:6: workloads.0.name: migration cannot run on platform other: "
        ), str(e.value)
        assert "checkpoints a stopped container: no post-copy or auto-converge" in str(e.value)


def test_study_refuses_snapshot_on_a_remote_libvirt_host():
    remote = 'libvirt, uri: "qemu+ssh://far/system", nic: none'
    refused(remote, "snapshots only on this host", "snapshot")


def refused(driver: str, why: str, workload: str) -> None:
    text = STUDY.replace("DRIVER", driver).replace("WORKLOAD", workload)
    with pytest.raises(StudyError) as e:
        parse_study(text, "refused.yaml")
    message = str(e.value)
    assert message.startswith("refused.yaml:6: workloads.0.name: ")
    assert f"{workload} cannot run on platform other" in message and why in message


def test_study_takes_qemu_for_both():
    study = parse_study(STUDY.replace("  other: {driver: DRIVER}\n", "").replace(
        "WORKLOAD", "migration, mode: postcopy, auto_converge: true"), "ok.yaml")  # fmt: skip
    assert [c.workload for c in study.cells()] == ["migration-postcopy-autoconverge-64M"]
