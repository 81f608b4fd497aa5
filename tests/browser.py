"""Headless chromium (Debian's) on a page, and the console errors it logged."""

from __future__ import annotations

import re
from pathlib import Path

from hvbench.host.process import run_bounded

CONSOLE = re.compile(r"CONSOLE|Uncaught|SyntaxError|TypeError|ReferenceError")


def chromium(tmp_path: Path, page: Path | str, *args: str) -> tuple[str, str]:
    """Run headless chromium on a local file (or a URL); (stdout, stderr)."""
    argv = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        *args,
        page if isinstance(page, str) else page.as_uri(),
    ]
    result = run_bounded(argv, timeout=120)
    assert result.ok, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def console_errors(stderr: str) -> list[str]:
    """The lines of chromium's log that say a page threw or logged an error."""
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]
