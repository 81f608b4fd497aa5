"""What the tests of consolidation on each platform share: one set of real servers in --quick
through the runner, and the check of what each role served."""

from __future__ import annotations

import time

from hvbench.session import NewRun, RunSession
from hvbench.store import SampleView, Store
from hvbench.study import parse_study

ACTIVE = ("web", "imap", "app", "db")
"""The roles that serve requests (idle measures nothing, nfs is checked apart)."""


def quick_run(study: str, what: str, cells: int) -> tuple[Store, RunSession, list[SampleView]]:
    """The study in --quick through the runner, finished with its ``cells`` samples ok."""
    store = Store()
    t0 = time.monotonic()
    session = RunSession.preflight(store, NewRun(parse_study(study, "t"), quick=True))
    status = session.run().status
    print(f"consolidation {what}: {time.monotonic() - t0:.0f} s")
    samples = store.samples(session.run_id)
    assert status == "finished", [s.error for s in samples]
    assert [s.status for s in samples] == ["ok"] * cells, [s.error for s in samples]
    return store, session, samples


def every_role_served(got: dict[tuple[int, str], float], where: str, all_done: bool = True) -> None:
    """Each active role's requests counted against those due at the quick rates, an SLO
    verdict each, and a p95 where requests were done (``all_done``: some of every role's);
    idle measures nothing."""
    for index, role in enumerate(ACTIVE):
        stem = f"consolidation.{role}"
        done, failed = got[(index, f"{stem}.requests")], got[(index, f"{stem}.failed")]
        due = {"web": 25, "imap": 10, "app": 10, "db": 10}[role]
        assert done + failed == due, (where, role)
        assert done > 0 or not all_done, (where, role)
        assert done == 0 or got[(index, f"{stem}.latency_p95_ms")] > 0, (where, role)
        assert got[(index, f"{stem}.slo_met")] in (0.0, 1.0), (where, role)
    assert not any(i == 4 for i, _ in got), where
