"""Where the app keeps things and what it starts with; tests pass their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..engine.engine_config import DEFAULT_MAX_TOKENS
from ..errors import SpecchatError
from ..profiles import DEFAULT_PROFILE, load_profile
from ..telemetry.memory import GpuMemory, GpuUnavailable, gpu_memory, rss_bytes


def measure_memory(pid: int | None = None) -> tuple[GpuMemory | GpuUnavailable, int | None]:
    """GPU memory through NVML and resident memory, of this process or of the one holding the model (``pid``)."""
    return gpu_memory(pid=pid), rss_bytes(pid)


@dataclass
class Settings:
    profile: str = DEFAULT_PROFILE
    db_path: Path | None = field(default_factory=paths.chats_db)  # None: keep chats in memory only
    keymap: Path = field(default_factory=paths.keymap_file)
    settings_file: Path = field(default_factory=paths.settings_file)  # the favourite profiles
    exports: Path = field(default_factory=paths.exports_dir)
    autoload: bool = True  # load the profile's models at start (snapshot tests replay recorded events instead)
    resume: bool = True  # reopen the most recent conversation
    max_tokens: int = DEFAULT_MAX_TOKENS
    memory: Callable[[int | None], tuple[GpuMemory | GpuUnavailable, int | None]] = measure_memory
    sidebar_min_width: int = 100  # columns below which the sidebar collapses
    max_paste_chars: int = 200_000
    last_profile: Path | None = field(default_factory=paths.last_profile_file)  # None: not remembered
    start_note: str = ""  # a line to show at start (the profile used last could not be opened)


def starting_profile(asked: str | None, last: Path | None) -> tuple[str, str]:
    """The profile to start with — the one asked for, else the one used last, else the default — and a line to show
    when the one used last is gone."""
    if asked is not None:
        return asked, ""
    try:
        name = last.read_text(encoding="utf-8").strip() if last is not None else ""
    except (OSError, UnicodeDecodeError):
        name = ""
    if not name or name == DEFAULT_PROFILE:
        return DEFAULT_PROFILE, ""
    try:
        load_profile(name)
    except SpecchatError as exc:
        return DEFAULT_PROFILE, f"the profile used last ({name}) cannot be opened now ({exc}) — started {DEFAULT_PROFILE}"
    return name, ""


def remember_profile(last: Path | None, name: str) -> None:
    """The profile switched to, for the next start; a folder that cannot be written forgets it, saying nothing (the
    chats store says what is wrong with that folder)."""
    if last is None:
        return
    try:
        last.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        last.write_text(name + "\n", encoding="utf-8")
    except OSError:
        pass
