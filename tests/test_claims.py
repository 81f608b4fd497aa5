"""Claims (``expect:``): refused when the study loads where they name what it does not produce;
judged by their 95% interval against the bound, a run's claims one family (Holm); seeded
simulations of how often the wording errs; a run built from real figures of this host."""

from __future__ import annotations

import json

import numpy as np
import pytest
from known_runs import real_claims_run
from typer.testing import CliRunner

from hvbench.analysis import analyse
from hvbench.analysis.claims import ClaimEvidence, judge_claims
from hvbench.analysis.model import HELD, INCONCLUSIVE, REFUTED
from hvbench.analysis.verdict import verdicts
from hvbench.cli import app
from hvbench.errors import StudyError
from hvbench.report import render
from hvbench.store import Store
from hvbench.study import parse_study

STUDY = """name: claims
baseline: native
platforms:
  native: {driver: native}
  tcg: {driver: qemu, accel: tcg, vcpus: 1, memory: 512M}
workloads:
  - {name: boot}
  - {name: cpu, suite: micro}
repetitions: 5
expect:
"""


def test_claims_are_read_with_their_units():
    study = parse_study(
        STUDY
        + "  - {platform: tcg, workload: boot, metric: boot.ready_s, at_most: 60s, source: SLO}\n"
        + "  - {platform: tcg, workload: cpu, metric: cpu.composite.score, at_least: 95%}\n"
        + "  - {workload: boot, metric: boot.init_s, at_most: 125ms, instances: 1}\n",
        "s.yaml",
    )
    texts = [c.text for c in study.claims]
    assert texts == [
        "boot.ready_s at most 60 s",
        "cpu.composite.score at least 95% of native",
        "boot.init_s at most 125 ms",
    ]
    assert study.claims[0].source == "SLO" and study.claims[2].platform == "all"


@pytest.mark.parametrize(
    ("claim", "said"),
    [
        (
            "{workload: boot, metric: boot.ready, at_most: 60s}",
            "s.yaml:11: expect.0.metric: expected a metric boot produces ['boot.kernel_s', "
            "'boot.init_s', 'boot.ready_s', 'boot.api_s',",
        ),
        (
            "{platform: kvm, workload: boot, metric: boot.ready_s, at_most: 60s}",
            "expect.0.platform: expected 'all' or one of the study's platforms ['native', 'tcg'], "
            "found 'kvm'",
        ),
        (
            "{workload: disk, metric: disk.dd.read_mbps, at_least: 1}",
            "expect.0.workload: expected one of the study's workloads ['boot', 'cpu'], "
            "found 'disk'",
        ),
        (
            "{workload: boot, metric: boot.ready_s, at_most: 5MiB}",
            "the bound is in MiB, boot.ready_s in s: expected a bound in a unit of that kind",
        ),
        (
            "{platform: native, workload: cpu, metric: cpu.composite.score, at_least: 95%}",
            "expected a platform other than the baseline (native), found 'native'",
        ),
        (
            "{workload: boot, metric: boot.ready_s, at_most: 60s, at_least: 1s}",
            "expected exactly one of at_most and at_least",
        ),
        (
            "{workload: boot, metric: boot.ready_s, at_most: 60s, instances: 4}",
            "expect.0.instances: expected one of the counts boot runs at [1], found 4",
        ),
        (
            "{workload: boot, metric: boot.ready_s, at_most: 60 parsecs}",
            "expect.0: expected a known unit",
        ),
        ("{workload: boot, metric: boot.ready_s, at_most: 60s, by: me}", "known settings:"),
    ],
)
def test_a_claim_on_what_the_study_does_not_produce_is_refused_in_one_line(claim, said):
    with pytest.raises(StudyError) as e:
        parse_study(STUDY + f"  - {claim}\n", "s.yaml")
    assert said in str(e.value) and "\n" not in str(e.value), str(e.value)


def _family(rng, n: int, cv: float, truths: list[tuple[float, float, bool, bool]]) -> list[str]:
    """One run's claims: (true mean or share of native kept, bound, at_most, of native) each,
    its repetitions (and the baseline's, at 100) drawn at ``cv``; their outcomes."""
    figures = []
    for truth, _, _, native in truths:
        values = 100 * truth * (1 + cv * rng.standard_normal(n))
        baseline = 100 * (1 + cv * rng.standard_normal(n)) if native else None
        figures.append(ClaimEvidence(values, baseline, True))
    bounds = [b / 100 if native else 100 * b for _, b, _, native in truths]
    return [t[5] for t in judge_claims(figures, bounds, [t[2] for t in truths])]


