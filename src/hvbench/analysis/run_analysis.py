"""A run, analysed: every figure the report shows, computed once from the store.

Rules the tables rely on (also in the report's footnotes):

- **single** is the per-instance figure: per repetition, the mean over the cell's instances;
  **aggregate** is their sum, for throughput metrics only (higher is better, not a percentage).
- A cell is compared with the **baseline** platform's cell of the same workload at the same
  instance count; if the baseline was not run at that count, with its highest count below it
  (native usually runs once, with the whole host), else its lowest. The ratio of their means
  and % of native carry Fieller's 95% interval (``normalize``); the baseline against itself is
  100%, exactly.
- The **cpu composite** (``cpu.composite.score``) is, per repetition and instance, the
  geometric mean of every higher-is-better metric of a ``cpu`` workload, each divided by the
  baseline's single-instance mean of that metric (sub-scores the baseline lacks or measured as
  0 are left out; without a baseline, the geometric mean of the raw values). A repetition whose
  sub-score is 0 or missing has no composite: a warning names it.
- **Scaling efficiency** at N instances is aggregate(N) / (N/m · aggregate(m)) with m the
  platform's smallest count: 100% means every added instance adds as much as the first.
- **Per host core** is the aggregate divided by the host cores busy during the sample
  (busy CPU seconds / wall seconds, from /proc/stat); the CPU a sample measures is that of the
  whole sample, so all metrics of one workload share it.
- A platform is shown by its **label**: its name, with the accelerator or mode that ran in
  brackets where the name does not say exactly that (``kvm-virtio [tcg]``; ``platforms.label``).
- A headline **disk figure above the baseline's** is not a win: a guest cannot beat the host's
  own path to the medium. It is flagged with its likely cause (the platform's disk path through
  the host page cache) or as suspect, and left out of the verdict (``platforms.above_baseline``).
- **Noise** (one table, worst first, with what to do): a headline figure with a CV above 10%,
  outlier repetitions, repetitions in two groups (bimodal: a busy host), steal time above 5% in
  any repetition, or an interval still wider than adaptive repetitions' target.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import yaml

from hvbench.analysis import claims
from hvbench.analysis.aggregate import (
    STARVED_RATIO,
    CellValues,
    Readings,
    cell_values,
    is_throughput,
    overcommit,
    percentile_shortfall,
    scaling,
)
from hvbench.analysis.cost import density, host_cpu_of
from hvbench.analysis.intervals import (
    BELOW_RESOLUTION,
    NOISY_CV,
    RESOLUTION_UNKNOWN,
    SampleSummary,
    mean_resolution,
    summarize_many,
)
from hvbench.analysis.model import (
    COMPOSITE,
    Density,
    HostCondition,
    HostCpu,
    MetricKey,
    MetricResult,
    Noise,
    RunAnalysis,
    Symmetry,
    pick_baseline_cell,
    skewed,
    steal_reps,
)
from hvbench.analysis.normalize import Normalized, normalize, reference, signed
from hvbench.analysis.platforms import above_baseline, platform_labels
from hvbench.analysis.profile import platform_profiles
from hvbench.analysis.ratios import Ratio, ratio, welch
from hvbench.analysis.settling import CI_TARGET, MAX_REPETITIONS, repetitions_for
from hvbench.analysis.stats import geometric_mean
from hvbench.analysis.trends import Trend, trends
from hvbench.errors import HvbenchError
from hvbench.store import (
    ADAPTIVE,
    AdaptiveRecord,
    CellView,
    FunctionView,
    HostCpuReading,
    MetricView,
    PlatformState,
    RunRecord,
    SampleView,
    Store,
)
from hvbench.store.ascent import AscentRecord, ascents_of

# --- building ------------------------------------------------------------------------------


def baseline_of(study_text: str, cells: Collection[CellView]) -> str | None:
    """The study's baseline, else the platform whose instances are the host itself, else None.

    Only the ``baseline`` key is read (the study was validated when the run started, and an
    old run must stay reportable after workloads or drivers have changed).
    """
    try:
        doc = yaml.safe_load(study_text)
    except yaml.YAMLError:
        doc = None
    named = doc.get("baseline") if isinstance(doc, dict) else None
    if isinstance(named, str) and any(c.platform == named for c in cells):
        return named
    return next((c.platform for c in cells if c.ran.bare), None)


_Key = tuple[int, str]
"""(cell id, metric name)."""


@dataclass
class _Metric:
    """One metric of one cell, as its rows stored it (or as the analysis made it)."""

    unit: str
    higher_is_better: bool
    declared: MetricView | None = None
    """A stored row of it: what its workload declared of it (headline, composite, direction);
    None for the figures the analysis makes (the composite)."""
    readings: Readings | None = None
    """Its numbers; None where its tool printed only text."""
    texts: set[str] = field(default_factory=set)
    """What its tool printed where it gave no number."""

    @classmethod
    def of(cls, rows: list[MetricView]) -> _Metric:
        first, numbers = rows[0], [m for m in rows if m.value is not None]
        readings = None
        if numbers:
            readings = Readings(
                np.array([m.repetition for m in numbers], dtype=float),
                np.array([m.instance for m in numbers], dtype=float),
                np.array([m.value for m in numbers], dtype=float),
                np.array([math.nan if m.resolution is None else m.resolution for m in numbers]),
            )
        texts = {m.text for m in rows if m.value is None and m.text}
        return cls(first.unit, bool(first.higher_is_better), first, readings, texts)

    @property
    def headline(self) -> bool | None:
        """The workload's own flag; None for runs stored before it existed."""
        return self.declared.headline if self.declared else None


