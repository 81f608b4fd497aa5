"""Study files: load and validate the YAML, and expand it into the matrix of cells.

Every error names the file, the line, the field, what was expected and what was found, in one
line, because a study is written by hand and a traceback helps nobody.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    StrictBool,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import ErrorDetails

from hvbench.claim_schema import ALL, Claim, ClaimModel
from hvbench.drivers import DRIVERS, PlatformSettings, driver_class
from hvbench.errors import StudyError
from hvbench.metrics import DIFFERENCES
from hvbench.units import unit_scale
from hvbench.workloads import WORKLOADS, selector, workload_class, workload_of
from hvbench.workloads.base import Workload, WorkloadSettings
from hvbench.workloads.produces import match, produced

PLATFORM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
SHORT_JOB_S = 0.5
"""A timed job shorter than this natively is warned about at the start of a run."""
MIN_TICKS = 100
"""... and so is one shorter than this many ticks of its clock."""
MAX_VALUES = 10_000
"""Values a study may expand to, aliases followed: a hand-written study has a few hundred; an
alias bomb (nine levels of nine aliases) has 9^9, which would keep validation busy for ever."""


class Adaptive(BaseModel):
    """Repeat a cell past ``repetitions`` while the 95% CI of one of its headline metrics is
    wider than ``ci_target``, or it has fewer than 5 repetitions (a narrow interval at 3 is often
    luck: stopping there lowers its coverage), within ``max_repetitions`` and ``budget_minutes``
    of extra time: never unbounded. A cell that stops short of the target is named in the
    report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ci_target: PositiveFloat = 0.03
    """Half-width of the CI relative to the mean: 0.03 means ±3%."""
    max_repetitions: PositiveInt = 10
    budget_minutes: PositiveFloat = 30.0


class StudyModel(BaseModel):
    """The top level of a study file; platforms and workloads are checked by their own models."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    baseline: str | None = None
    platforms: dict[str, Any] = Field(min_length=1)
    workloads: list[Any] = Field(min_length=1)
    instances: list[PositiveInt] = Field(default=[1], min_length=1)
    repetitions: PositiveInt = 3
    adaptive: Adaptive | None = None
    profile: StrictBool = False
    """Record a host-wide profile (Linux perf, cpu-clock) during each sample's measured window:
    the report shows each platform's top functions."""
    expect: list[Any] = []
    """Claims the run is judged against (``analysis.claims``), checked by ``_claims``."""


@dataclass(frozen=True)
class Cell:
    """One (platform, workload, instance count) point of the matrix."""

    platform: str
    workload_index: int
    workload: str
    instances: int

    @property
    def key(self) -> str:
        return f"{self.platform}|{self.workload}|{self.instances}"


