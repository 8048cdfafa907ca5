"""Where the app keeps things and what it starts with; tests pass their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..engine.engine_config import DEFAULT_MAX_TOKENS
from ..profiles import DEFAULT_PROFILE
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
