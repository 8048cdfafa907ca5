"""Where profiles are found: bundled presets in the project's ``profiles/`` folder (packaged as
``specchat/bundled_profiles``), and a user's own in the XDG config dir, which add to them or override them by name."""

from __future__ import annotations

from pathlib import Path

from .. import paths
from ..errors import ConfigError
from .parse import parse_profile, suggest
from .schema import Profile

DEFAULT_PROFILE = "suffix-draft"  # every source of drafts, each only as far as its measured worth pays


def bundled_dir() -> Path:
    return paths.bundled_profiles_dir()


def user_dir() -> Path:
    return paths.user_profiles_dir()


def available_profiles() -> dict[str, Path]:
    """Profile name → file; a user's profile overrides a bundled one of the same name."""
    found: dict[str, Path] = {}
    for directory in (bundled_dir(), user_dir()):
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found[path.stem] = path
    return found


def find_profile(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise ConfigError(f"profile file not found: {path}")
        return path
    profiles = available_profiles()
    if name_or_path not in profiles:
        raise ConfigError(f"unknown profile {name_or_path!r}{suggest(name_or_path, sorted(profiles))}")
    return profiles[name_or_path]


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    path = find_profile(name_or_path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read profile {path}: {exc} — check the file") from None
    return parse_profile(source, path, path.stem)