@dataclass
class Study:
    """A validated study: typed platform and workload settings, ready to expand. What it asks
    of a host, and how long it takes there, is ``hvbench.plan``'s."""

    name: str
    description: str
    baseline: str | None
    platforms: dict[str, PlatformSettings]
    workloads: list[WorkloadSettings]
    instances: list[int]
    repetitions: int
    adaptive: Adaptive | None
    text: str
    source: str
    profile: bool = False
    """Profile the host during each sample's measured window (``hvbench.host.profile``)."""
    claims: list[Claim] = field(default_factory=list)
    """What the study expects (``expect:``), each checked against what it produces."""

    def workload(self, index: int) -> Workload:
        return workload_of(self.workloads[index])

    def quickened(self) -> Study:
        """The study a ``--quick`` run measures: each workload in its quick form."""
        return replace(self, workloads=[w.quick() for w in self.workloads])

    def without(self, names: Collection[str]) -> Study:
        """The study with the platforms ``names`` left out, from its workloads' lists too: a
        study of its own, its text the one a run stores."""
        data = yaml.safe_load(self.text)
        data["platforms"] = {k: v for k, v in data["platforms"].items() if k not in names}
        for workload in data["workloads"]:
            if "platforms" in workload:
                workload["platforms"] = [p for p in workload["platforms"] if p not in names]
        return parse_study(yaml.safe_dump(data, sort_keys=False), self.source)

    def calibrated(self, chosen: dict[int, dict]) -> Study:
        """The study with the settings a run's calibration chose for some of its workloads
        (by index), stored with the run as JSON."""
        workloads = [
            type(w).model_validate(chosen[i]) if i in chosen else w
            for i, w in enumerate(self.workloads)
        ]
        return replace(self, workloads=workloads)

    def counts(
        self, platform: str, workload: WorkloadSettings | None = None, ascents: bool = True
    ) -> list[int]:
        """Instance counts of a platform (for one workload, or all of its workloads). The
        platform's own list wins, then the counts the workload's settings make (consolidation's
        sets, or the steps of its ascent; only the first with ``ascents=False``), then its
        driver's default (native runs once), then the workload's list, then the study's."""
        settings = self.platforms[platform]
        if workload is not None and not workload.runs_on(platform):
            return []
        if settings.instances:
            return list(settings.instances)
        if workload is None:
            return sorted({n for w in self.workloads for n in self.counts(platform, w, ascents)})
        ascent = workload.ascent()
        if ascent is not None:
            return ascent.counts if ascents else ascent.counts[:1]
        if (count := workload.instance_count()) is not None:
            return [count]
        default = DRIVERS[settings.driver].default_instances
        if default is not None:
            return list(default)
        return list(workload.instances or self.instances)

    def reference(self) -> str | None:
        """The platform the others are measured against: the baseline, else the first native one
        (as the analysis takes it), else None."""
        native = (p for p, settings in self.platforms.items() if settings.driver == "native")
        return self.baseline or next(native, None)

    def ignored_counts(self) -> list[str]:
        """One line for each platform that runs its driver's default count (native runs one
        instance, the host itself) where the study lists others for its workloads, which would
        otherwise pass unseen; the reference runs it by design, so it is not named."""
        out = []
        for name, settings in self.platforms.items():
            default = DRIVERS[settings.driver].default_instances
            if default is None or settings.instances or name == self.reference():
                continue
            listed = sorted(
                {
                    n
                    for w in self.workloads
                    if w.runs_on(name) and w.ascent() is None and w.instance_count() is None
                    for n in w.instances or self.instances
                }
            )
            if listed and listed != sorted(default):
                runs = ", ".join(str(n) for n in default)
                out.append(
                    f"platform {name}: runs {runs} instance(s), the {settings.driver} driver's "
                    f"default, not the study's counts {listed}; to run those, give the platform "
                    f"instances: {listed}"
                )
        return out

    def cells(self) -> list[Cell]:
        """Every cell, grouped as the runner boots them: platform, then count, then workload."""
        return [
            Cell(p, i, w.label(), n)
            for p in self.platforms
            for n in self.counts(p)
            for i, w in enumerate(self.workloads)
            if n in self.counts(p, w)
        ]

    def short_jobs(self, quick: bool) -> list[str]:
        """The timed jobs that will last under SHORT_JOB_S natively, or under MIN_TICKS ticks of
        their clock, one line each with the fix: their figures would measure start-up and the
        clock as much as the work. A ``--quick`` run is a smoke run and says so instead."""
        out = []
        for index, settings in enumerate(self.workloads):
            for job in self.workload(index).timed_jobs(quick):
                floor = max(SHORT_JOB_S, MIN_TICKS * job.clock_s)
                if job.native_seconds < floor:
                    out.append(
                        f"{settings.label()}: {job.what} lasts about {job.native_seconds:.2g} s "
                        f"natively, under the {floor:g} s a job needs ({SHORT_JOB_S:g} s, and "
                        f"{MIN_TICKS} ticks of its {_tick(job.clock_s)} clock): start-up and the "
                        f"clock weigh on its figures; {job.fix}"
                    )
        return out


# --- loading -------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Hashable, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        self.key, self.line = key, line


