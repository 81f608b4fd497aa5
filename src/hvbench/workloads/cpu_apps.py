"""cpu, suite ``apps``: real programs from Debian doing a fixed amount of work, HEP-SPEC06's way.

HEP-SPEC06 runs C++ applications from SPEC CPU2006, one copy per core, all started together, and
scores each by reference time over measured time. SPEC is licensed; these are programs from
Debian main with a fixed job each, chosen for what they exercise:

=========  ====================================  =============================================
program    the job (at ``scale: 1``)             why
=========  ====================================  =============================================
povray     POV-Ray's benchmark scene (HS06 has   floating point: ray-object intersections,
           povray), rendered at 80x80 pixels     media and photons, deep C++ call chains
stockfish  ``bench`` over its 47 positions, 500k  integer, branchy: alpha-beta search with hard
           nodes each (one thread)               to predict branches, NNUE in SIMD integers
xz         ``xz -6`` of the generated corpus,    memory latency: LZMA's binary-tree match
           twice                                 finder walks an 8 MiB window (cache and TLB
                                                 misses, nested paging's cost)
zstd       ``zstd -3`` of the corpus, 500 times  streaming: memory bandwidth and the read and
                                                 write system calls of a fast compressor
sqlite     ``sqlite3`` building a 200 000-row    pointer chasing and malloc-heavy code (B-tree
           table, indexes, joins, group-bys,     inserts, index lookups, sorts), like HS06's
           updates; 18 rounds                    omnetpp and xalancbmk
aes        ``openssl speed -evp aes-256-gcm``,   crypto instructions (AES-NI, PCLMULQDQ): a CPU
           16 KiB blocks, 20 s                   model that hides them runs generic code
sha256     ``openssl speed -evp sha256``, 20 s   SHA extensions or AVX2, as above
=========  ====================================  =============================================

The corpus is a CSV table of orders (dates, names, cities, products, amounts) generated in the
instance from a fixed linear congruential sequence by ``hvbench-corpus`` (corpus.c, a static
helper like the clock): byte for byte the rows of the sqlite job's table as ``sqlite3`` prints
them, which made it before at 2-4 s a sample in a guest under TCG. Every platform compresses the
same bytes with no data shipped. Each program runs for 14-35 s natively at ``scale: 1`` (openssl
for 20 s); ``scale`` multiplies every job (pixels, nodes, bytes, rows, seconds), which is why it
is part of the label: jobs of different sizes are different cells.

``openssl speed`` has no fixed-work mode: it runs for a fixed time and counts the blocks it
processed. ``-elapsed`` makes it divide by wall-clock time, not its CPU time, so time stolen
from the instance counts against the platform as it does for the others; its rate is its count
over its time. It is the one program whose duration does not grow on a slow platform.

Fixed work takes as long as the platform needs: in a QEMU guest with TCG the programs ran 6 to 20
times slower than natively on the 2-core development host (POV-Ray 20 times, its floating point
going through soft-float helpers; openssl's crypto 25 to 80 times, in its fixed time), so
timeouts allow for that, and ``skip`` leaves a program out where a study cannot afford it.

Dropped: 7-Zip's benchmark sizes its work from a CPU frequency it measures first (not fixed
work; LZMA is here through xz); x264 and ffmpeg bring ~160-235 MB of libraries into every guest
image; gcc needs its whole toolchain and headers, which the initramfs image has not, and
compiling is measured by kernbench in a full root filesystem.

Like HS06, one copy runs per vCPU (``copies`` overrides), all started together right after the
barrier by one shell inside the instance, each timed by ``hvbench-clock`` (clock.c: monotonic,
to the nanosecond, with the clock's effective resolution and the copy's CPU time), the same
static binary natively and in every guest. A program's metric is its throughput summed over the
copies (work units per second), with the smallest change the clock can show as its resolution;
the composite, computed by the analysis step, is the geometric mean of the programs'
throughputs each divided by the baseline platform's. The per-copy timings stay in the raw
output.

How much work: ``scale: auto`` (the default) sizes each program's job at the start of a run,
natively on the host, so that it lasts ``target_seconds`` (1.5 s) there, as pyperf calibrates
its loops: a job far shorter than a second is timed by its start-up and its clock, not by its
work. The sizes chosen (``work``) are stored with the run and its cells: every platform, and the
run when resumed, does the same work, and ``compare`` says when two runs did not. A fixed
``scale`` or ``work`` pins the work instead (across hosts, for instance).
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from hvbench.errors import InstanceError
from hvbench.workloads.base import (
    Context,
    Metric,
    Outcome,
    ParseError,
    TimedJob,
    WorkloadSettings,
)
from hvbench.workloads.clock import FINE_ENOUGH_S, Timing, clock, parse_timing
from hvbench.workloads.common import (
    SMALL_COMMAND_S,
    ScratchWorkload,
    combined,
    keep,
    number,
    run,
    search,
)
from hvbench.workloads.helpers import static_helper
from hvbench.workloads.sizing import AUTO_TARGET_S, size_to_last

if TYPE_CHECKING:
    from hvbench.drivers.base import Instance

QUICK_SCALE = 0.02
"""``--quick``: a fiftieth of each job, under a second per program natively: a smoke run."""
AUTO_DATA_SCALE = 0.1
"""``scale: auto`` works on a tenth of the data (a 1.2 MiB corpus, 20 000 rows a round): it
fits the caches of any server as it does a guest's, and the work grows by passes and rounds."""
CALIBRATION_START_SCALE = 0.005
"""The scale of the first job calibration times, where the job's size follows the scale."""
START_OVERHEAD_S = 1.0
"""Start-up per program, for estimates (POV-Ray's is 2 s: it parses the scene and shoots
photons whatever the image size)."""
SLOWEST_PLATFORM = 150.0
"""How much slower than native a platform may run fixed work before a sample counts as hung:
QEMU's TCG ran the programs up to 20 times slower, and a busy host makes that three times worse."""

