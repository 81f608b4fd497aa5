"""Tables of a comparison of two runs (or two sets of runs), for every format."""

from __future__ import annotations

import math

from hvbench.analysis.compare import (
    ASSUMED,
    FEWEST,
    IMPROVEMENT,
    MEASURED,
    OPTION,
    REGRESSION,
    RUNS,
    SAME_RUN,
    VERDICTS,
    Comparison,
    MetricChange,
)
from hvbench.analysis.intervals import RESOLUTION_UNKNOWN
from hvbench.analysis.model import RunAnalysis
from hvbench.analysis.normalize import rounded
from hvbench.analysis.readings import Reading
from hvbench.analysis.settling import MAX_REPETITIONS, MAX_RUNS
from hvbench.report.tables import MEAN_CI, Table, with_ci

BEFORE_CORRECTION = "significant only before Holm's correction"
ASSUMED_ONLY = "significant only at the assumed allowance"


def change_text(ch: MetricChange) -> tuple[str, str, str]:
    """The change and its interval as text: "−3.1%", "−12.1%", "+0.1%", the bounds rounded
    outward and never onto 0 from one side (``normalize.rounded``); a signed figure's in its
    unit: "+3.0 MiB"."""
    r = ch.judged.ratio
    if ch.signed:
        texts, unit = rounded(r.estimate, r.low, r.high, 0.0, sign=True), f" {ch.unit}"
    else:
        texts = rounded(100 * ch.change, 100 * ch.ci_low, 100 * ch.ci_high, 0.0, sign=True)
        unit = "%"
    est, low, high = (t if t == "n/a" or "∞" in t else t + unit for t in texts)
    return est, low, high


def _level(c: Comparison) -> int:
    return round(100 * (1 - c.alpha))


def _where(c: Comparison, ch: MetricChange) -> str:
    return f"{platform_label(c, ch.platform)} / {ch.workload} / {ch.instances} inst. / {ch.name}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def allowance_text(c: Comparison) -> str:
    """The run-to-run allowance and where it comes from, in words."""
    a = c.allowance
    if a.source == RUNS:
        return "none added: the runs' own spread measures the run-to-run variation"
    if a.source == SAME_RUN:
        return "none: the same run on both sides, and nothing varies between a run and itself"
    if a.source == OPTION:
        return f"{_pct(a.value)} a run (--allowance)"
    assumed = f"{_pct(a.value)} a run, assumed, not measured"
    if a.source == ASSUMED:
        return f"{assumed} ({a.note}; or give --allowance): {_unguarded(c)}"
    shared = dict.fromkeys(ch.workload for ch in c.changes)
    parts = [f"{w} {_pct(v)} ({df:.0f} degrees of freedom)" for w, (v, df) in a.workloads.items()]
    rest = [w for w in shared if w not in a.workloads]
    if rest:
        parts.append(f"{', '.join(rest)}: {assumed} (no earlier figures of the same work)")
    return (
        f"measured from the spread of the run means of {a.note}, beyond what their repetitions "
        "carry, pooled per workload over its headline metrics: " + "; ".join(parts)
    )


def _unguarded(c: Comparison) -> str:
    """What an assumed allowance risks: not a false regression (those must hold at ``ALARM``
    too), a false pass."""
    a = c.allowance
    return (
        f"a regression must hold at {_pct(a.alarm or 0.0)} as well, a pass cannot: on a host "
        f"whose runs differ by more than {_pct(a.value)}, a regression can pass unseen"
    )


def observations(c: Comparison) -> str:
    """What one observation is, and the allowance for the variation between runs."""
    if c.by_run:
        spread = (
            f"; the runs' spread, median over metrics: {100 * c.run_spread:.1f}% (at most the "
            "run-to-run allowance of single-run comparisons on this host)"
            if c.run_spread is not None
            else ""
        )
        return f"observations: runs, {len(c.a)} against {len(c.b)}, each run's mean{spread}"
    return (
        f"observations: repetitions, one run a side; run-to-run allowance: {allowance_text(c)}; "
        "A and B interleaved as two platforms of one study need none"
    )


def ran_on(runs: list[RunAnalysis], platform: str) -> str | None:
    """What a platform ran under (accelerator, mode) in a side's runs; "kvm/tcg" where they
    disagree."""
    seen = list(dict.fromkeys(r.ran.get(platform) for r in runs))
    return seen[0] if len(seen) == 1 else "/".join(s or "n/a" for s in seen)


