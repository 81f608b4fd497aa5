"""What each metric is, as docs/metrics.md lists it (``tests/test_workload_metrics_doc.py`` holds
the two together): its name, unit and direction, and whether it is a difference that can be below
0. At the ground floor, beside ``units``, so that the study (whose claims are checked against what
its workloads produce, before anything runs) and the analysis (which reads a signed figure by its
difference, the memory workload's density) read the same facts without the one importing the
other's side."""

from __future__ import annotations

from dataclasses import dataclass

UP, DOWN, AS_ABOVE = True, False, None
"""A metric's direction: higher is better (↑), lower is better (↓), or as the metric its
``<field>`` names ("as above")."""


@dataclass(frozen=True)
class MetricFact:
    """One row of docs/metrics.md's table."""

    name: str
    """Its name; ``<x>`` stands for a value its settings choose (a fio profile, a role, a
    direction)."""
    unit: str | None
    """None: as the metric its ``<field>`` names ("as above")."""
    higher_is_better: bool | None
    """``UP``, ``DOWN`` or ``AS_ABOVE``."""
    signed: bool = False
    """A difference by definition, which can be below 0: its sign says which way, and a ratio of
    two of them means nothing (−2 against −5 MiB is "250%", a gain, for the worse one)."""


COMPOSITE_SCORE = MetricFact("cpu.composite.score", "×native", UP)
"""The cpu workloads' composite, which the analysis makes of their sub-scores."""
DENSITY = MetricFact("memory.density_instances", "count", UP)
OVERHEAD = MetricFact("memory.overhead_mib", "MiB", DOWN, signed=True)
"""The memory workload's overhead, host PSS minus guest memory; with ``DENSITY``, what the
density line reads."""

