"""Profiles: the TOML presets and a user's own (schema and validation), finding models on disk, whether a pair fits
in memory, the embedded model pair, and which GGUFs could draft for a target."""

from .catalogue import DEFAULT_PROFILE, available_profiles, bundled_dir, find_profile, load_profile, user_dir
from .resolve import model_base, run_config
from .parse import parse_profile
from .schema import SCHEMA, Profile

__all__ = [
    "DEFAULT_PROFILE", "SCHEMA", "Profile", "available_profiles", "bundled_dir", "run_config", "find_profile",
    "load_profile", "model_base", "parse_profile", "user_dir",
]