_Grouped = dict[_Key, _Metric]
"""A run's metric rows, per (cell, metric), in the order they were first stored."""


def _grouped(rows: list[MetricView]) -> _Grouped:
    found: dict[_Key, list[MetricView]] = defaultdict(list)
    for m in rows:
        found[(m.cell_id, m.name)].append(m)
    return {key: _Metric.of(ms) for key, ms in found.items()}


def _composite_rows(
    grouped: _Grouped,
    cells: dict[int, CellView],
    baseline_means: dict[tuple[str, str], float],
    baseline: str | None = None,
    labels: dict[str, str] | None = None,
    without: dict[tuple[str, str, int], str] | None = None,
    titles: dict[str, str] | None = None,
) -> list[str]:
    """Add ``cpu.composite.score`` to every cpu cell: geometric mean of normalized sub-scores.

    Sub-scores the baseline did not measure (or measured as 0) are left out (they have nothing to
    be normalized by); without any baseline figures for the workload, the raw sub-scores are
    used. A repetition (and instance) with a sub-score of 0 or none has no composite, for a
    geometric mean cannot hold a zero. Returns one line per such gap: which sub-score, where,
    and why, so that no figure goes missing silently (platforms named by ``labels``, workloads
    by ``titles``); a cell
    left with no composite at all gets why in ``without`` (its verdict line says it).
    """
    by_cell: dict[int, list[str]] = defaultdict(list)
    for (cell_id, name), metric in grouped.items():
        if metric.declared is not None and metric.declared.composite:
            by_cell[cell_id].append(name)
    notes: list[str] = []
    labels, titles = labels or {}, titles or {}
    left_out: dict[str, set[str]] = defaultdict(set)
    for cell_id, names in by_cell.items():
        cell = cells[cell_id]
        base = {n: m for (w, n), m in baseline_means.items() if w == cell.workload}
        if base:
            left_out[cell.workload].update(n for n in names if n not in base)
            names = [n for n in names if n in base]
        table: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
        resolutions: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
        for name in names:
            if (r := grouped[(cell_id, name)].readings) is None:
                continue
            for rep, inst, value, q in zip(
                r.repetitions, r.instances, r.values, r.resolutions, strict=True
            ):
                table[(int(rep), int(inst))][name] = value
                resolutions[(int(rep), int(inst))][name] = q
        rows, row_resolutions = [], []
        gaps: dict[tuple[str, bool], list[tuple[int, int]]] = defaultdict(list)
        for (rep, inst), got in sorted(table.items()):
            zero = [f"{n} was {got[n]:g}" for n in names if n in got and not got[n] > 0]
            missing = [f"{n} has no value" for n in names if n not in got]
            if zero or missing:
                gaps[("; ".join(zero + missing), bool(zero))].append((rep, inst))
            else:
                score = geometric_mean([got[n] / base.get(n, 1.0) for n in names])
                rows.append((rep, inst, score))
                # a geometric mean moves by its mean relative move: its resolution is that of
                # the sub-scores, relative, averaged (NaN if one is unknown)
                row_resolutions.append(
                    score * np.mean([resolutions[(rep, inst)][n] / got[n] for n in names])
                )
        where = _cell_where(labels, titles, cell)
        notes += [
            f"{where}: {_composite_gap(cell, why, at, bool(rows))}" for why, at in gaps.items()
        ]
        if not rows and gaps and without is not None:
            without[(cell.platform, cell.workload, cell.instances)] = (
                f"no {COMPOSITE} in any repetition: "
                + "; ".join(
                    text + (" (a geometric mean cannot hold a value of 0 or less)" if zero else "")
                    for text, zero in gaps
                )
            )
        if rows:
            reps, insts, scores = np.array(rows, dtype=float).T
            made = Readings(reps, insts, scores, np.array(row_resolutions, dtype=float))
            grouped[(cell_id, COMPOSITE)] = _Metric(
                "×native" if base else "score", True, None, made
            )
    for workload, left in left_out.items():
        notes += [
            f"{workload}: {n} is left out of its {COMPOSITE}: {baseline} has no value of it above "
            "0 to normalize by"
            for n in sorted(left)
        ]
    return notes