PRODUCES: dict[tuple[str, str | None], tuple[MetricFact, ...]] = {
    ("cpu", "apps"): (
        MetricFact("cpu.apps.povray.pixels_per_s", "pixels/s", UP),
        MetricFact("cpu.apps.stockfish.nodes_per_s", "nodes/s", UP),
        MetricFact("cpu.apps.xz.mib_per_s", "MiB/s", UP),
        MetricFact("cpu.apps.zstd.mib_per_s", "MiB/s", UP),
        MetricFact("cpu.apps.sqlite.rows_per_s", "rows/s", UP),
        MetricFact("cpu.apps.aes.mib_per_s", "MiB/s", UP),
        MetricFact("cpu.apps.sha256.mib_per_s", "MiB/s", UP),
    ),
    ("cpu", "micro"): (
        MetricFact("cpu.integer.zlib_ops_per_s", "bogo-ops/s", UP),
        MetricFact("cpu.float.matrix_ops_per_s", "bogo-ops/s", UP),
        MetricFact("cpu.memory.write_mib_per_s", "MiB/s", UP),
        MetricFact("cpu.branchy.primes_events_per_s", "events/s", UP),
    ),
    ("kernbench", None): (
        MetricFact("kernbench.cold.elapsed_s", "s", DOWN),
        MetricFact("kernbench.cold.user_s", "s", DOWN),
        MetricFact("kernbench.cold.system_s", "s", DOWN),
        MetricFact("kernbench.cold.cpu_pct", "%", UP),
        MetricFact("kernbench.cold.context_switches", "count", DOWN),
        MetricFact("kernbench.cold.sleeps", "count", DOWN),
        MetricFact("kernbench.warm.run<i>.<field>", None, AS_ABOVE),
        MetricFact("kernbench.warm.elapsed_s", "s", DOWN),
        MetricFact("kernbench.warm.<field>", None, AS_ABOVE),
        MetricFact("kernbench.warm.<field>_sd", None, DOWN),
    ),
    ("disk", "bonnie++"): (
        MetricFact("disk.bonnie.seq_output_char_kbps", "KiB/s", UP),
        MetricFact("disk.bonnie.seq_output_block_kbps", "KiB/s", UP),
        MetricFact("disk.bonnie.seq_output_rewrite_kbps", "KiB/s", UP),
        MetricFact("disk.bonnie.seq_input_char_kbps", "KiB/s", UP),
        MetricFact("disk.bonnie.seq_input_block_kbps", "KiB/s", UP),
        MetricFact("disk.bonnie.random_seeks_per_s", "1/s", UP),
        MetricFact("disk.bonnie.seq_create_per_s", "1/s", UP),
        MetricFact("disk.bonnie.seq_read_per_s", "1/s", UP),
        MetricFact("disk.bonnie.seq_delete_per_s", "1/s", UP),
        MetricFact("disk.bonnie.random_create_per_s", "1/s", UP),
        MetricFact("disk.bonnie.random_read_per_s", "1/s", UP),
        MetricFact("disk.bonnie.random_delete_per_s", "1/s", UP),
        MetricFact("disk.bonnie.<test>_cpu_pct", "%", DOWN),
        MetricFact("disk.bonnie.<test>_latency_us", "us", DOWN),
    ),
    ("disk", "fio"): (
        MetricFact("disk.fio.<profile>_qd<depth>_mibps", "MiB/s", UP),
        MetricFact("disk.fio.<profile>_qd<depth>_iops", "IO/s", UP),
        MetricFact("disk.fio.<profile>_qd<depth>_clat_mean_us", "us", DOWN),
        MetricFact("disk.fio.<profile>_qd<depth>_clat_p50_us", "us", DOWN),
        MetricFact("disk.fio.<profile>_qd<depth>_clat_p99_us", "us", DOWN),
        MetricFact("disk.fio.<profile>_qd<depth>_clat_p999_us", "us", DOWN),
    ),
    ("disk", "dbench"): (
        MetricFact("disk.dbench.throughput_mbps", "MB/s", UP),
        MetricFact("disk.dbench.max_latency_ms", "ms", DOWN),
    ),
    ("disk", "dd"): (
        MetricFact("disk.dd.write_mbps", "MB/s", UP),
        MetricFact("disk.dd.read_mbps", "MB/s", UP),
    ),
    ("net", "iperf3"): (
        MetricFact("net.iperf3.<dir>_gbps", "Gbit/s", UP),
        MetricFact("net.iperf3.<dir>_retransmits", "count", DOWN),
        MetricFact("net.iperf3.<dir>_sender_cpu_pct", "%", DOWN),
        MetricFact("net.iperf3.<dir>_receiver_cpu_pct", "%", DOWN),
    ),
    ("net", "iperf"): (MetricFact("net.iperf.<dir>_gbps", "Gbit/s", UP),),
    ("net", "latency"): (
        MetricFact("net.latency.rtt_p50_us", "us", DOWN),
        MetricFact("net.latency.rtt_p99_us", "us", DOWN),
        MetricFact("net.latency.rtt_mean_us", "us", DOWN),
    ),
    ("consolidation", None): (
        MetricFact("consolidation.<role>.requests", "count", UP),
        MetricFact("consolidation.<role>.failed", "count", DOWN),
        MetricFact("consolidation.<role>.achieved_per_s", "requests/s", UP),
        MetricFact("consolidation.<role>.latency_p50_ms", "ms", DOWN),
        MetricFact("consolidation.<role>.latency_p95_ms", "ms", DOWN),
        MetricFact("consolidation.<role>.latency_p99_ms", "ms", DOWN),
        MetricFact("consolidation.<role>.slo_met", "0/1", UP),
        MetricFact("consolidation.<role>.client_cpu_pct", "%", DOWN),
        MetricFact("consolidation.<role>.send_lag_p95_ms", "ms", DOWN),
        MetricFact("consolidation.nfs.calls", "count", DOWN),
        MetricFact("consolidation.nfs.ops", "count", DOWN),
    ),
    ("boot", None): (
        MetricFact("boot.kernel_s", "s", DOWN),
        MetricFact("boot.init_s", "s", DOWN),
        MetricFact("boot.ready_s", "s", DOWN),
        MetricFact("boot.api_s", "s", DOWN),
        MetricFact("boot.start_to_init_s", "s", DOWN),
        MetricFact("boot.storm.all_ready_s", "s", DOWN),
        MetricFact("boot.storm.ready_p50_s", "s", DOWN),
        MetricFact("boot.storm.ready_p99_s", "s", DOWN),
        MetricFact("boot.storm.failed", "count", DOWN),
    ),
    ("memory", None): (
        MetricFact("memory.host_pss_mib", "MiB", DOWN),
        MetricFact("memory.guest_ram_mib", "MiB", DOWN),
        MetricFact("memory.kernel_mib", "MiB", DOWN),
        OVERHEAD,
        DENSITY,
    ),
    ("migration", None): (
        MetricFact("migration.total_s", "s", DOWN),
        MetricFact("migration.downtime_ms", "ms", DOWN),
        MetricFact("migration.setup_ms", "ms", DOWN),
        MetricFact("migration.transferred_mib", "MiB", DOWN),
        MetricFact("migration.passes", "count", DOWN),
        MetricFact("migration.throttle_pct", "%", DOWN),
        MetricFact("migration.dirty_rate_mib_s", "MiB/s", UP),
        MetricFact("migration.guest_pause_ms", "ms", DOWN),
        MetricFact("migration.wrong_pages", "count", DOWN),
    ),
    ("snapshot", None): (
        MetricFact("snapshot.save_s", "s", DOWN),
        MetricFact("snapshot.size_mib", "MiB", DOWN),
        MetricFact("snapshot.diff_save_s", "s", DOWN),
        MetricFact("snapshot.diff_size_mib", "MiB", DOWN),
        MetricFact("snapshot.restore_s", "s", DOWN),
    ),
}
"""What each workload stores, by its name and tool (or suite; None for a workload of one), the
cpu workloads' composite aside: a study's claims (``expect:``) are checked against it."""

DIFFERENCES = frozenset(f.name for facts in PRODUCES.values() for f in facts if f.signed)
"""The names of the figures that are a difference by definition (``MetricFact.signed``)."""