MIB = 1 << 20
POVRAY_SCENE = "/usr/share/doc/povray/examples/advanced/benchmark"
"""benchmark.pov and benchmark.ini, from Debian's povray-examples."""
SQLITE3 = "/usr/bin/sqlite3"
CORPUS = "corpus.csv"
CORPUS_ROWS = 200_000
"""Rows of the corpus at ``scale: 1`` (11.6 MiB of CSV); smaller below it."""
SQLITE_SCRIPT = "round.sql"

COPIES_SCRIPT = r"""
cd "$1" || exit 1
copies=$2
clock=$3
cmd=$4
i=0
while [ "$i" -lt "$copies" ]; do
    "$clock" "copy$i.time" sh -c "$cmd" > "copy$i.out" 2>&1 &
    i=$((i + 1))
done
wait
i=0
while [ "$i" -lt "$copies" ]; do
    echo "=== copy $i: $(cat "copy$i.time")"
    tail -n 60 "copy$i.out"
    i=$((i + 1))
done
"""
"""Start ``copies`` copies of a shell command at once in directory $1, each timed by
hvbench-clock ($3), then print each copy's timing line (exit status, monotonic start and end,
the clock's resolution, CPU time, context switches) and the tail of its output."""

_COPY = re.compile(r"^=== copy (\d+): (.*)$", re.MULTILINE)


class Copy(NamedTuple):
    """One copy of a program: how hvbench-clock timed it and the tail of its output."""

    timing: Timing
    output: str

    @property
    def seconds(self) -> float:
        return self.timing.seconds

    @property
    def cpu_seconds(self) -> float:
        return self.timing.cpu_seconds


# the generated table -----------------------------------------------------------------------

_M, _A, _C = 1 << 31, 1103515245, 12345
"""A linear congruential generator (glibc's constants); each row takes three steps. corpus.c
holds the same constants and word lists."""
_A2, _C2 = _A * _A % _M, (_A * _C + _C) % _M
_A3, _C3 = _A2 * _A % _M, (_A2 * _C + _A * _C + _C) % _M
_SEED = 20240601