def _composite_gap(
    cell: CellView, why: tuple[str, bool], at: list[tuple[int, int]], some_left: bool
) -> str:
    """One line: where a composite lost repetitions (or all of them) and which sub-score did it;
    ``why`` is the sub-scores' text and whether one of them was 0 (rather than missing)."""
    if not some_left:
        lost = f"no {COMPOSITE} at all (its % of the baseline reads n/a)"
    elif cell.instances > 1:
        lost = f"{COMPOSITE} leaves out (repetition, instance) " + ", ".join(
            f"({r}, {i})" for r, i in at
        )
    else:
        lost = f"{COMPOSITE} leaves out {_reps([r for r, _ in at])}"
    text, zero = why
    if zero:
        text += " (a geometric mean cannot hold a value of 0 or less)"
    return f"{lost}: {text}"


@dataclass(frozen=True)
class _Stored:
    """Everything the analysis reads of a run, read before any figure is computed."""

    run: RunRecord
    cells: dict[int, CellView]
    samples: list[SampleView]
    rows: list[MetricView]
    """The metric rows of the ok samples."""
    artifacts: dict[str, dict]
    commands: list[tuple[str, list]]
    functions: list[FunctionView]


def _load(store: Store, run_id: str) -> _Stored:
    run = store.run(run_id)
    cells = {c.id: c for c in store.cells(run.id)}
    if not cells:
        raise HvbenchError(f"run {run_id} has no cells yet; nothing to report")
    return _Stored(
        run,
        cells,
        store.samples(run.id),
        store.metric_rows(run.id),
        store.artifacts(run.id),
        store.commands(run.id),
        store.profile_functions(run.id),
    )


def analyse(store: Store, run_id: str) -> RunAnalysis:
    """Read a run from the store, then compute every figure of its report: the model is built
    in one step from what was read."""
    stored = _load(store, run_id)
    run, cells = stored.run, stored.cells
    baseline = baseline_of(run.study_text, cells.values())
    samples = _read_samples(stored.samples, cells)
    grouped = _grouped(stored.rows)
    labels, ran = platform_labels(cells.values())
    titles = _workload_titles(cells, grouped)
    without: dict[tuple[str, str, int], str] = {}
    composite_notes = _composite_rows(
        grouped,
        cells,
        _baseline_means(grouped, cells, baseline),
        baseline,
        labels,
        without,
        titles,
    )
    results = _results(grouped, cells, samples, baseline)
    noise, noisy_side = _noise(
        results, samples.host_cpu, AdaptiveRecord.from_json(stored.artifacts.get(ADAPTIVE))
    )
    analysis = RunAnalysis(
        run_id=run.id,
        study_name=run.study_name,
        status=run.status,
        created_at=run.created_at,
        finished_at=run.finished_at,
        hvbench_version=run.hvbench_version,
        git_commit=run.git_commit,
        options=dict(run.options or {}),
        inventory=run.inventory,
        artifacts=stored.artifacts,
        study_text=run.study_text,
        baseline=baseline,
        cells=list(cells.values()),
        platforms=list(dict.fromkeys(c.platform for c in cells.values())),
        results=results,
        host_cpu=samples.host_cpu,
        symmetry=_symmetry(results),
        failed=samples.failed,
        commands=_commands(stored.commands),
        text_only=_text_only(grouped, cells),
        rows=stored.rows,
        started=samples.started,
        warnings=composite_notes
        + _percentiles_left_out(grouped, cells)
        + _warnings(results, samples.failed, labels, titles),
        noise=noise,
        noisy_side=noisy_side,
        labels=labels,
        ran=ran,
        profiles=platform_profiles(stored.functions, cells),
        densities=_densities(ascents_of(stored.artifacts), cells, samples),
        conditions=HostCondition.of(run.inventory),
        missing=without,
        titles=titles,
    )
    analysis.claims = claims.judged(analysis)
    return analysis


def _densities(
    ascents: dict[str, AscentRecord], cells: dict[int, CellView], samples: _Samples
) -> list[Density]:
    """Each ascent's density, with the host CPU of its cells by instance count."""
    return [
        density(
            record,
            {
                c.instances: samples.host_cpu.get(c.id)
                for c in cells.values()
                if (c.platform, c.workload) == (record.platform, record.workload)
            },
        )
        for record in ascents.values()
    ]