def _tick(seconds: float) -> str:
    """A clock's resolution in words: 1 ms, 10 ms, 1 µs."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:g} {unit}"
    return f"{seconds * 1e9:g} ns"


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """Nodes in the document once every alias is expanded, counted over the composed graph
    (each node once, so a bomb is measured without being expanded); a node that contains
    itself counts as too large."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        return MAX_VALUES + 1
    open_.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    total = 1
    for child in children:
        total += _expanded_size(child, sizes, open_)
        if total > MAX_VALUES:
            break
    open_.discard(key)
    sizes[key] = total
    return total


FieldPath = tuple[str | int, ...]
"""Where a value is in the study: its keys and list indexes from the top."""


def _line_index(
    node: yaml.Node | None, path: FieldPath = (), out: dict[FieldPath, int] | None = None
) -> dict[FieldPath, int]:
    """Map each path in the document (keys and list indexes) to its 1-based line."""
    out = {} if out is None else out
    if node is None:
        return out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            out[(*path, key)] = k.start_mark.line + 1
            _line_index(v, (*path, key), out)
            out[(*path, key)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_index(v, (*path, i), out)
    return out


class _Located:
    """Formats errors as ``file:line: field: expected ..., found ...``."""

    def __init__(self, source: str, lines: dict[FieldPath, int]) -> None:
        self.source, self.lines = source, lines

    def line(self, path: FieldPath) -> int:
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return 1

    def error(self, path: FieldPath, message: str) -> StudyError:
        field = ".".join(str(p) for p in path) or "(top level)"
        return StudyError(f"{self.source}:{self.line(path)}: {field}: {message}")

    def from_validation(
        self, exc: ValidationError, prefix: FieldPath = (), model: type[BaseModel] | None = None
    ) -> StudyError:
        err = exc.errors(include_url=False)[0]
        loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
        message = _describe(err)
        if err["type"] == "extra_forbidden" and len(loc) == 1 and isinstance(model, type):
            message += f"; known settings: {', '.join(model.model_fields)}"
        return self.error((*prefix, *loc), message)


def _quoted(value: object) -> str:
    """What the study holds where it is wrong, within one line's room (a file that is not a
    study at all would otherwise be quoted whole)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    short.maxlist = short.maxdict = 6
    return short.repr(value)


def _describe(err: ErrorDetails) -> str:
    kind, found = err["type"], err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown setting; found {_quoted(found)} (remove it or check its spelling)"
    if kind == "missing":
        return "required setting is missing"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}, found {_quoted(found)}"
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        sign = ">" if kind == "greater_than" else ">="
        return f"expected a number {sign} {bound}, found {_quoted(found)}"
    if kind == "string_too_short":
        return f"expected a non-empty text, found {_quoted(found)}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s), found {_quoted(found)}"
    if kind == "value_error":
        return f"expected {ctx.get('error', err['msg'])}, found {_quoted(found)}"
    expected = err["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    return f"expected {expected}, found {_quoted(found)}"


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; raise StudyError with one clear line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise StudyError(f"{path}: cannot read the study: {e.strerror}") from None
    return parse_study(text, str(path))


def parse_study(text: str, source: str) -> Study:
    """Validate study text (from a file, the package or the store)."""
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        if node is not None and _expanded_size(node, {}, set()) > MAX_VALUES:
            raise StudyError(
                f"{source}:1: the document expands to more than {MAX_VALUES} values through "
                "YAML aliases (an alias bomb?); write the study out without nested aliases"
            )
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except _DuplicateKey as e:
        raise StudyError(f"{source}:{e.line}: {e.key}: duplicate key; each key once") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(e, "problem", None) or str(e)
        raise StudyError(f"{source}:{line}: YAML syntax: {problem}") from None
    loc = _Located(source, _line_index(node))
    if not isinstance(data, dict):
        raise loc.error(
            (), f"expected a mapping with name, platforms, workloads; found {_quoted(data)}"
        )
    try:
        top = StudyModel.model_validate(data)
    except ValidationError as e:
        raise loc.from_validation(e, model=StudyModel) from None

    platforms = {name: _platform(loc, name, raw) for name, raw in top.platforms.items()}
    workloads = [_workload(loc, i, raw) for i, raw in enumerate(top.workloads)]
    labels = [w.label() for w in workloads]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            raise loc.error(("workloads", i), f"duplicate workload {label!r}; list each once")
    baseless: set[int] = set()
    """Workloads the baseline's driver cannot do (snapshot on native): they need not run on it."""
    for i, w in enumerate(workloads):
        workload = workload_class(w.name, getattr(w, selector(w.name), None))(w)
        operation, plan = workload.operation, workload.plan()
        base = platforms.get(top.baseline or "")
        if operation is None:
            continue
        if base is not None and base.refuses(operation):
            baseless.add(i)
        for name, settings in platforms.items():
            if not w.runs_on(name):
                continue
            why = settings.refuses(operation) or (plan and settings.refuses_plan(plan))
            if why:
                raise loc.error(
                    ("workloads", i, "name"),
                    f"{w.name} cannot run on platform {name}: {why}; "
                    "take one of the two out of the study",
                )
    if len(set(top.instances)) != len(top.instances):
        raise loc.error(("instances",), f"duplicate instance counts, found {top.instances}")
    for i, w in enumerate(workloads):
        if w.instances is not None and len(set(w.instances)) != len(w.instances):
            raise loc.error(("workloads", i, "instances"), f"duplicate counts, found {w.instances}")
        unknown = [name for name in w.platforms or () if name not in platforms]
        if unknown:
            raise loc.error(
                ("workloads", i, "platforms"),
                f"expected names of the study's platforms {list(platforms)}, found {unknown}",
            )
        if top.baseline in platforms and not w.runs_on(top.baseline) and i not in baseless:
            raise loc.error(
                ("workloads", i, "platforms"),
                f"expected the baseline {top.baseline!r} among them, found {w.platforms}: "
                "its figures are divided by the baseline's",
            )
    if top.adaptive is not None and top.adaptive.max_repetitions < top.repetitions:
        raise loc.error(
            ("adaptive", "max_repetitions"),
            f"expected at least repetitions ({top.repetitions}), "
            f"found {top.adaptive.max_repetitions}",
        )
    if top.baseline is not None and top.baseline not in platforms:
        raise loc.error(
            ("baseline",),
            f"expected one of the platforms {list(platforms)}, found {top.baseline!r}",
        )
    study = Study(
        name=top.name,
        description=top.description,
        baseline=top.baseline,
        platforms=platforms,
        workloads=workloads,
        instances=list(top.instances),
        repetitions=top.repetitions,
        adaptive=top.adaptive,
        text=text,
        source=source,
        profile=top.profile,
    )
    study.claims = [_claim(loc, study, i, raw) for i, raw in enumerate(top.expect)]
    return study


def _claim(loc: _Located, study: Study, index: int, raw: Any) -> Claim:
    """One claim of ``expect:``, refused where it names what the study does not produce: a
    platform, a workload, a metric of it, an instance count, a unit of another kind."""
    path = ("expect", index)
    if not isinstance(raw, dict):
        raise loc.error(
            path,
            "expected a mapping such as {workload: boot, metric: boot.ready_s, at_most: 60s}, "
            f"found {raw!r}",
        )
    try:
        claim = Claim.of(ClaimModel.model_validate(raw))
    except ValidationError as e:
        raise loc.from_validation(e, path, ClaimModel) from None
    if claim.platform != ALL and claim.platform not in study.platforms:
        raise loc.error(
            (*path, "platform"),
            f"expected {ALL!r} or one of the study's platforms {list(study.platforms)}, "
            f"found {claim.platform!r}",
        )
    named = [w for w in study.workloads if claim.workload in (w.name, w.label())]
    labels = [w.label() for w in study.workloads]
    if len(named) != 1:
        what = "one of" if not named else "one of them by its label, of"
        raise loc.error(
            (*path, "workload"),
            f"expected {what} the study's workloads {labels}, found {claim.workload!r}",
        )
    (workload,) = named
    runs = [p for p in study.platforms if study.counts(p, workload)]
    if claim.platform != ALL and claim.platform not in runs:
        raise loc.error(
            (*path, "platform"),
            f"expected a platform that runs {workload.label()} {runs}, found {claim.platform!r}",
        )
    metrics = produced(workload)
    pattern = match(claim.metric, metrics)
    if pattern is None:
        raise loc.error(
            (*path, "metric"),
            f"expected a metric {workload.label()} produces {list(metrics)}, "
            f"found {claim.metric!r}",
        )
    unit = metrics[pattern]
    if claim.of_native:
        base = study.reference()
        if base is None or claim.platform == base:
            raise loc.error(
                (*path, "platform"),
                "a bound in % is a share of the baseline's figure: expected a platform other "
                f"than the baseline ({base}), found {claim.platform!r}",
            )
        if claim.metric in DIFFERENCES or unit == "%":
            why = "it is itself in %" if unit == "%" else "it can be below 0"
            raise loc.error(
                path,
                f"{claim.metric} has no % of native ({why}): bound it with a number in its "
                f"unit ({unit})",
            )
    elif claim.unit is not None and unit is not None:
        mine, theirs = unit_scale(claim.unit), unit_scale(unit)
        if mine is None or theirs is None or mine.kind != theirs.kind:
            raise loc.error(
                path,
                f"the bound is in {claim.unit}, {claim.metric} in {unit}: expected a bound in "
                f"a unit of that kind, or a bare number in {unit}",
            )
    if claim.instances is not None:
        counts = sorted(
            {n for p in runs for n in study.counts(p, workload) if claim.platform in (ALL, p)}
        )
        if claim.instances not in counts:
            raise loc.error(
                (*path, "instances"),
                f"expected one of the counts {workload.label()} runs at {counts}, "
                f"found {claim.instances}",
            )
    return claim


def _platform(loc: _Located, name: Any, raw: Any) -> PlatformSettings:
    path = ("platforms", name)
    if not isinstance(name, str) or not PLATFORM_NAME.match(name):
        raise loc.error(path, f"expected a name of a-z, 0-9, '-', '_' (at most 32), found {name!r}")
    if not isinstance(raw, dict):
        raise loc.error(path, f"expected a mapping with a driver, found {raw!r}")
    driver = raw.get("driver")
    if driver not in DRIVERS:
        raise loc.error((*path, "driver"), f"expected one of {sorted(DRIVERS)}, found {driver!r}")
    model = driver_class(raw).settings_model
    try:
        settings = model.model_validate(raw)
    except ValidationError as e:
        raise loc.from_validation(e, path, model) from None
    if settings.instances is not None and len(set(settings.instances)) != len(settings.instances):
        raise loc.error((*path, "instances"), f"duplicate counts, found {settings.instances}")
    return settings


def _workload(loc: _Located, index: int, raw: Any) -> WorkloadSettings:
    path = ("workloads", index)
    if not isinstance(raw, dict):
        raise loc.error(path, f"expected a mapping such as {{name: cpu}}, found {raw!r}")
    name = raw.get("name")
    if name not in WORKLOADS:
        raise loc.error((*path, "name"), f"expected one of {sorted(WORKLOADS)}, found {name!r}")
    classes, key = WORKLOADS[name], selector(name)
    choice = raw.get(key)
    if choice is not None and choice not in classes:
        choices = sorted(t for t in classes if t)
        raise loc.error((*path, key), f"expected one of {choices}, found {choice!r}")
    cls = workload_class(name, choice)
    try:
        return TypeAdapter(cls.settings_model).validate_python(raw)
    except ValidationError as e:
        raise loc.from_validation(e, path, cls.settings_model) from None


def default_study_text() -> str:
    return resources.files("hvbench").joinpath("default_study.yaml").read_text()


def default_study() -> Study:
    """The packaged default study, every platform in it (the run leaves out those this host
    cannot run, saying so)."""
    return parse_study(default_study_text(), "default study")
