"""consolidation: parsers against real sysbench output at a rate, settings, and a quick run of
three roles at once on native through the runner and through the workload calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from test_runner import leftovers
from test_workload_metrics_doc import doc_rows
from workload_env import native_instances, run_workload

from hvbench.runner import Runner
from hvbench.store import Store
from hvbench.study import parse_study
from hvbench.workloads import workload_class
from hvbench.workloads.base import ParseError
from hvbench.workloads.consolidation import (
    Consolidation,
    ConsolidationSettings,
    parse_sysbench_rate,
    role_metrics,
)

FIX = Path(__file__).parent / "fixtures/consolidation"


def settings(**kw) -> ConsolidationSettings:
    return ConsolidationSettings(name="consolidation", **kw)


def test_rate_and_p95_from_real_sysbench_output():
    assert parse_sysbench_rate((FIX / "cpu-web.txt").read_text()) == (25 / 2.0060, 0.08)
    assert parse_sysbench_rate((FIX / "fileio-db.txt").read_text()) == (17 / 2.0688, 0.26)


def test_meets_latency_follows_the_requirement():
    ok = role_metrics("web", (FIX / "cpu-web.txt").read_text(), 100)
    assert [m.name for m in ok] == [
        "consolidation.web.events_per_s",
        "consolidation.web.latency_p95_ms",
        "consolidation.web.meets_latency",
    ]
    assert ok[2].value == 1.0
    # asked for 3000/s of a 0.6 ms request: the queue grows, p95 is 960 ms
    late = role_metrics("app", (FIX / "cpu-overloaded.txt").read_text(), 100)
    assert late[1].value == 960.30 and late[2].value == 0.0


@pytest.mark.parametrize("fixture", ["fileio-truncated.txt", "garbage.txt"])
def test_truncated_or_garbage_output_is_a_parse_error(fixture: str):
    with pytest.raises(ParseError, match="consolidation db: sysbench summary not found"):
        role_metrics("db", (FIX / fixture).read_text(), 100)


def test_metrics_are_documented():
    rows = doc_rows()
    for m in role_metrics("nfs", (FIX / "fileio-db.txt").read_text(), 100):
        found = [r for r in rows if r[0].match(m.name)]
        assert found, f"{m.name} is not in docs/metrics.md"
        direction = "↑" if m.higher_is_better else "↓"
        assert found[0][1:] == (m.unit, direction, m.headline), m.name


def test_settings_roles_and_estimate():
    assert workload_class("consolidation", None) is Consolidation
    post = settings()
    assert len(post.roles()) == 24
    assert post.roles()[:6] == ["web", "imap", "app", "db", "nfs", "idle"]
    assert sorted(post.roles()).count("web") == 6 and post.roles().count("idle") == 4
    assert settings(mix={"db": 2, "web": 1}).roles() == ["web", "db", "db"]
    w = Consolidation(post)
    assert 300 < w.estimate_seconds(quick=False) < 310
    assert w.estimate_seconds(quick=True) < 10
    for bad in ({"mix": {"web": 0}}, {"mix": {"mail": 1}}, {"mix": {"web": -1}}, {"rate": 0}):
        with pytest.raises(ValidationError):
            settings(**bad)


STUDY = """\
name: consolidation-test
platforms:
  native: {driver: native, instances: [3], disk: {size: 1G}}
workloads:
  - {name: consolidation, mix: {web: 1, db: 1, idle: 1}, rate: 20}
repetitions: 1
"""


def test_three_roles_at_once_through_the_runner():
    store = Store()
    runner = Runner.create(parse_study(STUDY, "t"), store, quick=True)
    assert runner.run() == "finished"
    assert [s.status for s in store.samples(runner.run_id)] == ["ok"]
    rows = {(r.instance, r.name): r.value for r in store.metric_rows(runner.run_id)}
    assert {name.split(".")[1] for _, name in rows} == {"web", "db"}
    for inst, role in ((0, "web"), (1, "db")):
        assert rows[(inst, f"consolidation.{role}.events_per_s")] > 0
        assert rows[(inst, f"consolidation.{role}.latency_p95_ms")] > 0
    assert not any(i == 2 for i, _ in rows)  # idle measures nothing
    assert leftovers(runner.run_id) == []


def test_the_other_roles_on_native():
    w = Consolidation(settings(mix={"imap": 1, "app": 1, "nfs": 1}))
    with native_instances(3, data_disk=True) as (instances, network):
        outcomes = run_workload(w, instances, network)
        left = [i.exec(["ls", "-A", i.data_disk.mountpoint], 60).text().split() for i in instances]
    for outcome, role in zip(outcomes, ("imap", "app", "nfs"), strict=True):
        assert outcome.metrics[0].name == f"consolidation.{role}.events_per_s"
        assert outcome.metrics[0].value > 0
    assert all(not any(n.startswith("hvbench.") for n in names) for names in left)