def platform_label(c: Comparison, platform: str) -> str:
    """The platform's label, or, where A and B ran it under different accelerators or modes,
    both (``qemu-virtio [kvm → tcg]``): its change then measures that too."""
    ran_a, ran_b = ran_on(c.a, platform), ran_on(c.b, platform)
    if ran_a == ran_b:
        return c.b[-1].label(platform)
    return f"{platform} [{ran_a or 'n/a'} → {ran_b or 'n/a'}]"


def _ran_apart(c: Comparison) -> list[str]:
    """The shared platforms that ran under different accelerators or modes in A and B."""
    shared = dict.fromkeys(ch.platform for ch in c.changes)
    return [p for p in shared if ran_on(c.a, p) != ran_on(c.b, p)]


def to_settle(c: Comparison, ch: MetricChange) -> str:
    """What would settle an unsettled metric, that first: "12 repetitions a run (one run a
    side), or 3 runs a side", were it unchanged; where as many as were given would already do
    for an unchanged metric, its own change keeps it open: more than were given, and it says
    so; where no count within reach would, that none would; "" where nothing is to settle."""
    j = ch.judged
    if ch.verdict == Reading.NOT_TESTED:
        if min(j.ratio.n_a, j.ratio.n_b) >= 2:
            return "a workload that states its resolution, or a job whose repetitions differ"
        return "2 or more repetitions a side"
    if ch.settled:
        return ""
    have = min(j.ratio.n_a, j.ratio.n_b)
    need = j.runs if c.by_run else j.repetitions
    if need is not None and need <= have:
        # enough for an unchanged metric (runs a side, or repetitions a run): what keeps it
        # open is its change itself, and fewer than were run would not settle it
        more = (
            f"more than {have} runs a side"
            if c.by_run
            else f"more than {have} repetitions a run, or more runs a side"
        )
        return (
            f"{more}: with {have}, its own change ({ch.change:+.1%}) keeps a bound past "
            f"±{c.threshold:.0%} ({need} would do, were it unchanged)"
        )
    if j.runs is None and (c.by_run or j.repetitions is None):
        return f"no count within reach: not {MAX_RUNS} runs a side" + (
            "" if c.by_run else f", nor {MAX_REPETITIONS} repetitions a run"
        )
    runs = f"{j.runs} runs a side" if j.runs is not None else f"more than {MAX_RUNS} runs a side"
    if c.by_run or j.repetitions is None:
        return runs
    return f"{j.repetitions} repetitions a run (one run a side), or {runs}"


def changes_table(c: Comparison) -> Table:
    level = _level(c)
    t = Table(
        f"{Comparison.label(c.b)} against {Comparison.label(c.a)}",
        [
            "platform",
            "workload",
            "instances",
            "metric",
            f"A ({Comparison.label(c.a)})",
            f"B ({Comparison.label(c.b)})",
            "change",
            f"{level}% CI of change",
            "p (Holm)",
            "could detect",
            "would settle it",
            "headline",
            "verdict",
        ],
        kind="compare",
        notes=[
            f"A, B: the per-instance figure's observations, {MEAN_CI}; change = mean(B) / "
            f"mean(A) − 1 with Fieller's {level}% interval (a signed figure, such as an "
            "overhead that can be below 0: mean(B) − mean(A) in its unit, with Welch's, its "
            "threshold relative to |mean(A)|), bounds rounded outward; " + observations(c),
            f"regression / improvement: Welch's test passes Holm's step-down at {c.alpha} within "
            "its family (the headline metrics, which decide the exit code; the other metrics, "
            f"reported only) and the change exceeds {100 * c.threshold:.0f}%; no significant "
            f"change: the interval lies within ±{100 * c.threshold:.0f}% (below threshold: and "
            "the test passed); inconclusive: the interval reaches beyond that; not tested: fewer "
            f"than 2 observations on a side, or a side's {RESOLUTION_UNKNOWN}; "
            f"{BEFORE_CORRECTION}: the interval (each metric's own, what 'no significant "
            "change' reads) excludes no change, but Holm's step-down over the family does not "
            f"pass; {ASSUMED_ONLY}: Holm's step-down passes at the allowance assumed (no "
            "earlier run measured this host's run-to-run variation) but not at the larger one "
            "a regression must hold at as well",
            "could detect: the smallest change that would be called a regression about 80% of "
            "the time, were it the only one in its family (from this data's spread); would "
            "settle it: the repetitions a run, or runs a side, that would show the metric "
            f"within ±{100 * c.threshold:.0f}% 80% of the time, were it unchanged (at most "
            f"{MAX_REPETITIONS} repetitions)",
        ],
    )
    order = {v: i for i, v in enumerate(VERDICTS)}
    for ch in sorted(c.changes, key=lambda ch: (not ch.headline, order[ch.verdict])):
        j = ch.judged
        est, low, high = change_text(ch)
        t.rows.append(
            [
                platform_label(c, ch.platform),
                ch.workload,
                str(ch.instances),
                f"{ch.name} ({ch.unit}) {'↑' if ch.higher_is_better else '↓'}",
                with_ci(ch.a, not ch.signed),
                with_ci(ch.b, not ch.signed),
                est,
                f"{low} … {high}",
                f"{j.p_holm:.2g}" if math.isfinite(j.p_holm) else "n/a",
                f"{100 * j.detectable:.1f}%" if math.isfinite(j.detectable) else "n/a",
                to_settle(c, ch),
                "yes" if ch.headline else "",
                ch.verdict + _mark(ch),
            ]
        )
        t.row_kinds.append(ch.verdict.replace(" ", "-"))
    return t


