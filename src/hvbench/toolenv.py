"""One locale for every command hvbench runs, on the host and in every guest and container.

hvbench parses what its tools print, and a user's locale changes their words and numbers: under
de_DE dd ends "67108864 Bytes (67 MB, 64 MiB) kopiert, 0,095 s", apt-cache says "Hängt ab von:".
So every program hvbench starts runs under ``LOCALE``, whatever the user's: on the host through
hvbench's own environment, which every child inherits (``fix``, applied when hvbench is
imported), and in a guest or a container, whose commands do not inherit it, through ``env``
before the command (``in_locale``). The command line's own text is UTF-8 whatever the user's
locale too (``own_text``). This module is the only place that sets it.
"""

from __future__ import annotations

import contextlib
import io
import locale
import os
import sys
from collections.abc import MutableMapping, Sequence

LOCALE = "C.UTF-8"
"""POSIX's output (a point in numbers, English words), in UTF-8 for the text around it."""
UNSET = ("LANGUAGE",)
"""What gettext reads before ``LC_ALL`` for any locale but plain C: LANGUAGE=de would still
translate a tool's messages under C.UTF-8."""


def fix(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make ``environ`` (hvbench's own, which every host process it starts inherits) say
    ``LOCALE`` whatever the user's locale said."""
    environ["LC_ALL"] = LOCALE
    for name in UNSET:
        environ.pop(name, None)


def own_text() -> None:
    """The command line's text in UTF-8 under any locale, as Python's UTF-8 mode has it: what
    it prints (a latin-1 locale cannot encode "×" or "↑", and the report would end in a
    traceback), the files it reads and writes and the tools' output it decodes where no
    encoding is named (a study read as latin-1 would name its platforms in mojibake)."""
    with contextlib.suppress(locale.Error):  # a host without LOCALE keeps its own
        locale.setlocale(locale.LC_CTYPE, LOCALE)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(encoding="utf-8")


def in_locale(argv: Sequence[str]) -> list[str]:
    """argv run under ``LOCALE`` in a guest or a container, which starts its commands with an
    environment of its own: through env(1), GNU's or busybox's, at /bin/env in every guest
    image and root tree."""
    unset = [arg for name in UNSET for arg in ("-u", name)]
    return ["/bin/env", *unset, f"LC_ALL={LOCALE}", *argv]
