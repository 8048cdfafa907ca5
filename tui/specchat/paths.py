"""Every folder and file specchat keeps for a user, in one place (XDG locations through platformdirs)."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP = "specchat"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def bundled_profiles_dir() -> Path:
    """The presets: packaged with specchat, or the project's top-level folder in an editable install."""
    packaged = Path(__file__).parent / "bundled_profiles"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "profiles"


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def keymap_file() -> Path:
    return config_dir() / "keymap.toml"


def settings_file() -> Path:
    """Settings that are not keys or profiles (the favourite profiles)."""
    return config_dir() / "settings.toml"


def chats_db() -> Path:
    return data_dir() / "chats.sqlite3"


def last_profile_file() -> Path:
    """The profile the app last switched to, which its next start opens (unless --profile says otherwise)."""
    return data_dir() / "last-profile"


def repl_history() -> Path:
    return data_dir() / "repl-history"


def exports_dir() -> Path:
    return data_dir() / "exports"


def verify_costs_file() -> Path:
    return cache_dir() / "verify-costs.json"


def auto_learned_file() -> Path:
    """What ``n_max = "auto"`` learned, kept between processes (engine/draft_length/learned_store.py)."""
    return cache_dir() / "auto-memory.json"  # (named before "memory" meant only memory: kept, so nothing learned is lost)
