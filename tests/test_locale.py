"""One locale for every command hvbench runs (issue 52, item 2): a user's locale (de_DE, fr_FR,
generated here with localedef into a directory of the test's own, read through LOCPATH) never
reaches a tool whose output hvbench parses, on the host or in a guest or a container, and
hvbench's own output does not change with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require
from guest_fixtures import GUEST_TOOLS, GuestRun
from locales import LATIN, LOCALES, users_env
from oslevel_checks import metric_values

from hvbench import toolenv
from hvbench.drivers.base import Instance, Needs
from hvbench.drivers.container import ContainerDriver, ContainerSettings
from hvbench.drivers.qemu import QemuDriver
from hvbench.drivers.qemu_machine import QemuSettings
from hvbench.host.network import RunNetwork
from hvbench.host.resources import Ledger
from hvbench.store import Store
from hvbench.workloads.base import ParseError
from hvbench.workloads.dd import parse_dd

SRC = Path(toolenv.__file__).parent
HVBENCH = Path(sys.executable).parent / "hvbench"
SHOW_ENV = 'echo "${LC_ALL-unset}|${LANGUAGE-unset}|${LANG-unset}"'
"""A shell line that says the locale its command got."""
FIXED = f"{toolenv.LOCALE}|unset|"


def test_the_locale_is_set_in_one_place_only():
    """No module but toolenv names the locale's variables: every command gets it from there."""
    named = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*")
        if path.is_file()
        and path.suffix not in {".pyc", ".so"}
        and any(v in path.read_text(errors="replace") for v in ("LC_ALL", "LANGUAGE"))
    )
    assert named == ["toolenv.py"]


SPAWNS = f"""
import asyncio, os, subprocess
import psutil
from hvbench.host.process import run_bounded

line = ["sh", "-c", {SHOW_ENV!r}]
said = [
    subprocess.run(line, capture_output=True, text=True).stdout,
    subprocess.Popen(line, stdout=subprocess.PIPE, text=True).communicate()[0],
    psutil.Popen(line, stdout=subprocess.PIPE, text=True).communicate()[0],
    run_bounded(line, 30).text(),
    os.popen(" ".join(["sh", "-c", repr({SHOW_ENV!r})])).read(),
]

async def spawned() -> str:
    proc = await asyncio.create_subprocess_exec(*line, stdout=subprocess.PIPE)
    return (await proc.communicate())[0].decode()

said.append(asyncio.run(spawned()))
print("\\n".join(s.strip() for s in said))
"""