def _words(text: str) -> str:
    return "'[" + ",".join(f'"{w}"' for w in text.split()) + "]'"


_FIRST = _words(
    "Anna Ben Chloe David Emma Felix Grace Hugo Ines Jonas Karin Luca Mia Noah Olga Paul"
)
_LAST = _words("Meyer Rossi Dubois Novak Jensen Garcia Smith Kowalski Silva Horvat Nagy Berg")
_CITY = _words("Geneva Lyon Milano Zurich Hamburg Praha Wien Madrid Lisboa Oslo")
_PRODUCT = _words(
    "cable adapter battery monitor keyboard mouse laptop printer router switch camera speaker"
)


def orders_sql(rows: int) -> str:
    """A SELECT of ``rows`` generated orders: the same rows wherever the same sqlite3 runs, and
    the rows hvbench-corpus (corpus.c) writes as the compressors' corpus."""
    return f"""WITH RECURSIVE r(i, a, b, c) AS (
  SELECT 1, {_SEED}, {(_SEED * _A + _C) % _M}, {(_SEED * _A2 + _C2) % _M}
  UNION ALL
  SELECT i + 1, (c * {_A} + {_C}) % {_M}, (c * {_A2} + {_C2}) % {_M}, (c * {_A3} + {_C3}) % {_M}
  FROM r WHERE i < {rows}
), f(i, u, v, w) AS (SELECT i, a >> 15, b >> 15, c >> 15 FROM r)
SELECT i AS id,
  date('2020-01-01', '+' || (u % 1461) || ' days') AS day,
  json_extract({_FIRST}, '$[' || (v % 16) || ']') || ' '
    || json_extract({_LAST}, '$[' || (v / 16 % 12) || ']') AS customer,
  json_extract({_CITY}, '$[' || (v / 192 % 10) || ']') AS city,
  json_extract({_PRODUCT}, '$[' || (w % 12) || ']') AS product,
  1 + w / 12 % 9 AS qty,
  (u * 65536 + w) % 250000 AS cents,
  CASE (u + v) % 7 WHEN 0 THEN 'returned' WHEN 1 THEN 'pending' ELSE 'shipped' END AS status,
  1 + (v * 65536 + u) % {rows} AS ref
FROM f"""


def sqlite_round_sql(rows: int) -> str:
    """One round of the sqlite job: build, index, query, change and drop a table of orders.
    Query results go to /dev/null; the rows of each round are tallied for SQLITE_TALLY."""
    return f""".output /dev/null
CREATE TABLE IF NOT EXISTS tally(n INTEGER);
CREATE TABLE orders(id INTEGER PRIMARY KEY, day TEXT, customer TEXT, city TEXT,
  product TEXT, qty INTEGER, cents INTEGER, status TEXT, ref INTEGER);
INSERT INTO orders {orders_sql(rows)};
INSERT INTO tally SELECT count(*) FROM orders;
CREATE INDEX orders_city ON orders(city, day);
CREATE INDEX orders_customer ON orders(customer, cents);
SELECT city, product, count(*), sum(qty * cents) FROM orders
  GROUP BY city, product ORDER BY 4 DESC LIMIT 1;
SELECT count(*), sum(b.cents) FROM orders a JOIN orders b ON b.id = a.ref WHERE b.city = a.city;
UPDATE orders SET status = 'archived' WHERE day < '2021-01-01';
DELETE FROM orders WHERE status = 'returned';
SELECT customer, count(*), max(cents) FROM orders GROUP BY customer ORDER BY 2 DESC LIMIT 1;
DROP TABLE orders;
.output stdout
"""


SQLITE_TALLY = "SELECT 'rounds', count(*), sum(n) FROM tally;"
"""The last statement of the sqlite job: rounds run and rows inserted."""


# programs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What one copy of a program does."""

    command: list[str]
    """The copy's command line, run in the scratch directory."""
    units: float
    """Work units the copy must complete (pixels, nodes, bytes, rows; 0 where counted)."""
    discard_stdout: bool = False
    """Send the program's stdout to /dev/null (compressed data), not to the copy's output."""


