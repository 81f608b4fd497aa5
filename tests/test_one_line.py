"""One line, never a traceback (issue 52, item 5): the errors a user meets on a host unlike the
developers' (a state directory that cannot be made, an account without root or a home, a store
that is no database) end in one line on stderr, each run through the real ``hvbench`` command;
and user text (a study's name, a file's content) prints as written, never as rich markup or
emoji codes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import RunBuilder
from rich.progress import Progress

from hvbench.cli.lines import console
from hvbench.cli.run import draw
from hvbench.runner import SampleProgress
from hvbench.store import Store
from hvbench.study import Cell

HVBENCH = Path(sys.executable).parent / "hvbench"
MARKUP = "root:x:0:0 [bold]b[/bold] [red]"
"""User text that rich would read as an emoji code (``:x:``) and as styles."""


def hvbench(
    *args: str, user: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """The hvbench command, as ``user`` (through runuser) where given, in ``env`` (by default
    this process's environment), in ``cwd`` (by default this process's)."""
    argv = [str(HVBENCH), *args]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one line an error ended in, having checked the exit code and that nothing else was
    said."""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _study(directory: Path, name: str = "one-line") -> Path:
    path = directory / "study.yaml"
    path.write_text(
        f"name: {json.dumps(name)}\nbaseline: native\nplatforms:\n  native: {{driver: native}}\n"
        "workloads:\n  - {name: disk, tool: dd, size: 64M}\nrepetitions: 1\n"
    )
    return path


@pytest.mark.parametrize("study", [False, True], ids=["default study", "a study file"])
def test_a_state_directory_that_cannot_be_made_is_one_line(tmp_path: Path, study: bool):
    """Named with HVBENCH_STATE_DIR, before anything is examined or said (on main: 76 lines, four
    tracebacks)."""
    args = [str(_study(tmp_path))] if study else []
    env = os.environ | {"HVBENCH_STATE_DIR": "/proc/nope/x"}
    line = one_line(hvbench("run", "--quick", *args, env=env))
    assert "/proc/nope/x" in line and "HVBENCH_STATE_DIR" in line, line
    assert not Path("/proc/nope").exists()


@pytest.fixture
def user() -> Iterator[str]:
    """An account with neither root nor a home directory (its home names a path that does not
    exist), removed afterwards; what hvbench ran as it left nothing of it in the host's temporary
    directory (Podman's --version, run by doctor, made its runtime directories there)."""
    name = f"hvb-{os.getpid()}"
    home = f"/nonexistent/{name}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", home, name], check=True)
    uid = pwd.getpwnam(name).pw_uid
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=True)
    assert not Path(home).exists()
    assert _owned_by(uid, Path(tempfile.gettempdir())) == []


def _owned_by(uid: int, directory: Path) -> list[Path]:
    """The entries of ``directory`` that ``uid`` owns (another's may go while it is read)."""
    found = []
    for path in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.lstat().st_uid == uid:
                found.append(path)
    return found


@pytest.fixture
def shared_dir(user: str) -> Iterator[Path]:
    """A directory of ``user``'s own, outside this test's (which only root may enter)."""
    path = Path(tempfile.mkdtemp(prefix="hvbench-one-line-"))
    shutil.chown(path, user)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_without_root_or_a_home_a_run_is_refused_in_one_line(user: str, shared_dir: Path):
    """What needs root says so and why (on main: a PermissionError traceback); a store
    in the missing home is one line naming --db and HVBENCH_DB."""
    env = {k: v for k, v in os.environ.items() if k != "HVBENCH_DB"}  # the default store
    run = one_line(hvbench("run", "--quick", user=user, env=env))
    assert "run needs root" in run and "namespaces" in run, run
    for command in (["host", "tune"], ["host", "reset"], ["cleanup"]):
        line = one_line(hvbench(*command, user=user, env=env))
        assert f"{' '.join(command)} needs root: " in line, line
    runs = one_line(hvbench("runs", user=user, env=env))
    assert "--db" in runs and "HVBENCH_DB" in runs and "/nonexistent/" in runs, runs
    study = _study(shared_dir)
    checked = hvbench("study", "check", str(study), user=user)
    assert checked.returncode == 0 and checked.stdout.startswith(f"{study}: ok"), checked.stderr