@pytest.mark.parametrize("name", LOCALES)
def test_every_host_process_gets_the_fixed_locale(locale_dir: Path, name: str):
    """Whatever hvbench module a program imports first, every way it starts a process on the
    host (subprocess, psutil, asyncio, run_bounded, a shell) hands it the fixed locale, and
    LANGUAGE, which gettext would read before it, is gone."""
    done = subprocess.run(
        [sys.executable, "-c", SPAWNS],
        env=users_env(locale_dir, name),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == [f"{FIXED}{name}"] * 6


def test_in_locale_runs_the_command_under_the_fixed_locale():
    """The env(1) prefix of guests' and containers' commands, through busybox's env (every guest
    image's) and GNU's (a root tree's): it overrides what the environment said."""
    env = {"PATH": os.environ["PATH"], "LC_ALL": "de_DE.UTF-8", "LANGUAGE": "de", "LANG": "x"}
    argv = toolenv.in_locale(["sh", "-c", SHOW_ENV])
    assert argv[0] == "/bin/env"
    for env_program in (["busybox", "env"], ["/usr/bin/env"]):
        out = subprocess.run([*env_program, *argv[1:]], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == f"{FIXED}x", env_program


KERNEL_LOOKUP = """
from hvbench.guest.kernel import FLAVOURS, resolve
print(resolve(next(iter(FLAVOURS))))
"""


@pytest.mark.parametrize("name", LOCALES)
def test_host_tools_parse_under_a_users_locale(locale_dir: Path, name: str):
    """The guest kernel's lookup (apt-cache, which translates "Depends:") finds the package
    under the user's locale as under C."""
    users = subprocess.run(
        [sys.executable, "-c", KERNEL_LOOKUP],
        env=users_env(locale_dir, name),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert users.returncode == 0, users.stderr
    plain = subprocess.run(
        [sys.executable, "-c", KERNEL_LOOKUP], capture_output=True, text=True, timeout=300
    )
    assert users.stdout == plain.stdout and "linux-image-" in users.stdout


@pytest.mark.parametrize("name", LOCALES)
def test_a_native_dd_run_parses_under_a_users_locale(
    locale_dir: Path, name: str, tmp_path: Path, store: Store
):
    """dd's summary on the host, "kopiert, 0,095 s" under de_DE, parses as under C: the run
    ends with its figure (on main: its one sample failed)."""
    study = tmp_path / "study.yaml"
    study.write_text(
        "name: locale-dd\nbaseline: native\nplatforms:\n  native: {driver: native}\n"
        "workloads:\n  - {name: disk, tool: dd, size: 64M}\nrepetitions: 1\n"
    )
    done = subprocess.run(
        [str(HVBENCH), "run", str(study), "--quick", "--wait", "--json", "--no-report"],
        env=users_env(locale_dir, name),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    ended = json.loads(done.stdout)
    assert (ended["status"], ended["failed_samples"]) == ("finished", 0), done.stderr
    figures = metric_values(store, ended["run"])
    assert figures["disk.dd.write_mbps"][0] > 0 and figures["disk.dd.read_mbps"][0] > 0


@pytest.mark.parametrize(
    "summary",
    [
        # de_DE whole: words and numbers translated
        "67108864 Bytes (67 MB, 64 MiB) kopiert, 0,095 s, 706 MB/s",
        # LC_NUMERIC alone (LANG=en_US, LC_NUMERIC=de_DE): English words, a decimal comma
        "67108864 bytes (67 MB, 64 MiB) copied, 0,095 s, 706 MB/s",
        # fr_FR
        "67108864 octets (67 MB, 64 MiB) copiés, 0,095 s, 706 MB/s",
    ],
)
def test_a_localized_dd_summary_fails_loudly(summary: str):
    """Were a locale to reach dd anyway, its summary is refused, never read as 0 s or 95 s."""
    with pytest.raises(ParseError, match="dd write summary"):
        parse_dd(f"64+0 records in\n64+0 records out\n{summary}\n", "write")


@pytest.mark.parametrize("name", [*LOCALES, LATIN])
def test_hvbench_prints_the_same_under_a_users_locale(
    locale_dir: Path, name: str, four_platforms: Store
):
    """hvbench's own figures ("0.3 min", "92 [91–93]") take neither the user's decimal comma nor
    charset: the same bytes as under C.UTF-8 (on main, a latin-1 locale ended the report in a
    UnicodeEncodeError)."""
    default = str(SRC / "default_study.yaml")

    def said(env: dict[str, str] | None, *args: str) -> bytes:
        done = subprocess.run([str(HVBENCH), *args], env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done.stdout

    users = users_env(locale_dir, name)
    for args in (["study", "show", default], ["study", "show", default, "--json"], ["report"]):
        assert said(users, *args) == said(None, *args), args


# the control channels: a guest's agent, a container's runtime ---------------------------------


def _said(inst: Instance, name: str) -> None:
    """What a command (``exec``) and a background line (``spawn``) in the instance were given:
    the fixed locale, which the guest's or the container's own environment does not hold."""
    assert inst.exec(["sh", "-c", SHOW_ENV], 60).text().strip().startswith(FIXED), name
    assert inst.spawn(SHOW_ENV, 60).text().strip().startswith(FIXED), name


@pytest.mark.guest
def test_a_guests_commands_get_the_fixed_locale(guest_run: GuestRun):
    settings = QemuSettings(driver="qemu", memory="256M", nic="none")
    d = QemuDriver("q", settings, Needs(tools=GUEST_TOOLS), *_run_parts(guest_run))
    [inst] = d.start(1, time.monotonic() + 240).instances
    try:
        _said(inst, "qemu")
    finally:
        d.stop([inst])


@pytest.mark.guest
def test_a_containers_commands_get_the_fixed_locale(guest_run: GuestRun):
    require(ContainerDriver.check().ok, "runc (apt-get install runc)")
    settings = ContainerSettings(driver="container", vcpus=1, memory="192M")
    d = ContainerDriver("c", settings, Needs(tools=GUEST_TOOLS), *_run_parts(guest_run))
    [inst] = d.start(1, time.monotonic() + 120).instances
    try:
        _said(inst, "runc")
    finally:
        d.stop([inst])


def _run_parts(run: GuestRun) -> tuple[Ledger, RunNetwork, Path]:
    return run.ledger, run.network, run.workdir