@dataclass(frozen=True)
class Program(ABC):
    """One program of the suite. Its job has one size, an integer (an image's side, nodes per
    position, passes over the corpus, rounds, seconds), set by ``scale`` or by calibration;
    the data it works on (the corpus, a round's rows) is set by the data scale alone."""

    key: ProgramKey
    metric: str
    unit: str
    path: str
    """The program, by absolute path: a guest's busybox has applets of the same name (xz), and
    Debian puts stockfish in /usr/games. Guest images copy the host's file to the same path."""
    native_seconds: float
    """One copy's wall time at ``scale: 1`` natively on a quiet 2-core development VM, for
    estimates and for the warning about short jobs (measured at ``scale: 0.1`` by
    ``bench/cpu_apps.py``, its CPU share under load taken out)."""

    start_seconds: float = START_OVERHEAD_S
    """Start-up whatever the job's size, for estimates."""
    fixed_time: ClassVar[bool] = False
    """The job runs for its size in seconds and counts its work (openssl speed)."""

    @property
    def tools(self) -> tuple[str, ...]:
        """What the instance must have to run it."""
        return (self.path,)

    def prepare(self, instance: Instance, scratch: str, data_scale: float) -> None:  # noqa: B027
        """Untimed set-up in the scratch directory (optional)."""

    @abstractmethod
    def size_at(self, scale: float) -> int:
        """The job's size at a scale (1: 14-35 s natively)."""

    @abstractmethod
    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        """The fixed job of this size."""

    @abstractmethod
    def rate(self, output: str, seconds: float, job: Job) -> float:
        """One copy's throughput from the tail of its output and its wall time."""

    def first_size(self) -> int:
        """The job calibration times first: well under a second natively on any host."""
        return self.size_at(CALIBRATION_START_SCALE)

    def estimate(self, scale: float) -> float:
        return self.native_seconds * scale + self.start_seconds

    def throughput(self, report: str, copies: int, job: Job) -> tuple[float, float]:
        """The instance's throughput, the sum of its copies' rates from COPIES_SCRIPT's report,
        and the smallest change of it the clock can show."""
        try:
            found = parse_copies(report, copies)
            rates = [(self.rate(c.output, c.seconds, job), c.timing) for c in found]
        except ParseError as e:
            raise ParseError(f"cpu apps {self.key}: {e}") from None
        return sum(r for r, _ in rates), sum(t.rate_resolution(r) for r, t in rates)


def _side(scale: float) -> int:
    return max(4, round(80 * math.sqrt(scale)))


@dataclass(frozen=True)
class Povray(Program):
    def prepare(self, instance: Instance, scratch: str, data_scale: float) -> None:
        if not instance.exec(
            ["test", "-r", f"{POVRAY_SCENE}/benchmark.pov"], timeout=SMALL_COMMAND_S
        ).ok:
            raise InstanceError(
                f"{instance.name}: POV-Ray's benchmark scene {POVRAY_SCENE}/benchmark.pov is "
                "missing on the host (./setup.sh --with-tools installs povray-examples)"
            )

    def size_at(self, scale: float) -> int:
        return _side(scale)

    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        argv = [
            self.path,
            f"{POVRAY_SCENE}/benchmark.ini",
            f"+I{POVRAY_SCENE}/benchmark.pov",
            f"+W{size}",
            f"+H{size}",
            "+WT1",
            "-D",
        ]
        return Job(argv, size * size)

    def rate(self, output: str, seconds: float, job: Job) -> float:
        return parse_povray(output, int(job.units)) / seconds


def parse_povray(text: str, pixels: int) -> int:
    """The pixels POV-Ray says it rendered, checked against the image size."""
    search(r"^POV-Ray finished", text, "POV-Ray's end of render")
    done = re.findall(r"Rendered (\d+) of (\d+) pixels", text)
    if not done:
        raise ParseError("POV-Ray printed no 'Rendered N of M pixels' line")
    rendered, total = (int(x) for x in done[-1])
    if rendered != total or total != pixels:
        raise ParseError(f"POV-Ray rendered {rendered} of {total} pixels, expected {pixels}")
    return rendered