@dataclass
class _Samples:
    """What a run's samples say beside their metrics."""

    states: dict[int, list[PlatformState]]
    """Cell id -> the platform state of each of its ok samples."""
    host_cpu: dict[int, HostCpu]
    failed: list[tuple[CellView, int, str]]
    started: dict[tuple[int, int], datetime]


def _read_samples(rows: list[SampleView], cells: dict[int, CellView]) -> _Samples:
    states: dict[int, list[PlatformState]] = defaultdict(list)
    cpu_samples: dict[int, list[tuple[int, HostCpuReading | None]]] = defaultdict(list)
    failed = []
    started = {}
    for s in rows:
        started[(s.cell_id, s.repetition)] = s.started_at
        if s.status != "ok":
            failed.append((cells[s.cell_id], s.repetition, s.error or "failed"))
            continue
        states[s.cell_id].append(s.platform_state)
        cpu_samples[s.cell_id].append((s.repetition, s.host_cpu))
    host_cpu = {cid: h for cid, v in cpu_samples.items() if (h := host_cpu_of(v)) is not None}
    return _Samples(states, host_cpu, failed, started)


def _baseline_means(
    grouped: _Grouped, cells: dict[int, CellView], baseline: str | None
) -> dict[tuple[str, str], float]:
    """(workload, metric) -> the baseline's single-instance mean of each sub-score of a
    composite: what the composite divides by."""
    means: dict[tuple[str, str], float] = {}
    if baseline is None:
        return means
    base_cells = [c for c in cells.values() if c.platform == baseline]
    for c in base_cells:
        if pick_baseline_cell(base_cells, c.workload, 1) is not c:
            continue
        for (cid, name), metric in grouped.items():
            row, r = metric.declared, metric.readings
            if cid != c.id or row is None or not row.composite or r is None:
                continue
            positive = r.values[r.values > 0]  # a 0 is no rate (and is warned of)
            if len(positive):
                means[(c.workload, name)] = float(np.mean(positive))
    return means


def _per_core(values: CellValues, throughput: bool, host_cpu: HostCpu | None) -> np.ndarray:
    """Each repetition's aggregate divided by the host cores busy during it."""
    if not throughput:
        return np.empty(0)
    cores = host_cpu.busy_cores if host_cpu is not None else {}
    return np.array(
        [
            x / cores[int(r)]
            for x, r in zip(values.aggregate, values.aggregate_reps, strict=True)
            if cores.get(int(r), 0) > 0
        ]
    )


@dataclass(frozen=True)
class _Figure:
    """A (cell, metric) with its values and summaries: what its ``MetricResult`` is built from
    once the figures that compare it with others (the baseline, its smallest count, the run's
    other headlines) are known."""

    cell: CellView
    name: str
    unit: str
    higher_is_better: bool
    throughput: bool
    values: CellValues
    single: SampleSummary
    aggregate: SampleSummary | None
    per_core_values: np.ndarray | None
    per_core: SampleSummary | None

    @property
    def single_values(self) -> np.ndarray:
        return self.values.single

    @property
    def aggregate_values(self) -> np.ndarray | None:
        return self.values.aggregate if self.throughput else None


def _results(
    grouped: _Grouped, cells: dict[int, CellView], samples: _Samples, baseline: str | None
) -> list[MetricResult]:
    """Every (cell, metric) with its values and summaries, the cell's metrics in the tools'
    order behind its composite, headlines marked; first every one's values, then all their summaries
    at once (bootstraps are batched), then what sets them against each other; each result is
    built once, with all of it."""
    figures = _figures(grouped, cells, samples)
    headlines = _headline_keys(figures, grouped)
    compared = _vs_baseline(figures, cells, baseline)
    suspects = above_baseline(
        {
            key: (f.cell, key in headlines, compared[key][0] if key in compared else None)
            for key, f in figures.items()
        }
    )
    efficiency = scaling(
        {key: (f.cell, f.aggregate.mean) for key, f in figures.items() if f.aggregate}
    )
    trend = _trends({key: figures[key].single_values for key in figures if key in headlines})
    results = []
    for key, f in figures.items():
        said = grouped[key].declared
        vs, aggregate_vs, cost = compared.get(key, (None, None, None))
        results.append(
            MetricResult(
                cell=f.cell,
                name=f.name,
                unit=f.unit,
                higher_is_better=f.higher_is_better,
                throughput=f.throughput,
                headline=key in headlines,
                composite=bool(said and said.composite),
                direction=said.direction if said else None,
                repetitions=f.values.reps,
                single_values=f.single_values,
                aggregate_values=f.aggregate_values,
                per_instance=f.values.per_instance,
                instance_cv=f.values.instance_cv(),
                starved=f.values.starved(f.higher_is_better),
                single=f.single,
                aggregate=f.aggregate,
                vs_baseline=vs,
                aggregate_vs_baseline=aggregate_vs,
                efficiency=efficiency.get(key),
                overcommit=overcommit(samples.states[f.cell.id]),
                per_core_values=f.per_core_values,
                per_core=f.per_core,
                cost_vs_baseline=cost,
                suspect=suspects.get(key),
                trend=trend.get(key),
                rotating=f.values.rotating(f.higher_is_better),
                every=f.values.table[np.isfinite(f.values.table)],
            )
        )
    return results


