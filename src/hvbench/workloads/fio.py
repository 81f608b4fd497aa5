"""disk with fio: sequential read and write in 1 MiB blocks and random read and write in 4 KiB
blocks, each at queue depth 1 and 32, with direct I/O, time-based after a ramp.

All profiles run in one fio process, one after the other (``--stonewall``), on one file in the
data disk's scratch directory; fio lays the file out before the first profile, outside the timed
part. Metrics come from fio's JSON output: bandwidth, IOPS and completion-latency percentiles
(p50, p99, p99.9) per profile. A profile that failed (fio's per-job ``error``) fails the cell with
fio's error, even when other profiles ran.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hvbench.units import Size
from hvbench.workloads.base import Context, Metric, Outcome, ParseError, TimedJob
from hvbench.workloads.common import combined, keep, number
from hvbench.workloads.disk import DiskSettings, DiskWorkload

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

DEFAULT_SIZE = 1 << 30
QUICK_SIZE = 64 << 20
QUICK_RUNTIME_S = 2.0
QUICK_RAMP_S = 1.0
PERCENTILES = {"50.000000": "p50", "99.000000": "p99", "99.900000": "p999"}

# profile name -> (fio rw, block size, direction in fio's JSON)
PROFILES: dict[str, tuple[str, str, str]] = {
    "seq_read": ("read", "1M", "read"),
    "seq_write": ("write", "1M", "write"),
    "rand_read": ("randread", "4k", "read"),
    "rand_write": ("randwrite", "4k", "write"),
}


class FioSettings(DiskSettings):
    tool: Literal["fio"] = "fio"
    size: Size | None = None
    """Bytes of the file each profile works on; default 1G."""
    runtime: PositiveFloat = 60.0
    """Seconds each profile is measured, after the ramp."""
    ramp: NonNegativeFloat = 5.0
    """Seconds each profile runs before measuring starts (fio --ramp_time)."""
    depths: list[PositiveInt] = Field(default=[1, 32], min_length=1)
    """Queue depths each profile runs at."""
    ioengine: Literal["libaio", "io_uring", "psync"] = "libaio"


class Fio(DiskWorkload[FioSettings]):
    tool: ClassVar[str] = "fio"
    settings_model = FioSettings

    def tools(self) -> list[str]:
        return ["fio"]

    def _size(self, quick: bool) -> int:
        size = self.settings.size or DEFAULT_SIZE
        return min(size, QUICK_SIZE) if quick else size

    def _times(self, quick: bool) -> tuple[float, float]:
        s = self.settings
        return (QUICK_RUNTIME_S, QUICK_RAMP_S) if quick else (s.runtime, s.ramp)

    def timed_jobs(self, quick: bool) -> list[TimedJob]:
        """Fixed time after the ramp, timed by fio's own clock (nanoseconds)."""
        return [TimedJob("each profile", self._times(quick)[0], 1e-9, "raise runtime")]

    def argv(self, target: str, quick: bool) -> list[str]:
        runtime, ramp = self._times(quick)
        argv = [
            "fio",
            "--output-format=json",
            f"--ioengine={self.settings.ioengine}",
            "--direct=1",
            "--time_based",
            f"--runtime={runtime:g}",
            f"--ramp_time={ramp:g}",
            f"--size={self._size(quick)}",
            f"--filename={target}",
        ]
        for name, (rw, bs, _) in PROFILES.items():
            for depth in self.settings.depths:
                argv += [
                    f"--name={name}_qd{depth}",
                    "--stonewall",
                    f"--rw={rw}",
                    f"--bs={bs}",
                    f"--iodepth={depth}",
                ]
        return argv

    def prepare(self, instance: Instance, ctx: Context) -> None:
        super().prepare(instance, ctx)
        self.check_space(instance, self._size(ctx.quick))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        argv = self.argv(f"{self.scratch(instance)}/fio.dat", ctx.quick)
        ctx.barrier()
        result = instance.exec(argv, timeout=self.timeout(ctx.quick))
        raw = keep("fio", argv, combined(result))
        metrics = parse_fio_json(result.text())
        if not result.ok:  # every job reported no error, yet fio failed
            raise ParseError(f"fio exited with {result.exit_code}: {result.describe_failure()}")
        return Outcome(metrics, [raw])

    def estimate_seconds(self, quick: bool) -> float:
        layout = self._size(quick) / (200 << 20)
        return 2 + layout + self.fixed_time_seconds(quick) + self._profiles() * 0.5

    def fixed_time_seconds(self, quick: bool) -> float:
        return self._profiles() * sum(self._times(quick))

    def _profiles(self) -> int:
        return len(PROFILES) * len(self.settings.depths)


def parse_fio_json(text: str) -> list[Metric]:
    """Metrics per job from ``fio --output-format=json`` (warnings before the JSON are skipped)."""
    start = text.find("{")
    if start < 0:
        raise ParseError("fio printed no JSON (was it stopped before the end?)")
    try:
        doc = json.loads(text[start:])
    except ValueError as e:
        raise ParseError(f"fio JSON output is cut short or invalid: {e}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise ParseError("fio JSON output has no jobs")
    failed = [j for j in jobs if isinstance(j, dict) and j.get("error")]
    if failed:
        names = ", ".join(f"{j.get('jobname')} (error {j.get('error')})" for j in failed)
        raise ParseError(f"fio job failed: {names}")
    metrics: list[Metric] = []
    for job in jobs:
        name = str(job.get("jobname", ""))
        profile = name.rsplit("_qd", 1)[0]
        if profile not in PROFILES:
            raise ParseError(f"fio job {name!r} is not one of hvbench's profiles")
        metrics += _job_metrics(name, job.get(PROFILES[profile][2]))
    return metrics


def _job_metrics(name: str, side: object) -> list[Metric]:
    if not isinstance(side, dict) or not isinstance(side.get("clat_ns"), dict):
        raise ParseError(f"fio job {name}: no read/write statistics")
    stem = f"disk.fio.{name}"
    bw_kib = number(side.get("bw"), f"{stem} bw")
    iops = number(side.get("iops"), f"{stem} iops")
    if side.get("total_ios", 0) <= 0:
        raise ParseError(f"fio job {name}: no I/O completed")
    metrics = [
        Metric(f"{stem}_mibps", bw_kib / 1024, "MiB/s", True, headline=True),
        Metric(f"{stem}_iops", iops, "IO/s", True),
        Metric(
            f"{stem}_clat_mean_us", number(side["clat_ns"].get("mean"), stem) / 1e3, "us", False
        ),
    ]
    percentiles = side["clat_ns"].get("percentile") or {}
    for key, label in PERCENTILES.items():
        if key in percentiles:
            us = number(percentiles[key], f"{stem} clat {label}") / 1e3
            metrics.append(Metric(f"{stem}_clat_{label}_us", us, "us", False))
    return metrics
