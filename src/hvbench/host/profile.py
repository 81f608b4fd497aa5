"""A host-wide profile of a sample's measured window: which functions the host's CPUs ran (the
hypervisor's, the guests' vCPU threads, the kernel's), sampled by Linux perf on cpu-clock, the
software clock every host has (this project's machines have no hardware counters).

perf is started before the window with its events off, and the window's ends switch them on and
off through perf's control pipe (a write and an acknowledgement, a few milliseconds): perf's
start-up (reading every process's memory maps) and its report (resolving symbols) fall outside
the window, and inside it perf costs FREQUENCY_HZ interrupts a second per CPU, about 18 µs each
on this project's VMs: 0.2% of each CPU (``bench/profile_overhead.py``).

Where perf is missing or not allowed to profile the whole host, the run says so once, in one
line, and goes on without profiles.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hvbench.errors import CommandTimeout
from hvbench.host.process import run_bounded
from hvbench.host.resources import Ledger, Resource
from hvbench.store import FunctionRecord, ProfileRecord

FREQUENCY_HZ = 99
"""Samples a second per CPU: enough for a top 30 over a few seconds (200 a second on two
cores), too few to disturb what is measured (999 Hz took 2% of the CPU, 9999 Hz 23%); not 100,
so as not to tick in step with the kernel's timer."""
TOP = 100
"""Functions kept per sample; the report's top 30 of a platform sums them over its samples."""
READY_TIMEOUT_S = 30.0
REPORT_TIMEOUT_S = 300.0
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
_LEVEL = re.compile(r"^\[[^\]]*\] ")
"""perf report's privilege level before a symbol: [k] kernel, [.] user, [g] guest kernel."""
_ADDRESS = re.compile(r"^0x[0-9a-f]+$")
NO_SYMBOLS = "(no symbols)"
_JIT = re.compile(r"^\[JIT\] tid \d+$")
"""perf's name for executable memory no file backs, one per thread."""


MISSING = "perf is not installed (./setup.sh --with-perf)"


class ProfileError(Exception):
    """perf could not profile the host: why, in one line."""


