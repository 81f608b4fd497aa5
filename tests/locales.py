"""Users' locales for the tests of a host unlike the developers' (test_locale, test_host_shapes):
made with localedef into a directory of the session's own, read through LOCPATH, so that the
host's locale archive is untouched (``locale_dir``, conftest's fixture)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

LOCALES = ("de_DE.UTF-8", "fr_FR.UTF-8")
LATIN = "de_DE.ISO-8859-1"
"""A locale whose charset cannot say "×" or "↑", which hvbench prints."""
SOURCES = Path("/usr/share/i18n/locales")


def make(root: Path) -> Path:
    """The users' locales made with localedef in ``root``, beside the host's C.UTF-8."""
    for name in (*LOCALES, LATIN):
        lang, _, charset = name.partition(".")
        subprocess.run(
            ["localedef", "-i", lang, "-f", charset, str(root / name)], check=True, timeout=120
        )
    (root / "C.utf8").symlink_to("/usr/lib/locale/C.utf8")
    return root


def users_env(locale_dir: Path, name: str) -> dict[str, str]:
    """The environment of a user who lives in ``name``: every locale variable says it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
    lang = name.partition("_")[0]
    return env | {"LOCPATH": str(locale_dir), "LANG": name, "LC_ALL": name, "LANGUAGE": lang}