@dataclass(frozen=True)
class Stockfish(Program):
    def size_at(self, scale: float) -> int:
        return max(1000, round(500_000 * scale))

    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        # bench TT-MiB threads limit positions limit-type
        return Job([self.path, "bench", "16", "1", str(size), "default", "nodes"], 0)

    def rate(self, output: str, seconds: float, job: Job) -> float:
        return parse_stockfish(output) / seconds


def parse_stockfish(text: str) -> int:
    """Nodes searched, from the summary of ``bench`` (a node limit makes it deterministic)."""
    m = search(r"^Nodes searched\s*:\s*(\d+)\s*$", text, "stockfish bench's 'Nodes searched'")
    nodes = int(m.group(1))
    if nodes <= 0:
        raise ParseError("stockfish bench searched no nodes")
    return nodes


@dataclass(frozen=True)
class Compressor(Program):
    """Compresses the corpus ``passes`` times (more passes above ``scale: 1``, a smaller corpus
    below it), the compressed stream going to /dev/null."""

    options: tuple[str, ...] = ()
    passes: int = 1

    @property
    def tools(self) -> tuple[str, ...]:
        return (self.path, str(corpus_maker()))

    def size_at(self, scale: float) -> int:
        return max(1, round(self.passes * max(1.0, scale)))

    def first_size(self) -> int:
        return 1

    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        argv = [self.path, *self.options, "-c", *[CORPUS] * size]
        return Job(argv, size * corpus_bytes, discard_stdout=True)

    def rate(self, output: str, seconds: float, job: Job) -> float:
        if output.strip():
            raise ParseError(f"{self.key} complained: {output.strip().splitlines()[-1][:160]}")
        return job.units / MIB / seconds


@dataclass(frozen=True)
class Sqlite(Program):
    def prepare(self, instance: Instance, scratch: str, data_scale: float) -> None:
        script = sqlite_round_sql(sqlite_rows(data_scale)).encode()
        run(instance, ["sh", "-c", 'cat > "$1"', "sh", f"{scratch}/{SQLITE_SCRIPT}"], 60, script)

    def size_at(self, scale: float) -> int:
        return max(1, round(18 * max(1.0, scale)))

    def first_size(self) -> int:
        return 1

    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        reads = [f".read {SQLITE_SCRIPT}"] * size
        return Job(
            [self.path, "-bail", ":memory:", *reads, SQLITE_TALLY], size * sqlite_rows(data_scale)
        )

    def rate(self, output: str, seconds: float, job: Job) -> float:
        return parse_sqlite(output, int(job.units)) / seconds


def sqlite_rows(data_scale: float) -> int:
    return max(1000, round(200_000 * data_scale))


def parse_sqlite(text: str, rows: int) -> int:
    """Rows inserted over every round, from the tally, checked against the job's."""
    m = search(r"^rounds\|(\d+)\|(\d+)$", text, "sqlite3's tally of rounds and rows")
    if int(m.group(2)) != rows:
        raise ParseError(f"sqlite3 inserted {m.group(2)} rows in {m.group(1)} rounds, not {rows}")
    return rows


@dataclass(frozen=True)
class OpensslSpeed(Program):
    """Fixed time, counted work: see the module docstring."""

    algorithm: str = ""
    fixed_time: ClassVar[bool] = True

    def size_at(self, scale: float) -> int:
        return max(1, round(20 * scale))

    def job(self, size: int, data_scale: float, corpus_bytes: int) -> Job:
        argv = [self.path, "speed", "-elapsed", "-mr", "-seconds", str(size)]
        return Job([*argv, "-bytes", "16384", "-evp", self.algorithm], 0)

    def rate(self, output: str, seconds: float, job: Job) -> float:
        return parse_openssl_speed(output, self.algorithm) / MIB

    def estimate(self, scale: float) -> float:
        return self.size_at(scale) + self.start_seconds


