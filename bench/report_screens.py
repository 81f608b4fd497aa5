"""What a reader sees of a run's HTML report before scrolling: its first screen, as headless
Chromium shows it at 1400 × 900, saved as a PNG to look at (the verdict, then the first chart).

    .venv/bin/python bench/report_screens.py RUN_ID OUT.png [--db URL] [--width 1400 --height 900]

Prints how long the report took to render and Chromium to draw it, and the PNG's size.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hvbench.analysis import analyse
from hvbench.host.process import run_bounded
from hvbench.report import render
from hvbench.store import Store


def screenshot(html: str, out: Path, width: int, height: int) -> None:
    """The page's top ``width`` × ``height`` px, after its scripts ran, as a PNG at ``out``."""
    out.unlink(missing_ok=True)  # a PNG left from before must not pass for this one
    with tempfile.TemporaryDirectory(prefix="report-screens-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html, encoding="utf-8")
        argv = [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            "--virtual-time-budget=5000",
            f"--window-size={width},{height}",
            f"--screenshot={out.resolve()}",
            page.as_uri(),
        ]
        result = run_bounded(argv, timeout=120)
    if not result.ok or not out.is_file():
        sys.exit(f"chromium drew no screenshot: {result.stderr.decode(errors='replace')[-500:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("out", type=Path, help="the PNG to write")
    ap.add_argument("--db", default=None, help="SQLAlchemy URL of the store (default: SQLite)")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    if shutil.which("chromium") is None:
        sys.exit("chromium is not installed (./setup.sh --dev)")
    t0 = time.perf_counter()
    html = render(analyse(Store(args.db), args.run_id), "html")
    t1 = time.perf_counter()
    print(f"report of run {args.run_id}: {len(html) / 1e3:.0f} kB of HTML in {t1 - t0:.1f} s")
    screenshot(html, args.out, args.width, args.height)
    print(
        f"first screen {args.width}×{args.height} drawn by chromium in "
        f"{time.perf_counter() - t1:.1f} s: {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)"
    )


if __name__ == "__main__":
    main()