@dataclass
class _Perf:
    """A ``perf record`` of the whole host, its events off until ``enable``, driven through its
    control pipe."""

    command: list[str]
    proc: subprocess.Popen
    log: Path
    control: int
    ack: int

    def send(self, command: str) -> None:
        """One control command, returning when perf has acknowledged it."""
        try:
            os.write(self.control, f"{command}\n".encode())
            ready, _, _ = select.select([self.ack], [], [], READY_TIMEOUT_S)
            answer = os.read(self.ack, 64) if ready else b""
        except OSError:
            answer = b""  # perf is gone: its pipes are closed
        if not answer.startswith(b"ack"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(READY_TIMEOUT_S)
            raise ProfileError(f"perf record failed: {self.last_words()}")

    def finish(self) -> None:
        """Ask perf to end, wait for it to write its data, close the pipes."""
        with contextlib.suppress(OSError):
            os.write(self.control, b"stop\n")
        try:
            code = self.proc.wait(READY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ProfileError("perf record did not end when asked") from None
        finally:
            os.close(self.control)
            os.close(self.ack)
        if code != 0:
            raise ProfileError(f"perf record exited with {code}: {self.last_words()}")

    def last_words(self) -> str:
        """perf's error in one line: its first line of substance, and the paranoia setting where
        that is what refused it."""
        if self.proc.poll() is None:
            return f"no answer in {READY_TIMEOUT_S:.0f} s"
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        lines = [s.strip() for s in text.splitlines() if s.strip() not in ("", "Error:")]
        first = lines[0] if lines else f"exit status {self.proc.returncode}"
        if "paranoid" in text:
            level = PARANOID.read_text().strip()
            first += (
                f" (kernel.perf_event_paranoid is {level}: run as root, or lower it to profile "
                "the whole host as another user)"
            )
        return first


@dataclass
class Window:
    """The profile of one measured window: ``start`` when it opens (the barrier's action, so it
    never raises), ``stop`` when it closes."""

    _perf: _Perf | None
    _data: Path
    _fail: Callable[[str], None]
    _on: bool = False

    def start(self) -> None:
        """Switch the events on; later calls are no-ops, as workloads may pass several
        barriers."""
        if self._perf is None or self._on:
            return
        try:
            self._perf.send("enable")
            self._on = True
        except ProfileError as e:
            self._fail(str(e))

    def stop(self) -> ProfileRecord | None:
        """Switch the events off, end perf and read its top functions; None without a
        profile."""
        perf, self._perf = self._perf, None
        if perf is None:
            return None
        try:
            try:
                if self._on:
                    perf.send("disable")
            finally:
                perf.finish()
            return _report(perf.command, self._data) if self._on else None
        except ProfileError as e:
            self._fail(str(e))
            return None

    def discard(self) -> None:
        """End perf, if the window did not close (a failed sample, an interrupt), with no
        profile."""
        perf, self._perf = self._perf, None
        if perf is not None:
            with contextlib.suppress(ProfileError):
                perf.finish()


@dataclass
class HostProfiler:
    """Profiles the measured window of each sample of a run into ``workdir``. The first failure
    (perf missing, not permitted, exited) is said once through ``notice`` and ends profiling
    for the rest of the run."""

    ledger: Ledger
    workdir: Path
    notice: Callable[[str], None]
    enabled: bool = True
    _count: int = field(default=0, init=False)

    def _fail(self, why: str) -> None:
        if self.enabled:
            self.notice(f"profile: {why}; the run goes on without profiles")
        self.enabled = False

    @contextmanager
    def window(self) -> Iterator[Window]:
        """perf started with its events off, ready before the window opens; on the way out
        (an error and Ctrl-C included) perf is ended and its files removed."""
        self._count += 1
        folder = self.workdir / f"profile-{self._count}"
        window = Window(None, folder / "perf.data", self._fail)
        if not self.enabled:
            yield window
            return
        made = [self.ledger.add("path", str(folder))]
        try:
            folder.mkdir(exist_ok=True)  # a resumed run numbers its windows from 1 again
            try:
                window = Window(_start(folder, made, self.ledger), folder / "perf.data", self._fail)
            except ProfileError as e:
                self._fail(str(e))
            yield window
        finally:
            window.discard()
            for res in reversed(made):
                self.ledger.release(res)


def _start(folder: Path, made: list[Resource], ledger: Ledger) -> _Perf:
    """perf record of every CPU, events off, answering on a control pipe; returns once perf
    has answered a ping, i.e. once its start-up is over."""
    binary = shutil.which("perf")
    if binary is None:
        raise ProfileError(MISSING)
    control_r, control_w = os.pipe()
    ack_r, ack_w = os.pipe()
    command = [
        binary, "record", "--all-cpus", "--event=cpu-clock", f"--freq={FREQUENCY_HZ}",
        "--delay=-1", "--no-buildid", "--no-buildid-cache", "--quiet",
        f"--control=fd:{control_r},{ack_w}", f"--output={folder / 'perf.data'}",
    ]  # fmt: skip
    log = folder / "perf.log"
    try:
        with log.open("wb") as err:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                pass_fds=(control_r, ack_w),
                start_new_session=True,
            )
    finally:
        os.close(control_r)
        os.close(ack_w)
    perf = _Perf(command, proc, log, control_w, ack_r)
    with contextlib.suppress(psutil.Error):  # gone already: perf refused, as ping tells
        made.append(ledger.add_process(proc.pid))
    try:
        perf.send("ping")
    except ProfileError:
        with contextlib.suppress(ProfileError):
            perf.finish()
        raise
    return perf


def _report(command: list[str], data: Path) -> ProfileRecord:
    """Samples per (symbol, shared object) from ``perf report``, the TOP of them kept."""
    argv = [
        command[0], "report", f"--input={data}", "--stdio", "--quiet", "--no-children",
        "--fields=sample,sym,dso", "--field-separator=\t",
    ]  # fmt: skip
    try:
        result = run_bounded(argv, REPORT_TIMEOUT_S)
    except (OSError, CommandTimeout) as e:
        raise ProfileError(f"perf report failed: {e}") from None
    if not result.ok:
        raise ProfileError(f"perf report failed: {result.describe_failure()}")
    counts = parse_report(result.text())
    total = sum(n for n, _, _ in counts)
    if total == 0:
        raise ProfileError("perf took no samples")
    top = sorted(counts, key=lambda c: -c[0])[:TOP]
    return ProfileRecord(
        samples=total,
        frequency_hz=FREQUENCY_HZ,
        command=command,
        functions=[
            FunctionRecord(rank, n, 100 * n / total, symbol, dso)
            for rank, (n, symbol, dso) in enumerate(top, 1)
        ],
    )


def parse_report(text: str) -> list[tuple[int, str, str]]:
    """(samples, symbol, shared object) from ``perf report --fields=sample,sym,dso
    --field-separator=TAB``, the symbol without its privilege level. Addresses perf found no
    symbol for (a stripped binary, JIT code) are counted together per shared object as
    ``(no symbols)``, as oprofile's tables did, rather than as hundreds of single addresses;
    code generated at run time (TCG's translations) is ``[JIT]``, whichever thread it ran in."""
    counts: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("\t")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        symbol = _LEVEL.sub("", parts[1])
        key = (NO_SYMBOLS if _ADDRESS.match(symbol) else symbol, _JIT.sub("[JIT]", parts[2]))
        counts[key] = counts.get(key, 0) + int(parts[0])
    return [(n, symbol, dso) for (symbol, dso), n in counts.items()]