def parse_openssl_speed(text: str, algorithm: str) -> float:
    """Bytes per second from ``openssl speed -mr``: blocks counted, block size, seconds."""
    size = search(r"^\+DT:[^:]+:\d+:(\d+)$", text, f"openssl speed {algorithm} block size")
    m = search(r"^\+R:(\d+):([^:]+):([0-9.]+)$", text, f"openssl speed {algorithm} result")
    if m.group(2).lower() != algorithm.lower():
        raise ParseError(f"openssl speed measured {m.group(2)}, not {algorithm}")
    seconds = number(m.group(3), f"openssl speed {algorithm} seconds")
    if seconds <= 0 or int(m.group(1)) <= 0:
        raise ParseError(f"openssl speed {algorithm}: no blocks in {seconds} s")
    return int(m.group(1)) * int(size.group(1)) / seconds


PROGRAMS: tuple[Program, ...] = (
    Povray("povray", "cpu.apps.povray.pixels_per_s", "pixels/s", "/usr/bin/povray", 35, 2),
    Stockfish("stockfish", "cpu.apps.stockfish.nodes_per_s", "nodes/s", "/usr/games/stockfish", 25),
    Compressor(
        "xz", "cpu.apps.xz.mib_per_s", "MiB/s", "/usr/bin/xz", 14, options=("-6", "-T1"), passes=2
    ),
    Compressor(
        "zstd",
        "cpu.apps.zstd.mib_per_s",
        "MiB/s",
        "/usr/bin/zstd",
        32,
        options=("-3", "-q"),
        passes=500,
    ),
    Sqlite("sqlite", "cpu.apps.sqlite.rows_per_s", "rows/s", SQLITE3, 19),
    OpensslSpeed(
        "aes", "cpu.apps.aes.mib_per_s", "MiB/s", "/usr/bin/openssl", 20, algorithm="aes-256-gcm"
    ),
    OpensslSpeed(
        "sha256", "cpu.apps.sha256.mib_per_s", "MiB/s", "/usr/bin/openssl", 20, algorithm="sha256"
    ),
)
SUB_SCORES: tuple[str, ...] = tuple(p.metric for p in PROGRAMS)
"""The metrics whose normalised geometric mean is the composite cpu score."""


def parse_copies(text: str, copies: int) -> list[Copy]:
    """Each copy from COPIES_SCRIPT's report; a copy that failed fails the program with its
    last words."""
    heads = list(_COPY.finditer(text))
    if [int(m.group(1)) for m in heads] != list(range(copies)):
        raise ParseError(f"expected reports of {copies} copies, found {len(heads)}")
    found = []
    for m, end in zip(heads, [*(h.start() for h in heads[1:]), len(text)], strict=True):
        output = text[m.end() : end].strip("\n")
        timing = parse_timing(m.group(2), f"copy {m.group(1)}")
        if timing.status != 0:
            last = " | ".join(output.splitlines()[-2:])[:160]
            raise ParseError(
                f"copy {m.group(1)} exited with {timing.status}: {last or '(no output)'}"
            )
        found.append(Copy(timing, output))
    return found


ProgramKey = Literal["povray", "stockfish", "xz", "zstd", "sqlite", "aes", "sha256"]
"""The keys of PROGRAMS, for the ``skip`` setting."""


