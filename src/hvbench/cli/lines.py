"""The CLI's consoles, and findings as lines that fit the terminal: a table's narrow columns
wrap a long detail to two or three words a line, so each finding is one line (mark, what,
detail) wrapped at the terminal's width under itself, and each of its notes (the fix) an
indented line of its own."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

INDENT = "    "
STYLES = {"ok": "green", "no": "red", "--": "dim", "i": "dim"}


def console(stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A console that prints text as written, the only kind the CLI makes: study names, file
    contents and tools' output are the user's text, never rich markup (``[red]``) nor emoji
    codes (a passwd line's ``root:x:0:0`` would print ``root❌0:0``), and no figure is recoloured
    by a guess at what it is; styles come from ``Text`` alone."""
    return Console(stderr=stderr, soft_wrap=soft_wrap, markup=False, emoji=False, highlight=False)


def print_finding(console: Console, mark: str, text: str, notes: Sequence[str] = ()) -> None:
    """``mark`` (ok, no, -- or i, at most two characters) then ``text``; ``notes`` below it."""
    width = max(console.width, 40)
    head = textwrap.wrap(
        text, width, initial_indent=INDENT, subsequent_indent=INDENT, break_on_hyphens=False
    )
    first = Text(f"{mark:<2}", style=STYLES.get(mark, ""))
    first.append(head[0][2:] if head else "")
    console.print(first, soft_wrap=True)
    for line in head[1:]:
        console.print(Text(line), soft_wrap=True)
    for note in notes:
        for line in textwrap.wrap(
            note,
            width,
            initial_indent=INDENT,
            subsequent_indent=INDENT + "  ",
            break_on_hyphens=False,
        ):
            console.print(Text(line), soft_wrap=True)


def print_text(console: Console, text: str) -> None:
    """A paragraph wrapped at the terminal's width."""
    for line in textwrap.wrap(text, max(console.width, 40), break_on_hyphens=False):
        console.print(Text(line), soft_wrap=True)
