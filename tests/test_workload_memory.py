"""memory: a TCG guest's overhead is its QEMU's PSS beyond the guest RAM it touched, a UML
guest's likewise for its processes; a container and native say they cannot attribute one. One
run of the real runner over all four."""

from __future__ import annotations

import psutil
import pytest
from conftest import require

from hvbench.drivers.container import ContainerDriver
from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads.memory import METRICS, NOT_ATTRIBUTABLE

STUDY = """\
name: memory
platforms:
  tcg: {driver: qemu, accel: tcg, machine: microvm, memory: 128M, nic: none}
  uml: {driver: uml, memory: 128M}
  container: {driver: container, memory: 128M}
  native: {driver: native}
workloads:
  - {name: memory}
"""


@pytest.mark.guest
def test_memory_overhead_per_driver():
    require(ContainerDriver.check().ok, "runc (apt-get install runc)")
    store = Store()
    runner = Runner.create(parse_study(STUDY, "memory.yaml"), store, quick=True)
    assert runner.run() == "finished"
    platform = {c.id: c.platform for c in store.cells(runner.run_id)}
    got: dict[str, dict[str, tuple[float | None, str | None]]] = {}
    for row in store.metric_rows(runner.run_id):
        got.setdefault(platform[row.cell_id], {})[row.name] = (row.value, row.text)
    for name in ("container", "native"):
        assert got[name] == {f"memory.{n}": (None, NOT_ATTRIBUTABLE) for n in METRICS}, name
    total = psutil.virtual_memory().total / 2**20
    for vm in ("tcg", "uml"):
        v = {name: value for name, (value, _) in got[vm].items()}
        pss, ram, overhead = (
            v[f"memory.{n}"] for n in ("host_pss_mib", "guest_ram_mib", "overhead_mib")
        )
        assert 0 < ram <= 128, f"{vm}: the guest touched some of its 128 MiB, never more"
        assert overhead > 1, f"{vm}: the VMM itself costs something beyond the guest's RAM"
        assert abs(pss - ram - overhead) <= 0.2
        fits = {int(total / (128 + overhead + d)) for d in (-0.05, 0.05)}  # overhead is rounded
        assert v["memory.density_instances"] in fits
