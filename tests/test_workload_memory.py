"""memory: a TCG guest's overhead is its QEMU's PSS beyond the guest RAM it touched, a UML
guest's likewise for its processes, a container's the kernel memory charged to its cgroup;
native says it cannot attribute one. One run of the real runner over all four. gVisor's sandbox
(its memory file and what else is the application's) is measured on the instance that
tests/test_gvisor.py boots; here, how real smaps of its processes split."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest
from conftest import require

from hvbench.drivers.container import ContainerDriver
from hvbench.drivers.gvisor import GvisorInstance
from hvbench.host.cgroup import kernel_charge, parse_memory_stat
from hvbench.session import NewRun, RunSession
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads.memory import METRICS, NOT_ATTRIBUTABLE, NOT_MEASURED

FIX = Path(__file__).parent / "fixtures" / "memory"
MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")

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


def smaps(name: str) -> list[tuple[str, int, int]]:
    """(path, size, PSS) of each mapping of a captured /proc/PID/smaps, in bytes."""
    maps: list[tuple[str, int, int]] = []
    for line in (FIX / name).read_text().splitlines():
        if m := MAPPING.match(line):
            path, size = m[3] or "[anon]", int(m[2], 16) - int(m[1], 16)
        elif line.startswith("Pss:"):
            maps.append((path, size, int(line.split()[1]) << 10))
    return maps


@pytest.mark.parametrize(
    ("name", "guest_kib", "total_kib"),
    [
        # runsc-memory 32996 + busybox 340 (a 32 MiB tmpfs file written just before)
        ("gvisor-sentry.smaps", 33336, 60195),
        # runsc-memory 82 + busybox 445: an application's address space
        ("gvisor-stub.smaps", 527, 559),
    ],
)
def test_gvisor_memory_is_its_memory_file_and_the_applications_files(name, guest_kib, total_kib):
    """Captured from a sandbox of the gvisor driver (systrap) whose application had written 32
    MiB to its /tmp: the guest's part is the memory file, wherever mapped, and the files the
    application runs; runsc's binary, the Go heap and systrap's own memory files are gVisor's."""
    inst = GvisorInstance("g", 0, 1, 256, runtime=["/work/main/.venv/bin/runsc"])  # captured's
    maps = smaps(name)
    assert sum(pss for _, _, pss in maps) == total_kib << 10
    assert sum(pss for path, size, pss in maps if inst.guest_ram(path, size)) == guest_kib << 10
    # psutil names a deleted file without " (deleted)"
    assert inst.guest_ram("/memfd:runsc-memory", 1 << 30)
    assert not inst.guest_ram("/memfd:systrap-memory", 4096)


def test_cgroup2_kernel_charge():
    """memory.stat of a cgroup v2 holding one sleep (captured in a UML guest, Linux 6.1): the
    kernel charge is ``kernel`` (which holds its page tables) plus ``sock``."""
    stat = parse_memory_stat((FIX / "cgroup2-memory.stat").read_text())
    assert stat["kernel"] == 28672 and stat["pagetables"] == 20480 and stat["anon"] == 49152
    assert kernel_charge(stat) == 28672
    del stat["kernel"]  # as Linux before 5.18 writes it: the parts it lists
    assert kernel_charge(stat) == 20480


@pytest.mark.guest
def test_memory_overhead_per_driver():
    require(ContainerDriver.check().ok, "runc (apt-get install runc)")
    store = Store()
    session = RunSession.preflight(store, NewRun(parse_study(STUDY, "memory.yaml"), quick=True))
    assert session.run().status == "finished"
    platform = {c.id: c.platform for c in store.cells(session.run_id)}
    got: dict[str, dict[str, tuple[float | None, str | None]]] = {}
    for row in store.metric_rows(session.run_id):
        got.setdefault(platform[row.cell_id], {})[row.name] = (row.value, row.text)
    assert got["native"] == {f"memory.{n}": (None, NOT_ATTRIBUTABLE) for n in METRICS}
    total = psutil.virtual_memory().total / 2**20
    for name in ("tcg", "uml", "container"):
        v = {metric: value for metric, (value, _) in got[name].items()}
        pss, ram, overhead = (
            v[f"memory.{n}"] for n in ("host_pss_mib", "guest_ram_mib", "overhead_mib")
        )
        assert 0 < ram <= 128, f"{name}: the guest touched some of its 128 MiB, never more"
        kernel = v["memory.kernel_mib"] or 0
        assert abs(pss - ram + kernel - overhead) <= 0.02
        fits = {int(total / (128 + overhead + d)) for d in (-0.005, 0.005)}  # overhead is rounded
        assert v["memory.density_instances"] in fits
        if name == "container":
            # its processes are all the guest's; what it costs beyond them is kernel memory
            assert pss == ram and 0 < overhead == kernel < 16
        else:
            assert overhead > 1, f"{name}: the VMM itself costs something beyond the guest's RAM"
            assert got[name]["memory.kernel_mib"] == (None, NOT_MEASURED)
