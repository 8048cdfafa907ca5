"""Where the app keeps things and what it starts with; tests pass their own."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from ..store import default_path


def keymap_path() -> Path:
    return Path(platformdirs.user_config_dir("specchat")) / "keymap.toml"


def exports_dir() -> Path:
    return Path(platformdirs.user_data_dir("specchat")) / "exports"


@dataclass
class Settings:
    profile: str = "tiny"
    db_path: Path | None = field(default_factory=default_path)  # None: keep chats in memory only
    keymap: Path = field(default_factory=keymap_path)
    exports: Path = field(default_factory=exports_dir)
    autoload: bool = True  # load the profile's models at start (snapshot tests replay recorded events instead)
    resume: bool = True  # reopen the most recent conversation
    max_tokens: int = 1024
    clock: Callable[[], float] = time.perf_counter
    sidebar_min_width: int = 100  # columns below which the sidebar collapses
    max_paste_chars: int = 200_000