def _figures(
    grouped: _Grouped, cells: dict[int, CellView], samples: _Samples
) -> dict[_Key, _Figure]:
    """Each (cell, metric)'s values and summaries, in the results' order."""
    specs = []
    arrays: list[np.ndarray] = []
    resolutions: list[float | None] = []
    for (cid, name), metric in grouped.items():
        unit, hib, readings = metric.unit, metric.higher_is_better, metric.readings
        if readings is None or percentile_shortfall(name, cells[cid].instances):
            continue
        values = cell_values(readings, cells[cid].instances)
        res = cell_values(readings.of_resolutions(), cells[cid].instances)
        throughput = is_throughput(unit, hib) and len(values.aggregate) > 0
        host_cpu = samples.host_cpu.get(cid)
        per_core = _per_core(values, throughput, host_cpu)
        specs.append((cid, name, unit, hib, values, throughput, per_core))
        views = [(values.single, res.single)]
        views += [(values.aggregate, res.aggregate)] if throughput else []
        views += [(per_core, _per_core(res, throughput, host_cpu))]
        for x, q in views:
            if len(x):
                arrays.append(x)
                resolutions.append(mean_resolution(q))
    summaries = iter(summarize_many(arrays, resolutions))
    figures = [
        _Figure(
            cell=cells[cid],
            name=name,
            unit=unit,
            higher_is_better=hib,
            throughput=throughput,
            values=values,
            single=next(summaries),
            aggregate=next(summaries) if throughput else None,
            per_core_values=per_core if len(per_core) else None,
            per_core=next(summaries) if len(per_core) else None,
        )
        for cid, name, unit, hib, values, throughput, per_core in specs
    ]
    figures.sort(key=lambda f: (f.cell.id, f.name != COMPOSITE))  # stable: tool order
    return {(f.cell.id, f.name): f for f in figures}


def _workload_titles(cells: dict[int, CellView], grouped: _Grouped) -> dict[str, str]:
    """Each workload label's name in sentences and tables: its name and what it ran, "cpu (xz,
    aes)" for "cpu apps copies=1 skip=povray,sha256,sqlite,stockfish,zstd" (the apps of a
    suite of applications, from the metrics its cells stored), "disk (fio)" (its tool or
    suite); the label itself where two workloads would read the same."""
    apps: dict[str, list[str]] = defaultdict(list)
    for cid, name in grouped:
        parts = name.split(".")
        workload = cells[cid].workload
        if parts[:2] == ["cpu", "apps"] and len(parts) > 3 and parts[2] not in apps[workload]:
            apps[workload].append(parts[2])
    titles: dict[str, str] = {}
    for c in cells.values():
        settings = c.workload_settings
        what = ", ".join(apps[c.workload]) or settings.get("tool") or settings.get("suite")
        titles.setdefault(c.workload, f"{c.workload_name} ({what})" if what else c.workload_name)
    named = list(titles.values())
    return {w: t if named.count(t) == 1 else w for w, t in titles.items()}


def _percentiles_left_out(grouped: _Grouped, cells: dict[int, CellView]) -> list[str]:
    """Per workload and instance count, the percentiles over its instances that too few stand
    behind to be one (``aggregate.percentile_shortfall``), left out of the figures: "boot, 1
    instance: boot.storm.ready_p99_s not shown (a p99 needs 100 instances behind it, the cell
    has 1)"; at 1 instance such a figure repeats the instance's own."""
    short: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for cid, name in grouped:
        cell = cells[cid]
        if (why := percentile_shortfall(name, cell.instances)) is not None:
            short[(cell.workload, cell.instances)][name] = why
    return [
        f"{workload}, {count} instance{'s' * (count != 1)}: {', '.join(whys)} not shown "
        f"({'; '.join(whys.values())})"
        for (workload, count), whys in short.items()
    ]


def _text_only(grouped: _Grouped, cells: dict[int, CellView]) -> dict[MetricKey, str]:
    """What the tools printed for metrics that never had a number in their cell."""
    return {
        MetricKey(cells[cid].platform, cells[cid].workload, cells[cid].instances, name): " ".join(t)
        for (cid, name), metric in grouped.items()
        if metric.readings is None and (t := sorted(metric.texts))
    }