class CpuAppsSettings(WorkloadSettings):
    name: Literal["cpu"]
    suite: Literal["apps"] = "apps"
    copies: PositiveInt | None = None
    """Copies of each program; default: one per vCPU of the instance, as HS06 runs one per core."""
    scale: PositiveFloat | Literal["auto"] = "auto"
    """Size of every program's job: 1 is 14-35 s natively, 0.1 a tenth of that; ``auto``: each
    program's job sized at the start of the run so that it lasts ``target_seconds`` natively
    on this host (``work``)."""
    target_seconds: float = Field(default=AUTO_TARGET_S, ge=1.0)
    """With ``scale: auto``: how long each program's job lasts natively (a second at least, so
    that the clock's millisecond is a thousandth of it)."""
    work: dict[ProgramKey, PositiveInt] = Field(default_factory=dict)
    """Each program's job size (an image's side in pixels, nodes per position, passes over the
    corpus, rounds, seconds), overriding ``scale``: what ``scale: auto`` chose for a run, stored
    with its cells; written in a study, it pins the work across runs and hosts."""
    skip: tuple[ProgramKey, ...] = ()
    """Programs left out, with their metrics: where a short study cannot afford one (POV-Ray's
    parse and photon pass alone take about a minute in a TCG guest)."""

    @model_validator(mode="after")
    def _some_program_left(self) -> CpuAppsSettings:
        if set(self.skip) >= {p.key for p in PROGRAMS}:
            raise ValueError("skip leaves no program to run; remove some of its entries")
        return self

    @property
    def data_scale(self) -> float:
        """The scale of the data the programs work on: the corpus and a round's rows."""
        return AUTO_DATA_SCALE if self.scale == "auto" else min(1.0, self.scale)

    def calibrates(self) -> bool:
        wanted = {p.key for p in PROGRAMS} - set(self.skip)
        return self.scale == "auto" and not wanted <= set(self.work)

    def label(self) -> str:
        parts = ["cpu apps"]
        if self.scale != "auto":
            parts.append(f"scale={self.scale:g}")
        elif self.target_seconds != AUTO_TARGET_S:
            parts.append(f"target={self.target_seconds:g}s")
        if self.copies is not None:
            parts.append(f"copies={self.copies}")
        if self.skip:
            parts.append(f"skip={','.join(sorted(set(self.skip)))}")
        return " ".join(parts)