def _mark(ch: MetricChange) -> str:
    """What a line's verdict leaves out that its interval shows: " (significant only before
    Holm's correction)", " (significant only at the assumed allowance)"."""
    j = ch.judged
    marks = [
        m
        for m, on in ((BEFORE_CORRECTION, j.before_correction), (ASSUMED_ONLY, j.assumed_only))
        if on
    ]
    return f" ({'; '.join(marks)})" if marks else ""


def _outcome(c: Comparison) -> str:
    """The gate's answer, first: what the exit code says, in words none of the lines under it
    contradicts."""
    n = len(c.family(True))
    heads = f"{n} headline metric{'s' * (n != 1)}"
    family = (
        f"Holm's step-down over the {heads}: family-wise error ≤ {c.alpha}; "
        f"threshold {100 * c.threshold:.0f}%"
    )
    if c.regressions:
        return f"fail: {len(c.regressions)} of {heads} regressed ({family})"
    each = "the" if n == 1 else "each of the"
    if not c.unsettled and c.assumed:
        k = len(c.assumed)
        return (
            f"pass: no regression, and {each} {heads} within ±{100 * c.threshold:.0f}% or "
            f"significantly better, but not settled: {k if k < n else 'all'} of them at the "
            f"assumed run-to-run allowance of {_pct(c.allowance.value)}, not measured; "
            f"{_unguarded(c)} ({family})"
        )
    if not c.unsettled:
        return (
            f"pass: no regression, and {each} {heads} settled: "
            f"within ±{100 * c.threshold:.0f}%, or significantly better ({family})"
        )
    inconclusive = [ch for ch in c.unsettled if ch.verdict != Reading.NOT_TESTED]
    untested = len(c.unsettled) - len(inconclusive)
    parts = []
    if inconclusive:
        worse = [ch for ch in inconclusive if ch.better < 0 and _mark(ch)]
        parts.append(
            f"{len(inconclusive)} inconclusive"
            + (
                f" ({len(worse)} of them worse, but {_mark(worse[0])[2:-1]})"
                if len(worse) == 1
                else f" ({len(worse)} of them worse, but not past Holm's correction or at the "
                "assumed allowance only)"
                if worse
                else ""
            )
        )
    if untested:
        parts.append(f"{untested} not tested")
    return (
        f"undecided: no regression shown, but of the {heads} "
        f"{' and '.join(parts)}: a change beyond ±{100 * c.threshold:.0f}% is not ruled out "
        f"({family})"
    )


