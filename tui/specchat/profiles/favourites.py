"""Favourite profiles, one key each (the app's ``favourite_1`` … ``favourite_9``, the REPL's ``/fav N``): a list in the
settings file.

    # ~/.config/specchat/settings.toml
    [favourites]
    profiles = ["ngram", "tiny", "server-tiny"]

Until the file names its own, the favourites are ``DEFAULT``: the default profile, then ``tiny`` — so a draft model at
work, its colours and its ghosts, is one key (Alt+2) from the default, which keeps its draft model off where it cannot
pay (the embedded pair on a 2-core CPU).
"""

from __future__ import annotations

from pathlib import Path

import tomlkit
from tomlkit.exceptions import ParseError

from ..errors import ConfigError
from .catalogue import DEFAULT_PROFILE

MOST = 9
DEFAULT = [DEFAULT_PROFILE, "tiny"]


def load_favourites(path: Path) -> list[str]:
    """The favourite profiles' names (or paths), first key first; ``DEFAULT`` until the file lists its own."""
    if not path.is_file():
        return list(DEFAULT)
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except (OSError, UnicodeDecodeError, ParseError) as exc:
        raise ConfigError(f"{path}: cannot read the settings ({exc}) — fix or delete the file") from None
    if "favourites" not in document:
        return list(DEFAULT)
    table = document["favourites"]
    names = table.get("profiles", []) if isinstance(table, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
        raise ConfigError(f'{path}: [favourites] profiles must be a list of profile names, e.g. ["ngram", "tiny"]')
    if len(names) > MOST:
        raise ConfigError(f"{path}: [favourites] names {len(names)} profiles, and there are keys for {MOST}")
    return [name.strip() for name in names]


def favourite(path: Path, number: int) -> str:
    """Favourite ``number`` (1 for the first), or one line saying how to name it."""
    names = load_favourites(path)
    if not 1 <= number <= len(names):
        have = f"it names {len(names)}" if names else "it names none"
        raise ConfigError(f'no favourite {number}: {have} — list up to {MOST} profiles as [favourites] profiles = [...]'
                          f" in {path}")
    return names[number - 1]