def _headline_names(grouped: _Grouped, cell_id: int, names: list[str]) -> set[str]:
    """The cpu composite stands for its cell (its sub-scores do not); the rest is the
    workloads' own flag. Runs stored before the flag existed get the rule that judged them
    then: every throughput metric, else the cell's first metric."""
    if COMPOSITE in names:
        return {COMPOSITE}
    metrics = [grouped[(cell_id, n)] for n in names]
    if any(m.headline is not None for m in metrics):
        return {n for n, m in zip(names, metrics, strict=True) if m.headline}
    throughput = [
        n for n, m in zip(names, metrics, strict=True) if is_throughput(m.unit, m.higher_is_better)
    ]
    return set(throughput or names[:1])


def _headline_keys(figures: dict[_Key, _Figure], grouped: _Grouped) -> set[_Key]:
    names: dict[int, list[str]] = defaultdict(list)
    for cid, name in figures:
        names[cid].append(name)
    return {(cid, n) for cid, ns in names.items() for n in _headline_names(grouped, cid, ns)}


def headline_singles(
    rows: list[MetricView], cells: dict[int, CellView]
) -> dict[tuple[int, str], np.ndarray]:
    """(cell id, headline metric) -> its per-instance figure in each repetition: what adaptive
    repetitions judge a cell's precision by. The cpu composite is the geometric mean of the raw
    sub-scores here; the baseline's means would scale it by a constant, which leaves its
    interval relative to its mean as it is."""
    grouped = _grouped(rows)
    _composite_rows(grouped, cells, {})
    names: dict[int, list[str]] = defaultdict(list)
    readings = {key: r for key, m in grouped.items() if (r := m.readings) is not None}
    for cid, name in readings:
        names[cid].append(name)
    return {
        (cid, name): cell_values(readings[(cid, name)], cells[cid].instances).single
        for cid, ns in names.items()
        for name in _headline_names(grouped, cid, ns)
    }


def _commands(commands: list[tuple[str, list]]) -> list[tuple[str, list[str]]]:
    """Each distinct (tool, argv) the run used, in order."""
    seen: dict[str, tuple[str, list[str]]] = {}
    for tool, command in commands:
        argv = [str(a) for a in command]
        seen.setdefault(" ".join(argv), (tool, argv))
    return list(seen.values())


def _vs_baseline(
    figures: dict[_Key, _Figure], cells: dict[int, CellView], baseline: str | None
) -> dict[_Key, tuple[Normalized | None, Normalized | None, Ratio | None]]:
    """Each figure that has a baseline cell to set it against: its single and aggregate
    figures against the baseline's, and the host CPU it spends per unit relative to it."""
    out: dict[_Key, tuple[Normalized | None, Normalized | None, Ratio | None]] = {}
    if baseline is None:
        return out
    base_cells = [c for c in cells.values() if c.platform == baseline]
    values: dict[str, list[np.ndarray]] = defaultdict(list)
    for f in figures.values():
        values[f.name].append(f.single_values)
    difference = {name: signed(name, *xs) for name, xs in values.items()}
    for key, r in figures.items():
        pick = pick_baseline_cell(base_cells, r.cell.workload, r.cell.instances)
        base = figures.get((pick.id, r.name)) if pick else None
        if base is None:
            continue
        vs = aggregate_vs = cost = None
        if base is r:
            vs = reference(r.single.n, difference[r.name], r.unit)
            if r.aggregate is not None:
                aggregate_vs = reference(r.aggregate.n)
        else:
            vs = normalize(
                r.single_values,
                base.single_values,
                r.higher_is_better,
                (base.single.resolution, r.single.resolution),
                difference[r.name],
                r.unit,
            )
            if (
                r.aggregate is not None
                and base.aggregate is not None
                and r.aggregate_values is not None
                and base.aggregate_values is not None
            ):
                aggregate_vs = normalize(
                    r.aggregate_values,
                    base.aggregate_values,
                    r.higher_is_better,
                    (base.aggregate.resolution, r.aggregate.resolution),
                )
        if (
            base is not r
            and r.per_core is not None
            and base.per_core is not None
            and r.per_core_values is not None
            and base.per_core_values is not None
            and r.per_core.mean > 0
        ):
            cost = ratio(
                r.per_core_values,
                base.per_core_values,
                resolutions=(r.per_core.resolution, base.per_core.resolution),
            )
        out[key] = (vs, aggregate_vs, cost)
    return out


def _trends(singles: dict[_Key, np.ndarray]) -> dict[_Key, Trend | None]:
    """Test each headline figure's repetitions, in the order they ran, for a trend; Holm's
    step-down over the run's headline figures keeps a run of clean cells from being flagged
    more than ``ALPHA`` of the time, however many it has."""
    return dict(zip(singles, trends(list(singles.values())), strict=True))


