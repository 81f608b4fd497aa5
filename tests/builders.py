"""Runs with known values, written into a real store through its API (no mocks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from hvbench.store import (
    CellRecord,
    HostCpuReading,
    Inventory,
    MetricRecord,
    PlatformState,
    RawRecord,
    RunRecord,
    SampleRecord,
    Store,
    WhatRan,
)

STUDY = "name: hand-made\nbaseline: native\nplatforms: {}\nworkloads: []\n"


@dataclass
class RunBuilder:
    """Writes a run with known values through the Store API (no mocks)."""

    store: Store
    run_id: str = "run-a"
    study_name: str = "hand-made"
    study_text: str = STUDY
    inventory: dict = field(default_factory=lambda: {"cores_logical": 2, "kernel": "6.1"})
    """As the store keeps it: what ``Inventory.from_json`` reads."""
    workload_names: dict[int, str] = field(default_factory=dict)
    """Cell id -> its workload's name, for what ``sample`` declares of its metrics."""

    def __post_init__(self) -> None:
        self.store.create_run(
            RunRecord(
                id=self.run_id,
                study_name=self.study_name,
                study_text=self.study_text,
                study_source="hand-made.yaml",
                status="finished",
                created_at=datetime.now(UTC),
                finished_at=datetime.now(UTC),
                hvbench_version="0.1.0",
                git_commit=None,
                options={},
                inventory=Inventory.from_json(self.inventory),
            )
        )

    def cell(
        self,
        platform: str,
        workload: str,
        instances: int = 1,
        driver: str | None = None,
        platform_settings: dict | None = None,
        workload_settings: dict | None = None,
        ran: WhatRan | None = None,
    ) -> int:
        """A cell of ``platform``; ``ran``: what its driver wrote it ran (by default nothing
        chosen, and the host itself for the native driver)."""
        driver = driver or ("native" if platform == "native" else "qemu")
        row = CellRecord(
            key=f"{platform}|{workload}|{instances}",
            platform=platform,
            driver=driver,
            workload=workload,
            workload_name=workload.split()[0],
            instances=instances,
            platform_settings={"driver": driver, **(platform_settings or {})},
            workload_settings=workload_settings or {"name": workload.split()[0]},
            ran=ran or WhatRan(bare=driver == "native"),
        )
        cell_id = self.store.cell_id(self.run_id, row)
        self.workload_names[cell_id] = row.workload_name
        return cell_id

    def sample(
        self,
        cell_id: int,
        repetition: int,
        metrics: dict[str, list[float | None]],
        unit: str = "MB/s",
        higher_is_better: bool = True,
        host_cpu: dict | None = None,
        state: PlatformState | None = None,
        status: str = "ok",
        kinds: dict[str, tuple[str, bool]] | None = None,
        headline: set[str] | None = None,
        resolutions: dict[str, list[float]] | None = None,
        missing: str = "+++++",
    ) -> None:
        """``metrics``: name -> one value per instance; ``kinds``: name -> (unit, higher is
        better) where not ``unit``/``higher_is_better``; ``headline``: the names flagged as
        such (None: no flag at all, as in runs stored before it existed); ``resolutions``:
        name -> each value's resolution, where the workload states one; ``missing``: what the
        tool printed where a value is None (bonnie++'s "+++++" by default)."""
        resolutions = resolutions or {}
        kinds = kinds or {}
        records = []
        for name, values in metrics.items():
            name_unit, hib = kinds.get(name, (unit, higher_is_better))
            # what the cpu workloads (sub-scores) and the net workloads (directions) declare
            composite = hib and self.workload_names[cell_id] == "cpu"
            direction = next((d for d in ("inbound", "outbound") if f".{d}_" in name), None)
            records += [
                MetricRecord(
                    i,
                    name,
                    v,
                    name_unit,
                    hib,
                    None if v is not None else missing,
                    None if headline is None else name in headline,
                    composite,
                    direction,
                    resolutions[name][i] if name in resolutions else None,
                )
                for i, v in enumerate(values)
            ]
        self.store.add_sample(
            cell_id,
            SampleRecord(
                repetition=repetition,
                status=status,
                error=None if status == "ok" else "guest crashed",
                started_at=datetime.now(UTC),
                seconds=1.0,
                platform_state=state or PlatformState(),
                host_cpu=host_cpu,
                metrics=records,
                raw=[RawRecord(0, "tool", ["tool", "--flag", "<b>"], "output")],
            ),
        )

    def series(
        self, cell_id: int, name: str, values: list[float], unit: str = "MB/s", hib: bool = True
    ) -> None:
        """One single-instance value per repetition."""
        for rep, v in enumerate(values):
            self.sample(cell_id, rep, {name: [v]}, unit, hib)


def host(wall: float, busy: float, guest: float = 0.0, steal: float = 0.0) -> HostCpuReading:
    """A CpuMonitor.stop() reading on a 2-core host."""
    states = dict.fromkeys(
        ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest"), 0.0
    )
    states.update(user=busy - guest - steal, guest=guest, steal=steal, idle=2 * wall - busy)
    return HostCpuReading(wall, 2, states, busy, [busy])


def run_record(run_id: str) -> RunRecord:
    """A running run's row, to write samples into."""
    return RunRecord(
        id=run_id,
        study_name="s",
        study_text="name: s",
        study_source="s.yaml",
        status="running",
        created_at=datetime.now(UTC),
        hvbench_version="test",
        git_commit=None,
        options={"quick": True},
        inventory=Inventory(hostname="h"),
    )


def sample_record(rep: int, value: float | None, text_value: str | None = None) -> SampleRecord:
    """One native instance's bonnie++ figure (``text_value``: what the tool printed where
    ``value`` is None), with every part a sample can hold."""
    return SampleRecord(
        repetition=rep,
        status="ok",
        error=None,
        started_at=datetime.now(UTC),
        seconds=1.5,
        platform_state=PlatformState(["native-0"], 2, 2, False, {"native-0": "loop device"}),
        host_cpu=HostCpuReading(1.5, 2, {"user": 1.0, "idle": 2.0}, 1.0, [0.9]),
        metrics=[
            MetricRecord(
                0,
                "disk.bonnie.seq_output_char_kbps",
                value,
                "KB/s",
                True,
                text_value,
                resolution=None if value is None else 0.5,
            )
        ],
        raw=[RawRecord(0, "bonnie++", ["bonnie++", "-q"], "raw,csv,line")],
    )


def linear_net_scaling(store: Store, run_id: str, rng: np.random.Generator) -> str:
    """A run whose net figure scales linearly: equal per-instance throughput (5 Gbit/s, CV 5%)
    at 1 and 2 instances of ``kvm``, 3 repetitions, for the scaling line's and table's tests."""
    b = RunBuilder(store, run_id=run_id)
    for count in (1, 2):
        cell = b.cell("kvm", "net", instances=count)
        for rep in range(3):
            each = 5.0 * (1 + 0.05 * rng.standard_normal(count))
            b.sample(cell, rep, {"net.x.inbound_gbps": list(each)}, "Gbit/s")
    return run_id
