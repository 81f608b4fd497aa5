"""What each workload stores, by name and unit, as docs/metrics.md lists it (``tests/
test_workload_metrics_doc.py`` holds the two together): a study's claims (``expect:``) are
checked against it when the study loads, before anything runs. ``<x>`` stands for a value its
settings choose (a fio profile, a role, a direction); a unit of None varies with ``<field>``."""

from __future__ import annotations

import re

from hvbench.workloads import selector
from hvbench.workloads.base import WorkloadSettings

COMPOSITE = {"cpu.composite.score": "×native"}
"""The cpu workloads' composite, which the analysis makes of their sub-scores."""

PRODUCES: dict[tuple[str, str | None], dict[str, str | None]] = {
    ("cpu", "apps"): {
        "cpu.apps.povray.pixels_per_s": "pixels/s",
        "cpu.apps.stockfish.nodes_per_s": "nodes/s",
        "cpu.apps.xz.mib_per_s": "MiB/s",
        "cpu.apps.zstd.mib_per_s": "MiB/s",
        "cpu.apps.sqlite.rows_per_s": "rows/s",
        "cpu.apps.aes.mib_per_s": "MiB/s",
        "cpu.apps.sha256.mib_per_s": "MiB/s",
    },
    ("cpu", "micro"): {
        "cpu.integer.zlib_ops_per_s": "bogo-ops/s",
        "cpu.float.matrix_ops_per_s": "bogo-ops/s",
        "cpu.memory.write_mib_per_s": "MiB/s",
        "cpu.branchy.primes_events_per_s": "events/s",
    },
    ("kernbench", None): {
        "kernbench.cold.elapsed_s": "s",
        "kernbench.cold.user_s": "s",
        "kernbench.cold.system_s": "s",
        "kernbench.cold.cpu_pct": "%",
        "kernbench.cold.context_switches": "count",
        "kernbench.cold.sleeps": "count",
        "kernbench.warm.run<i>.<field>": None,
        "kernbench.warm.elapsed_s": "s",
        "kernbench.warm.<field>": None,
        "kernbench.warm.<field>_sd": None,
    },
    ("disk", "bonnie++"): {
        "disk.bonnie.seq_output_char_kbps": "KiB/s",
        "disk.bonnie.seq_output_block_kbps": "KiB/s",
        "disk.bonnie.seq_output_rewrite_kbps": "KiB/s",
        "disk.bonnie.seq_input_char_kbps": "KiB/s",
        "disk.bonnie.seq_input_block_kbps": "KiB/s",
        "disk.bonnie.random_seeks_per_s": "1/s",
        "disk.bonnie.seq_create_per_s": "1/s",
        "disk.bonnie.seq_read_per_s": "1/s",
        "disk.bonnie.seq_delete_per_s": "1/s",
        "disk.bonnie.random_create_per_s": "1/s",
        "disk.bonnie.random_read_per_s": "1/s",
        "disk.bonnie.random_delete_per_s": "1/s",
        "disk.bonnie.<test>_cpu_pct": "%",
        "disk.bonnie.<test>_latency_us": "us",
    },
    ("disk", "fio"): {
        "disk.fio.<profile>_qd<depth>_mibps": "MiB/s",
        "disk.fio.<profile>_qd<depth>_iops": "IO/s",
        "disk.fio.<profile>_qd<depth>_clat_mean_us": "us",
        "disk.fio.<profile>_qd<depth>_clat_p50_us": "us",
        "disk.fio.<profile>_qd<depth>_clat_p99_us": "us",
        "disk.fio.<profile>_qd<depth>_clat_p999_us": "us",
    },
    ("disk", "dbench"): {
        "disk.dbench.throughput_mbps": "MB/s",
        "disk.dbench.max_latency_ms": "ms",
    },
    ("disk", "dd"): {
        "disk.dd.write_mbps": "MB/s",
        "disk.dd.read_mbps": "MB/s",
    },
    ("net", "iperf3"): {
        "net.iperf3.<dir>_gbps": "Gbit/s",
        "net.iperf3.<dir>_retransmits": "count",
        "net.iperf3.<dir>_sender_cpu_pct": "%",
        "net.iperf3.<dir>_receiver_cpu_pct": "%",
    },
    ("net", "iperf"): {
        "net.iperf.<dir>_gbps": "Gbit/s",
    },
    ("net", "latency"): {
        "net.latency.rtt_p50_us": "us",
        "net.latency.rtt_p99_us": "us",
        "net.latency.rtt_mean_us": "us",
    },
    ("consolidation", None): {
        "consolidation.<role>.requests": "count",
        "consolidation.<role>.failed": "count",
        "consolidation.<role>.achieved_per_s": "requests/s",
        "consolidation.<role>.latency_p50_ms": "ms",
        "consolidation.<role>.latency_p95_ms": "ms",
        "consolidation.<role>.latency_p99_ms": "ms",
        "consolidation.<role>.slo_met": "0/1",
        "consolidation.<role>.client_cpu_pct": "%",
        "consolidation.<role>.send_lag_p95_ms": "ms",
        "consolidation.nfs.calls": "count",
        "consolidation.nfs.ops": "count",
    },
    ("boot", None): {
        "boot.kernel_s": "s",
        "boot.init_s": "s",
        "boot.ready_s": "s",
        "boot.api_s": "s",
        "boot.start_to_init_s": "s",
        "boot.storm.all_ready_s": "s",
        "boot.storm.ready_p50_s": "s",
        "boot.storm.ready_p99_s": "s",
        "boot.storm.failed": "count",
    },
    ("memory", None): {
        "memory.host_pss_mib": "MiB",
        "memory.guest_ram_mib": "MiB",
        "memory.kernel_mib": "MiB",
        "memory.overhead_mib": "MiB",
        "memory.density_instances": "count",
    },
    ("migration", None): {
        "migration.total_s": "s",
        "migration.downtime_ms": "ms",
        "migration.setup_ms": "ms",
        "migration.transferred_mib": "MiB",
        "migration.passes": "count",
        "migration.throttle_pct": "%",
        "migration.dirty_rate_mib_s": "MiB/s",
        "migration.guest_pause_ms": "ms",
        "migration.wrong_pages": "count",
    },
    ("snapshot", None): {
        "snapshot.save_s": "s",
        "snapshot.size_mib": "MiB",
        "snapshot.diff_save_s": "s",
        "snapshot.diff_size_mib": "MiB",
        "snapshot.restore_s": "s",
    },
}


def produced(settings: WorkloadSettings) -> dict[str, str | None]:
    """The metric names (patterns) a workload's settings produce, with their units."""
    key = (settings.name, getattr(settings, selector(settings.name), None))
    extra = COMPOSITE if settings.name == "cpu" else {}
    return {**PRODUCES[key], **extra}


def match(name: str, patterns: dict[str, str | None]) -> str | None:
    """The pattern a metric name matches (``<x>``: letters, digits and '_'), else None."""
    for pattern in patterns:
        if re.fullmatch(re.sub(r"<[a-z]+>", "[a-z0-9_]+", re.escape(pattern)), name):
            return pattern
    return None