def test_the_wording_errs_as_the_family_allows():
    """Seeded, 1000 runs of 10 repetitions at CV 3%, each with five claims: three true ones at
    their very bound (the hardest to keep: a mean at most, a mean at least, a % of native at
    least), one whose mean misses its at-most bound by 10%, one whose % of native misses 95%
    by 10% (85.5%). A true claim is refuted in at most 5% of runs (any of the three: 2.1% with
    this seed, and not none: the test is not blind at the bound), each missed claim is found in
    at least 80% (100% and 100%). At 3 repetitions, a claim 2% inside its bound is held in 11%
    of 500 runs, refuted in 0.4%: the rest are inconclusive, as the interval says."""
    rng = np.random.default_rng(36)
    truths = [
        (1.0, 1.0, True, False),
        (1.0, 1.0, False, False),
        (0.95, 95.0, False, True),
        (1.10, 1.0, True, False),
        (0.855, 95.0, False, True),
    ]
    runs = [_family(rng, 10, 0.03, truths) for _ in range(1000)]
    false = np.mean([REFUTED in r[:3] for r in runs])
    found = [np.mean([r[i] == REFUTED for r in runs]) for i in (3, 4)]
    assert false <= 0.05 and min(found) >= 0.80, (false, found)
    assert false > 0.005, false  # calibrated, not blind: at the bound, some runs must refute
    near = [_family(rng, 3, 0.03, [(0.98, 1.0, True, False)])[0] for _ in range(500)]
    held, refuted = near.count(HELD) / 500, near.count(REFUTED) / 500
    assert refuted <= 0.025 and 0.05 < held < 0.9, (held, refuted)


def test_a_run_of_real_figures_holds_refutes_and_cannot_tell(tmp_path):
    """examples/tcg-claims.yaml's three claims on this host's figures: TCG boots in under a
        minute (14 s [8–20 s]: held), keeps 95% of native CPU (16% [9–24%]: refuted),
        and boots in at most its own measured mean, 13.7 s (inconclusive): one each in the verdict,
        the report, the JSON lines, ``hvbench claims --json``, which exits 1 (refuted), and in the
    claims' history."""
    store = Store(f"sqlite:///{tmp_path}/real.db")
    real_claims_run(store)
    a = analyse(store, "latest")
    lines = [v for v in verdicts(a) if v.startswith("claim: ")]
    assert len(lines) == 3, lines
    assert "boot.ready_s at most 60 s: 14 s [8–20 s]: held" in lines[0]
    assert "16% [9–24%] of native: refuted" in lines[1]
    assert "inconclusive (the interval straddles its bound" in lines[2]
    report = render(a, "md")
    claims_section = report.split("## Claims")[1].split("## Tables")[0]
    assert [claims_section.count(f"| {o} ") for o in (HELD, REFUTED, INCONCLUSIVE)] == [1, 1, 1]
    exported = [json.loads(x) for x in render(a, "json").splitlines()]
    judged = [x["metadata"]["outcome"] for x in exported if x["metric"] == "claim"]
    assert judged == [HELD, REFUTED, INCONCLUSIVE]
    res = CliRunner().invoke(app, ["claims", "latest", "--db", store.url, "--json"])
    assert res.exit_code == 1, res.output
    said = json.loads(res.output)
    assert [c["outcome"] for c in said] == [HELD, REFUTED, INCONCLUSIVE]
    res = CliRunner().invoke(app, ["history", "--claims", "--json", "--db", store.url])
    runs = [h["runs"] for h in json.loads(res.output)]
    assert sorted(r[0]["outcome"] for r in runs) == sorted([HELD, REFUTED, INCONCLUSIVE])
    # the history keeps each judged claim as its record: it says what the run said of it
    kept = [{k: v for k, v in r[0].items() if k not in ("run", "time")} for r in runs]
    assert sorted(kept, key=str) == sorted(said, key=str)
    res = CliRunner().invoke(app, ["history", "--claims", "--db", store.url])
    assert f"{HELD}: 14 [8, 20] s  n=" in res.output, res.output