class CpuApps(ScratchWorkload[CpuAppsSettings]):
    name: ClassVar[str] = "cpu"
    tool: ClassVar[str | None] = "apps"
    selector: ClassVar[str] = "suite"
    settings_model = CpuAppsSettings

    def __init__(self, settings: CpuAppsSettings) -> None:
        super().__init__(settings)
        self.programs = [p for p in PROGRAMS if p.key not in settings.skip]
        self._corpus: dict[str, int] = {}
        """Per instance name: bytes of the corpus made in prepare (0 without compressors)."""

    def tools(self) -> list[str]:
        return sorted({str(clock()), *(t for p in self.programs for t in p.tools)})

    def _data_scale(self, quick: bool) -> float:
        return min(self.settings.data_scale, QUICK_SCALE) if quick else self.settings.data_scale

    def size(self, program: Program, quick: bool) -> int:
        """The program's job size: ``--quick``'s, pinned or calibrated ``work``, or ``scale``'s."""
        s = self.settings
        if quick:
            return program.size_at(QUICK_SCALE if s.scale == "auto" else min(s.scale, QUICK_SCALE))
        if program.key in s.work:
            return s.work[program.key]
        if s.scale == "auto":
            raise ValueError(f"cpu apps: {program.key}'s work was not calibrated")
        return program.size_at(s.scale)

    def prepare(self, instance: Instance, ctx: Context) -> None:
        """Untimed: what the programs need in the scratch directory, the corpus among it."""
        super().prepare(instance, ctx)
        data, scratch = self._data_scale(ctx.quick), self.scratch(instance)
        for program in self.programs:
            program.prepare(instance, scratch, data)
        compress = any(isinstance(p, Compressor) for p in self.programs)
        self._corpus[instance.name] = make_corpus(instance, scratch, data) if compress else 0

    def _native_seconds(self, program: Program, quick: bool) -> float:
        """About how long the program's job lasts natively, for estimates and timeouts."""
        s = self.settings
        if quick:
            return program.estimate(QUICK_SCALE)
        if s.scale == "auto" or program.key in s.work:
            return s.target_seconds + program.start_seconds
        return program.estimate(s.scale)

    def _run(self, instance: Instance, program: Program, job: Job, copies: int, quick: bool) -> str:
        """Every copy of one job, started at once and timed; the report of COPIES_SCRIPT."""
        argv = ["sh", "-c", COPIES_SCRIPT, "sh", self.scratch(instance), str(copies)]
        timeout = 60 + SLOWEST_PLATFORM * self._native_seconds(program, quick)
        return combined(run(instance, [*argv, str(clock()), _shell(job)], timeout))

    def measure(self, instance: Instance, ctx: Context) -> Outcome:
        copies = self.settings.copies or instance.vcpus
        data = self._data_scale(ctx.quick)
        outcome = Outcome()
        for program in self.programs:
            job = program.job(self.size(program, ctx.quick), data, self._corpus[instance.name])
            ctx.barrier()
            text = self._run(instance, program, job, copies, ctx.quick)
            outcome.raw.append(keep(program.path.rsplit("/", 1)[-1], job.command, text))
            rate, resolution = program.throughput(text, copies, job)
            outcome.metrics.append(
                Metric(
                    program.metric, rate, program.unit, True, composite=True, resolution=resolution
                )
            )
        return outcome

    def calibrate(self, instance: Instance, ctx: Context) -> CpuAppsSettings:
        """Each program's job sized to last ``target_seconds`` on ``instance`` (native), from
        a small job up (``sizing``); openssl speed runs for the target's seconds."""
        s = self.settings
        copies = s.copies or instance.vcpus
        work = dict(s.work)
        for program in self.programs:
            if program.key in work:
                continue
            if program.fixed_time:
                work[program.key] = math.ceil(s.target_seconds)
                continue
            timed = functools.partial(self._timed, instance, program, copies)
            work[program.key], _ = size_to_last(s.target_seconds, program.first_size(), timed)
        return s.model_copy(update={"work": work})

    def _timed(self, instance: Instance, program: Program, copies: int, size: int) -> float:
        """The shortest copy's wall time of one run of the program's job of this size (the
        probe of sizing)."""
        job = program.job(size, self._data_scale(quick=False), self._corpus[instance.name])
        text = self._run(instance, program, job, copies, quick=False)
        return min(c.seconds for c in parse_copies(text, copies))

    def estimate_seconds(self, quick: bool) -> float:
        return sum(self._native_seconds(p, quick) for p in self.programs)

    def fixed_time_seconds(self, quick: bool) -> float:
        """openssl speed's seconds: as long on every platform."""
        return sum(
            self._native_seconds(p, quick) - p.start_seconds for p in self.programs if p.fixed_time
        )

    def timed_jobs(self, quick: bool) -> list[TimedJob]:
        """Each program's job, start-up left out (calibrated ones last ``target_seconds``)."""
        fix = "scale: auto (each job sized to target_seconds natively) or a larger scale"
        return [
            TimedJob(p.key, self._native_seconds(p, quick) - p.start_seconds, FINE_ENOUGH_S, fix)
            for p in self.programs
        ]

    def timeout(self, quick: bool) -> float:
        """Fixed work takes as long as the platform needs: generous for a TCG guest."""
        return 120 + SLOWEST_PLATFORM * self.estimate_seconds(quick)


def corpus_maker() -> Path:
    """hvbench-corpus (corpus.c), built once into the image cache."""
    return static_helper("hvbench-corpus", "corpus.c")


def corpus_rows(data_scale: float) -> int:
    """Rows of the compressors' corpus at a data scale."""
    return max(1000, round(CORPUS_ROWS * data_scale))


def make_corpus(instance: Instance, scratch: str, data_scale: float) -> int:
    """Generate the compressors' corpus in the scratch directory; its size in bytes."""
    rows = corpus_rows(data_scale)
    argv = [str(corpus_maker()), str(rows), f"{scratch}/{CORPUS}"]
    made = run(instance, argv, timeout=60 + SLOWEST_PLATFORM * rows / 100_000).text()
    return int(search(r"^bytes=(\d+)$", made, "hvbench-corpus's bytes=N").group(1))


def _shell(job: Job) -> str:
    return shlex.join(job.command) + (" >/dev/null" if job.discard_stdout else "")
