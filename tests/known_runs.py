"""Whole runs with known figures, written through the builders: a hand-made run's store is a
fixture (conftest.four_platforms); these are the runs more than one module reads."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from builders import RunBuilder, host

from hvbench.drivers import driver_class
from hvbench.store import Store
from hvbench.study import default_study_text, parse_study
from hvbench.workloads.boot import NO_BOOT

REAL_CLAIMS_RUN = {
    # the run of examples/tcg-claims.yaml on this project's 2-core host, 2026-11-28 (run
    # 20261128-044330-d69f, TCG under a loaded host): each repetition's figure as stored
    ("tcg", "boot"): {"boot.ready_s": [10.949, 13.895, 12.954, 20.978, 9.836]},
    ("native", "cpu"): {
        "cpu.integer.zlib_ops_per_s": [26.1107, 36.2873, 26.4556, 34.3647, 43.8639],
        "cpu.float.matrix_ops_per_s": [210.5063, 155.1748, 161.115, 195.5677, 207.7823],
        "cpu.memory.write_mib_per_s": [3760.8, 3143.42, 3095.26, 4450.2, 4379.63],
        "cpu.branchy.primes_events_per_s": [1980.53, 1449.4, 1511.55, 1292.91, 3001.23],
    },
    ("tcg", "cpu"): {
        "cpu.integer.zlib_ops_per_s": [7.2973, 8.0692, 7.9749, 5.8893, 6.0973],
        "cpu.float.matrix_ops_per_s": [27.2816, 10.3744, 13.9919, 6.3803, 13.1938],
        "cpu.memory.write_mib_per_s": [3048.98, 1182.39, 1126.52, 973.2, 1600.54],
        "cpu.branchy.primes_events_per_s": [264.99, 145.32, 212.93, 124.93, 205.24],
    },
}


def real_claims_run(store: Store) -> None:
    """examples/tcg-claims.yaml's run on this host's figures (``REAL_CLAIMS_RUN``), five
    repetitions."""
    text = (Path(__file__).parent.parent / "examples/tcg-claims.yaml").read_text()
    b = RunBuilder(store, study_text=text)
    for (platform, workload), metrics in REAL_CLAIMS_RUN.items():
        cell = b.cell(platform, workload)
        kinds = {n: ("s", False) for n in metrics if n.startswith("boot.")}
        for rep in range(5):
            b.sample(cell, rep + 1, {n: [v[rep]] for n, v in metrics.items()}, kinds=kinds)


@dataclass(frozen=True)
class Figures:
    """A platform's figures in a default run, each drawn with ``cv`` around its value."""

    boot_s: float | None
    """Boot to ready; None: the host itself, which does not boot."""
    cpu: float
    """The cpu programs' rates as a fraction of native's, where the study runs them."""
    disk: float
    """dd's rates as a fraction of native's."""
    net: float
    """iperf3's, in either direction."""
    busy_cores: float
    """The host's cores busy while it runs a workload."""
    cv: float


DEFAULT_RUN = {
    "native": Figures(None, 1.0, 1.0, 1.0, 1.0, 0.03),
    "qemu-virtio": Figures(11.5, 0.08, 0.3, 0.03, 1.9, 0.10),
    "qemu-emulated": Figures(14.2, 0.08, 0.12, 0.012, 1.9, 0.10),
    "uml": Figures(1.6, 0.85, 1.6, 0.02, 1.2, 0.04),
    "container": Figures(0.35, 0.99, 0.98, 0.75, 1.0, 0.03),
    "gvisor": Figures(0.8, 0.93, 1.3, 0.11, 1.3, 0.05),
}
"""The default study's platforms on a 2-core host without usable KVM (both QEMU platforms under
TCG, the noisiest; UML's and gVisor's disks through the host's page cache)."""
NATIVE = {
    "cpu.apps.xz.mib_per_s": (5.2, "MiB/s"),
    "cpu.apps.sqlite.rows_per_s": (310_000.0, "rows/s"),
    "cpu.apps.aes.mib_per_s": (2100.0, "MiB/s"),
    "disk.dd.write_mbps": (520.0, "MB/s"),
    "disk.dd.read_mbps": (910.0, "MB/s"),
    "net.iperf3.inbound_gbps": (28.0, "Gbit/s"),
    "net.iperf3.outbound_gbps": (28.0, "Gbit/s"),
}
"""The host's own figures, each metric's unit (all higher is better)."""
PHASES = {"kernel": 0.2, "init": 0.7, "ready": 1.0}
"""Each boot phase's end as a fraction of boot to ready."""


def default_run(into: Store) -> str:
    """A run of the packaged default study as it comes out on such a host, written through
    the test helpers (no guest booted): its platforms, workloads, labels and 3 repetitions, with
    a steal spike and TCG's noise among its warnings. Returns the run's id."""
    study = parse_study(default_study_text(), "default study")
    b = RunBuilder(
        into,
        run_id="default",
        study_name=study.name,
        study_text=study.text,
        inventory={"cores_logical": 2, "hostname": "fresh"},
    )
    rng = np.random.default_rng(38)
    for cell in study.cells():
        settings = study.platforms[cell.platform]
        workload = study.workloads[cell.workload_index].name
        ran = driver_class(settings).ran_by_settings(settings)
        if settings.driver == "qemu":
            ran = replace(ran, mode="tcg", mode_reason="/dev/kvm is missing")
        cid = b.cell(
            cell.platform,
            cell.workload,
            cell.instances,
            settings.driver,
            settings.model_dump(mode="json"),
            study.workloads[cell.workload_index].model_dump(mode="json"),
            ran,
        )
        f = DEFAULT_RUN[cell.platform]
        fraction = {"cpu": f.cpu, "disk": f.disk, "net": f.net}
        for rep in range(study.repetitions):
            steal = 1.8 if (cell.platform, workload, rep) == ("uml", "disk", 1) else 0.0
            busy = 10 * f.busy_cores * rng.lognormal(0, f.cv) + steal
            if workload == "boot":
                ready = f.boot_s and f.boot_s * rng.lognormal(0, f.cv)
                values = {f"boot.{p}_s": [ready and ready * at] for p, at in PHASES.items()}
                b.sample(cid, rep, values, "s", False, headline={"boot.ready_s"}, missing=NO_BOOT)
                continue
            values = {
                name: [value * fraction[workload] * rng.lognormal(0, f.cv)]
                for name, (value, _) in NATIVE.items()
                if name.startswith(f"{workload}.")
            }
            kinds = {name: (NATIVE[name][1], True) for name in values}
            headline = set() if workload == "cpu" else set(values)  # cpu: its composite's
            if workload == "net":
                for way in ("inbound", "outbound"):
                    values[f"net.iperf3.{way}_retransmits"] = [float(rng.integers(0, 40))]
                    kinds[f"net.iperf3.{way}_retransmits"] = ("count", False)
            cpu_time = host(10, busy, steal=steal)
            b.sample(cid, rep, values, host_cpu=cpu_time, kinds=kinds, headline=headline)
    return b.run_id