def test_without_root_or_a_home_doctor_and_report_run(user: str, shared_dir: Path):
    """What needs no root runs: doctor says what this user lacks, and leaves nothing where it
    ran (bonnie++ run without arguments to tell its version benchmarked the user's directory
    for 10 s: 5 GB left there); a report reads the user's own store."""
    doctor = hvbench("doctor", "--json", user=user, cwd=shared_dir)
    assert doctor.returncode == 0 and "Traceback" not in doctor.stderr, doctor.stderr
    assert list(shared_dir.iterdir()) == []
    findings = {(f["kind"], f["name"]): f for f in json.loads(doctor.stdout)}
    assert not findings["host", "root"]["ok"] and findings["driver", "native"]["ok"]
    url = f"sqlite:///{shared_dir / 'results.db'}"
    b = RunBuilder(Store(url))
    for platform, factor in {"native": 1.0, "virtio": 0.9}.items():
        cell = b.cell(platform, "disk")
        for rep, noise in enumerate([-0.01, 0.0, 0.01]):
            b.sample(cell, rep, {"disk.dd.write_mbps": [500 * factor * (1 + noise)]})
    for path in shared_dir.iterdir():
        shutil.chown(path, user)
    report = hvbench("report", "latest", "--format", "md", "--db", url, user=user)
    assert report.returncode == 0, report.stderr
    assert b.run_id in report.stdout and "virtio" in report.stdout


def test_user_text_is_printed_as_written(tmp_path: Path):
    """A study file's text in an error, a file's name and a study's name are never markup nor
    emoji codes (on main: ``root❌0:0``, and ``[bold]`` swallowed)."""
    passwd = tmp_path / "passwd.yaml"
    passwd.write_text(f"{MARKUP}\n")
    line = one_line(hvbench("study", "check", str(passwd)))
    assert line.endswith(f"found {MARKUP!r}"), line
    named = tmp_path / "[bold]odd:x:.yaml"
    _study(tmp_path, MARKUP).rename(named)
    checked = hvbench("study", "check", str(named))
    assert checked.returncode == 0 and checked.stdout.startswith(f"{named}: ok"), checked.stderr
    shown = hvbench("study", "show", str(named))
    assert shown.returncode == 0 and shown.stdout.splitlines()[0].strip() == MARKUP, shown.stdout


def test_a_failed_samples_error_is_printed_as_written():
    """The line a failed sample draws above the progress bar: the tool's words, red, as they
    came."""
    out = console()
    out.file = io.StringIO()
    bar = Progress(console=out)
    cell = Cell("native", 0, "disk", 1)
    draw(bar, bar.add_task("", eta="?"), SampleProgress(cell, 1, 1, 2, "failed", MARKUP, 60.0))
    assert f"rep 1 native × 1 disk: failed  failed: {MARKUP}" in out.file.getvalue()


def test_a_store_that_is_no_database_is_one_line(tmp_path: Path):
    """SQLite's refusal, and a PostgreSQL server's two-line one, each end in one line (on main:
    143 lines and two tracebacks, and two lines)."""
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    line = one_line(hvbench("runs", "--db", f"sqlite:///{text}"))
    assert "file is not a database" in line, line
    refused = one_line(hvbench("runs", "--db", "postgresql+psycopg://nobody@127.0.0.1:1/x"))
    assert "Connection refused" in refused, refused


def test_what_the_host_refuses_is_one_line():
    """An OSError no command foresaw (here an image cache that cannot be made) names the path
    (on main: a traceback)."""
    env = os.environ | {"HVBENCH_IMAGE_CACHE": "/proc/nope/images"}
    line = one_line(hvbench("image", "build", env=env))
    assert line == "hvbench: /proc/nope: No such file or directory", line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--bogus"], "No such option: --bogus (see hvbench run --help)"),
        (["compare", "a"], "Missing argument 'run_b'. (see hvbench compare --help)"),
    ],
)
def test_a_command_line_that_does_not_parse_is_one_line(args: list[str], said: str):
    """The parser's errors too (on 4bdcd00: usage, a hint and a four-line box)."""
    assert one_line(hvbench(*args)) == f"hvbench: {said}"


def test_a_file_that_is_no_study_is_quoted_within_a_line(tmp_path: Path):
    """A long file that is not a study is quoted in part, not whole (on 4bdcd00, all of
    /etc/passwd on one line)."""
    notes = tmp_path / "notes.yaml"
    notes.write_text("x" * 5000 + "\n")
    line = one_line(hvbench("study", "check", str(notes)))
    assert "..." in line and len(line) < 300, line