def _symmetry(results: list[MetricResult]) -> list[Symmetry]:
    """Pair each cell's inbound throughput metrics with their outbound twins, as the workloads
    declared them (``Metric.direction``: names that differ only in that word)."""
    outbound = {(r.cell.id, r.name): r for r in results if r.direction == "outbound"}
    out = []
    for r in results:
        if r.direction != "inbound" or not r.throughput:  # retransmits, %CPU: not a speed
            continue
        o = outbound.get((r.cell.id, r.name.replace("inbound", "outbound")))
        if o is None or r.single.mean <= 0 or o.single.mean <= 0:
            continue
        ratio = o.single.mean / r.single.mean
        p = welch(r.single_values, o.single_values)
        gap = 1 - min(ratio, 1 / ratio)
        out.append(Symmetry(r.cell, r, o, ratio, gap, p))
    return out


def _cell_where(labels: dict[str, str], titles: dict[str, str], cell: CellView) -> str:
    """ "kvm / cpu (xz, aes) / 1 inst.": a cell as warnings name it, for people."""
    platform, workload = labels.get(cell.platform, cell.platform), titles.get(cell.workload)
    return f"{platform} / {workload or cell.workload} / {cell.instances} inst."


def _where(labels: dict[str, str], titles: dict[str, str], r: MetricResult) -> str:
    return f"{_cell_where(labels, titles, r.cell)} / {r.name}"


def _reps(reps: list[int]) -> str:
    return f"repetition{'s' * (len(reps) > 1)} {', '.join(map(str, reps))}"


def _noise(
    results: list[MetricResult], host_cpu: dict[int, HostCpu], adaptive: AdaptiveRecord | None
) -> tuple[list[Noise], int]:
    """Headline figures whose noise a reader must know of, worst first, with what would help;
    and how many side figures are noisy too. Adaptive repetitions that stopped short of their
    target are the runner's record (artifact ``adaptive``)."""
    target = adaptive.ci_target if adaptive else CI_TARGET
    short = set(adaptive.short) if adaptive else set()
    out: list[Noise] = []
    side = 0
    for r in results:
        s = r.single
        reasons = []
        if s.noisy:
            reasons.append(f"CV above {100 * NOISY_CV:.0f}%")
        if s.bimodal:
            reasons.append(_two_groups(r))
        if s.outliers:
            vals = ", ".join(f"{r.single_values[i]:.4g}" for i in s.outliers)
            reasons.append(f"outlier repetition{'s' * (len(s.outliers) > 1)}: {vals}")
        if r.trend is not None and r.trend.flagged:
            t = r.trend
            slope, tau = (
                f"{x:+.{d}f}".replace("-", "−") for x, d in ((100 * t.slope, 1), (t.tau, 2))
            )
            reasons.append(
                f"trend over the {s.n} repetitions in the order they ran: {slope}% a "
                f"repetition (Kendall's τ {tau}, Holm p {t.p_holm:.2g})"
            )
        if not r.headline:
            side += bool(reasons)
            continue
        coarse = s.resolution / 2 / abs(s.mean) if s.resolution and s.mean else 0.0
        if s.identical == BELOW_RESOLUTION and coarse > target:  # finer ones do no harm
            reasons.append(
                f"repetitions {BELOW_RESOLUTION}: ±{100 * coarse:.2g}% from it alone, more "
                f"than the ±{100 * target:g}% aimed at"
            )
        elif s.identical == RESOLUTION_UNKNOWN:
            reasons.append(s.identical)
        if steal := steal_reps(host_cpu, r.cell.id):
            reasons.append(
                f"steal time up to {100 * max(steal.values()):.0f}% of the host's CPU "
                f"({_reps(sorted(steal))})"
            )
        stopped = adaptive.stopped_by if adaptive and r.cell.key in short else None
        if stopped and s.ci_half_width > target:
            reasons.append(
                f"95% CI ±{100 * s.ci_half_width:.1f}% after {s.n} repetitions, target "
                f"±{100 * target:g}% (adaptive {stopped} reached)"
            )
        if reasons:
            out.append(Noise(r, reasons, _advice(r, host_cpu, target, stopped)))
    out.sort(key=lambda x: -x.result.single.cv if math.isfinite(x.result.single.cv) else 0.0)
    return out, side


def _two_groups(r: MetricResult) -> str:
    """ "1 of 5 repetitions 30% below the others": the smaller group against the larger."""
    s = r.single
    few = r.single_values[list(s.bimodal)]
    rest = np.delete(r.single_values, list(s.bimodal))
    rel = float(np.median(few) / np.median(rest) - 1) if np.median(rest) else math.nan
    side = "below" if rel < 0 else "above"
    return f"bimodal: {len(few)} of {s.n} repetitions {100 * abs(rel):.0f}% {side} the others"


