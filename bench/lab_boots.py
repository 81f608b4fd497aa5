"""A nested lab's pass rate: its test module run again and again, each run one session of pytest.

Not a test: it prints figures. Each session boots the lab (tests/lab.py) as CI does, once, or
again where the lab takes a boot's failure for the nested emulation's (``_emulation_failed``:
the boot is set aside and L1 booted again, up to ``BOOTS`` boots). Per session it prints the
seconds, the host's highest 1-minute load, each boot's outcome and, for a failed test, its
first line.
Then the pass rates with their 95% Wilson intervals: sessions that passed (what CI sees), and
L1 boots that passed on their own (what the retry hides). Each session's files (the L1
console, the guests' consoles and stores copied off the scratch disk, the pytest log) stay in
OUT/session-N for reading after the fact.

    .venv/bin/python bench/lab_boots.py tests/test_kvm_lab.py OUT [--sessions 10]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import binomtest

RETRIED = re.compile(
    r"UserWarning: (\w+) lab: (.+?) after (\d+) s; booted again"
    r"(?: \(.*?; the last cell done: ([^;]+);)?"
)
"""The warning tests/lab.py gives when it sets a boot aside and boots L1 again, as pytest's
summary shows it (the summary's next line may be the warning's source line, not matched), with
the last cell L1 finished where it says."""
OPT_IN = "opt-in:"
"""How a lab's test that runs only when asked gives its skip's reason (test_kvm_lab's root
filesystem cells, test_xen's consolidation): a session without it is a pass all the same,
where any other skip (a missing VMM, a lab that cannot boot here) is not."""
JUNIT, LOG = "junit.xml", "pytest.log"
"""A session's files in its directory: pytest's JUnit XML and its output."""


@dataclass
class Session:
    """One pytest session of the lab's module: its tests' outcomes and its boots."""

    seconds: float
    load: float
    passed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    """A skipped test's name: the reason it gave."""
    failed: dict[str, str] = field(default_factory=dict)
    """A failed test's name: the first line of its failure."""
    retried: list[str] = field(default_factory=list)
    """Why each boot set aside was, in order."""

    @property
    def left_out(self) -> dict[str, str]:
        """The skips that count against the session: all but an opt-in's (``OPT_IN``)."""
        return {n: why for n, why in self.skipped.items() if not why.startswith(OPT_IN)}

    @property
    def ok(self) -> bool:
        return self.passed > 0 and not self.failed and not self.left_out

    @property
    def boots(self) -> list[bool]:
        """Each L1 boot's outcome: a boot set aside failed; the last passed if the tests did."""
        return [False] * len(self.retried) + [self.ok]


def run_session(module: Path, out: Path) -> Session:
    """Run the module's tests in a pytest of their own, sampling the host's load meanwhile."""
    out.mkdir(parents=True)
    argv = [sys.executable, "-m", "pytest", str(module), "-p", "no:cacheprovider",
            f"--basetemp={out / 'tmp'}", f"--junitxml={out / JUNIT}"]  # fmt: skip
    started, load = time.monotonic(), 0.0
    with (out / LOG).open("w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            load = max(load, os.getloadavg()[0])
            time.sleep(5)
    return read_session(out, time.monotonic() - started, load)


def read_session(out: Path, seconds: float, load: float) -> Session:
    """A session as its files in ``out`` left it: apart from running it, so that a session's
    files can be read again after the fact."""
    junit, log = out / JUNIT, out / LOG
    session = Session(seconds, load)
    for retried in RETRIED.finditer(log.read_text(errors="replace")):
        why, after, last = retried.group(2, 3, 4)
        session.retried.append(
            f"{why} after {after} s" + (f", the last cell done: {last}" if last else "")
        )
    for case in ET.parse(junit).iter("testcase") if junit.exists() else ():
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            first = (failure.get("message") or "").strip().splitlines() or ["(no message)"]
            session.failed[case.get("name", "?")] = first[0][:160]
        elif (skipped := case.find("skipped")) is not None:
            session.skipped[case.get("name", "?")] = skipped.get("message") or ""
        else:
            session.passed += 1
    return session


def rate(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci(method="wilson")
    return f"{k} of {n} ({k / n:.0%}; 95% CI {ci.low:.0%} to {ci.high:.0%})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="the lab's test module")
    parser.add_argument("out", type=Path, help="a new directory for the sessions' files")
    parser.add_argument("--sessions", type=int, default=10)
    args = parser.parse_args()
    sessions = []
    for i in range(1, args.sessions + 1):
        s = run_session(args.module.resolve(), args.out / f"session-{i}")
        sessions.append(s)
        outcome = (
            "passed" if s.ok else f"FAILED ({len(s.failed)} failed, {len(s.left_out)} skipped)"
        )
        print(f"session {i}: {outcome} in {s.seconds:.0f} s, host load up to {s.load:.1f}")
        for n, why in enumerate(s.retried, 1):
            print(f"  boot {n} set aside: {why}")
        for name, why in (s.failed | s.left_out).items():
            print(f"  {name}: {why}")
    boots = [b for s in sessions for b in s.boots]
    seconds = [s.seconds for s in sessions]
    print(f"sessions passed: {rate(sum(s.ok for s in sessions), len(sessions))}")
    print(f"L1 boots passed: {rate(sum(boots), len(boots))}")
    print(f"session seconds: median {statistics.median(seconds):.0f}, "
          f"range {min(seconds):.0f}-{max(seconds):.0f}")  # fmt: skip
    return 0 if all(s.ok for s in sessions) else 1


if __name__ == "__main__":
    sys.exit(main())