def _cannot_gate(c: Comparison) -> str | None:
    """Said at once where the data could not have settled some metric even unchanged: "one run
    a side cannot show a change under 5% for 2 of 4 headline metrics on this host: 3 runs a side
    can (or 12 repetitions a run)"."""
    stuck = c.cannot_gate
    if not stuck:
        return None
    n = len(c.family(True))
    runs = [r for ch in stuck if (r := ch.judged.runs) is not None]
    need_runs = (
        f"{max(runs)} runs a side can"
        if len(runs) == len(stuck)
        else f"not even {MAX_RUNS} runs a side"
    )
    reps = [r for ch in stuck if (r := ch.judged.repetitions) is not None]
    have = f"{len(c.a)} runs a side" if c.by_run else "one run a side"
    if not c.by_run and len(reps) == len(stuck):
        need_runs += f" (or {max(reps)} repetitions a run, one run a side)"
    a = c.allowance
    source = {
        RUNS: "from the runs' spread",
        SAME_RUN: "from the repetitions' spread alone",
        OPTION: f"run-to-run allowance {_pct(a.value)} given",
        ASSUMED: f"run-to-run allowance {_pct(a.value)} assumed",
        MEASURED: f"run-to-run allowance measured from {len(a.runs)} earlier runs",
    }[a.source]
    return (
        f"{have} cannot show a change under {100 * c.threshold:.0f}% for {len(stuck)} of "
        f"{n} headline metric{'s' * (n != 1)} on this host ({source}): {need_runs}"
    )


def summary_lines(c: Comparison) -> list[str]:
    """Plain-words outcome: the gate's answer first (``_outcome``), what the data cannot decide
    and what would, platforms that ran differently in A and B, then each headline regression,
    what is inconclusive or untested (and what would settle it), the other metrics, and what
    one observation was."""
    others = c.family(False)
    level = _level(c)
    out = [_outcome(c)]
    if (line := _cannot_gate(c)) is not None:
        out.append(line)
    out += [
        f"{platform_label(c, p)}: ran differently in A and B, so its changes measure that too"
        for p in _ran_apart(c)
    ]
    out += [
        f"{workload}: A and B did different work ({what}), so its changes measure that too"
        for workload, what in c.work_apart.items()
    ]
    for ch in c.regressions:
        est, low, high = change_text(ch)
        out.append(
            f"regression: {_where(c, ch)}: {est.lstrip('+-')} "
            f"{'lower' if ch.change < 0 else 'higher'} ({level}% CI {low} … {high}, Holm p = "
            f"{ch.judged.p_holm:.2g})"
        )
    for ch in c.unsettled:
        why = to_settle(c, ch)
        if ch.verdict == Reading.NOT_TESTED:
            what = (
                RESOLUTION_UNKNOWN
                if min(ch.judged.ratio.n_a, ch.judged.ratio.n_b) >= 2
                else "fewer than 2 observations on a side"
            )
            out.append(f"not tested: {_where(c, ch)}: {what}; would test it: {why}")
            continue
        _, low, high = change_text(ch)
        j = ch.judged
        raw = (
            f"; {'worse' if ch.better < 0 else 'better'}, {BEFORE_CORRECTION} (p = "
            f"{j.ratio.p_value:.2g}, Holm p = {j.p_holm:.2g})"
            if j.before_correction
            else ""
        )
        if j.assumed_only:
            raw += (
                f"; {'worse' if ch.better < 0 else 'better'}, {ASSUMED_ONLY} of "
                f"{_pct(ch.allowance)} (Holm p = {j.p_holm:.2g}), not at "
                f"{_pct(c.allowance.alarm or 0.0)}: measure this host's ({FEWEST} or more "
                "earlier runs of the study)"
            )
        out.append(
            f"inconclusive: {_where(c, ch)}: between {low} and {high}{raw}; could detect "
            f"{100 * j.detectable:.1f}%; would settle it: {why}"
        )
    worse = [ch for ch in others if ch.verdict == REGRESSION]
    if others:
        out.append(
            f"{len(worse)} of {len(others)} other metrics significantly worse (not gating; "
            "Holm's step-down over them)"
            + (": " + ", ".join(_where(c, ch) for ch in worse) if worse else "")
        )
    improvements = sum(ch.verdict == IMPROVEMENT for ch in c.changes)
    if improvements:
        out.append(f"{improvements} significant improvement(s)")
    out.append(observations(c))
    if c.only_a or c.only_b:
        out.append(f"not compared: {len(c.only_a)} metric(s) only in A, {len(c.only_b)} only in B")
    return out