def _advice(
    r: MetricResult, host_cpu: dict[int, HostCpu], target: float, stopped_by: str | None
) -> str:
    """A quieter host when some repetitions were disturbed or when the noise is too large for
    repetitions to reach the target within ``MAX_REPETITIONS``; else more repetitions.
    ``stopped_by`` is what ended this cell's adaptive repetitions short of the target."""
    s = r.single
    if r.trend is not None and r.trend.flagged:
        return (
            "a steadier host: the figure drifted as the run went on, so its mean depends on "
            "when the run stopped and more repetitions will not settle it; look for what "
            "changed (frequency scaling or throttling, a cache or page cache warming up, other "
            "load), add an untimed warm-up pass, and compare the first repetitions with the last"
        )
    if s.identical == RESOLUTION_UNKNOWN:
        return (
            "a workload that states its resolution (Metric.resolution), or a longer job whose "
            "repetitions its measurement can tell apart"
        )
    if s.identical:
        return (
            "a longer job: its measurement cannot tell the repetitions apart, so more of them "
            "will not narrow the interval; more work per repetition (or a finer clock) will"
        )
    if skewed(r, host_cpu) and not steal_reps(host_cpu, r.cell.id) and _faster_apart(r):
        return (
            "not a busier host, which makes no repetition faster: the repetitions that stand "
            "apart ran faster than the rest; noise with heavier tails than normal (which the "
            "outlier and bimodal rules assume) flags such a one, or it did less work or found "
            f"something warm (check its output); read the median ({r.single.median:.4g}) "
            "rather than the mean"
        )
    if steal_reps(host_cpu, r.cell.id):
        return (
            "a quieter host: some repetitions ran on a busier host than the rest (steal by a "
            "hypervisor below); compare the median with the mean"
        )
    if skewed(r, host_cpu):  # slower apart, and nothing measured says the host was busier
        return (
            "the median, and another run if it recurs: the repetitions that stand apart ran "
            "slower than the rest, as on a busier host (other load), but nothing measured "
            "says the host was busier, and noise with heavier tails than normal flags a clean "
            "cell so too (5–12% of them at 10 repetitions); compare the median with the mean"
        )
    need = repetitions_for(s.cv, target)
    goal = f"±{100 * target:g}%"
    if need <= s.n:
        return (
            f"none for the mean (±{100 * s.ci_half_width:.1f}%); a quieter host for steadier runs"
        )
    if need > MAX_REPETITIONS:
        return f"a quieter host: {goal} would take about {need} repetitions"
    hint = {
        "max_repetitions": f" (adaptive max_repetitions: {need})",
        "budget_minutes": " (a larger adaptive budget_minutes)",
    }.get(stopped_by or "", "")
    return f"more repetitions: about {need} for {goal}{hint}"


def _faster_apart(r: MetricResult) -> bool:
    """The repetitions that stand apart (outliers, the smaller group of a bimodal cell) all ran
    better than the median of the others, in the metric's direction: what a busier host, other
    load or steal, cannot do."""
    s = r.single
    apart = sorted(set(s.outliers) | set(s.bimodal))
    rest = float(np.median(np.delete(r.single_values, apart)))
    better = r.single_values[apart] > rest if r.higher_is_better else r.single_values[apart] < rest
    return bool(better.all())


def _warnings(
    results: list[MetricResult],
    failed: list[tuple[CellView, int, str]],
    labels: dict[str, str],
    titles: dict[str, str],
) -> list[str]:
    """Starved instances (of headline figures) and failed samples, one line each; noise is in
    ``RunAnalysis.noise``."""
    out = []
    for r in results:
        if not r.headline:
            continue
        where = _where(labels, titles, r)
        for inst, st in r.starved.items():
            ratio = f"{st.share:.2f}×" if r.higher_is_better else f"{1 / st.share:.2f}× (↓)"
            out.append(
                f"{where}: instance {inst} is starved: {ratio} the other instances' "
                f"median in {st.behind} of {st.of} repetitions (CV across instances "
                f"{100 * r.instance_cv:.0f}%); the mean per instance hides it"
            )
        if r.rotating is not None:
            behind, of = r.rotating
            out.append(
                f"{where}: an instance is starved in {behind} of {of} repetitions, not "
                f"the same one in most (below {STARVED_RATIO}× the other instances' median; "
                f"CV across instances {100 * r.instance_cv:.0f}%); the mean per instance hides "
                "it: look for what the host gives one guest at a time (CPU pinning, an "
                "interrupt's CPU, a scheduler's victim)"
            )
    for cell, rep, error in failed:
        out.append(f"{_cell_where(labels, titles, cell)}: repetition {rep} failed: {error}")
    return out
