"""TOML speculation profiles: find them, validate them, and turn them into an engine configuration.

Bundled presets live in the project's ``profiles/`` folder (packaged as ``specchat/bundled_profiles``); a user's own
profiles in the XDG config dir add to them or override them by name. Every error names the file, the key and its
line, and says what was expected; unknown keys are errors, never ignored.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.toml_document import TOMLDocument

from .. import paths
from ..engine.config import METHODS, EngineConfig, ModelSpec, SpecConfig, default_threads
from ..engine.sampling import SamplingParams
from ..errors import ConfigError, SpecchatError
from . import models

DEFAULT_PROFILE = "tiny"
# "mtp" is a valid profile method (multi-token prediction heads), but needs a backend specchat does not have yet.
PROFILE_METHODS = (*METHODS, "mtp")


def bundled_dir() -> Path:
    return paths.bundled_profiles_dir()


def user_dir() -> Path:
    return paths.user_profiles_dir()


# -- schema -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    kind: type | tuple[type, ...]
    default: Any
    expected: str
    check: Callable[[Any], bool] = lambda _v: True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fits(spec: Key, value: Any) -> bool:
    ok_type = _is_int(value) if spec.kind is int else isinstance(value, spec.kind) and not isinstance(value, bool)
    return ok_type and spec.check(value)


SCHEMA: dict[str, dict[str, Key]] = {
    "target": {
        "model": Key(str, None, "a GGUF path or model name"),
        "n_ctx": Key(int, 4096, "an integer ≥ 64", lambda v: v >= 64),
        "n_gpu_layers": Key(int, 0, "an integer ≥ -1 (-1 = all)", lambda v: v >= -1),
        "threads": Key(int, 0, "an integer ≥ 0 (0 = one per core)", lambda v: v >= 0),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: v > 0),
    },
    "draft": {
        "method": Key(str, "none", f"one of {', '.join(PROFILE_METHODS)}", lambda v: v in PROFILE_METHODS),
        "model": Key(str, None, "a GGUF path or model name"),
        "n_gpu_layers": Key(int, 0, "an integer ≥ -1 (-1 = all)", lambda v: v >= -1),
        "threads": Key(int, 0, "an integer ≥ 0 (0 = one per core)", lambda v: v >= 0),
        "n_max": Key((int, str), 4, 'an integer ≥ 1 or "auto"', lambda v: v == "auto" or (_is_int(v) and v >= 1)),
        "n_min": Key(int, 0, "an integer ≥ 0", lambda v: v >= 0),
        "p_min": Key((int, float), 0.0, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        "ngram_min": Key(int, 2, "an integer ≥ 1", lambda v: v >= 1),
        "ngram_max": Key(int, 4, "an integer ≥ 1", lambda v: v >= 1),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: v > 0),
    },
    "sampling": {
        "temperature": Key((int, float), 0.0, "a number ≥ 0 (0 = greedy)", lambda v: v >= 0),
        "top_k": Key(int, 40, "an integer ≥ 0 (0 = off)", lambda v: v >= 0),
        "top_p": Key((int, float), 0.95, "a number in (0, 1]", lambda v: 0 < v <= 1),
        "min_p": Key((int, float), 0.05, "a number in [0, 1)", lambda v: 0 <= v < 1),
        "seed": Key(int, 0, "an integer ≥ 0", lambda v: v >= 0),
    },
    "chat": {
        "system_prompt": Key(str, "", "a string"),
        "template": Key(str, None, "a Jinja file or one of llama.cpp's chat format names (e.g. \"chatml\")"),
    },
}


@dataclass
class Profile:
    name: str
    path: Path | None
    values: dict[str, dict[str, Any]]
    document: TOMLDocument | None = None
    description: str = ""

    @property
    def bundled(self) -> bool:
        return self.path is not None and self.path.parent == bundled_dir()


def _line_of(source: str, section: str, key: str | None) -> int | None:
    lines = source.splitlines()
    in_section = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        header = re.fullmatch(r"\[\s*([^\]]+?)\s*\]\s*(#.*)?", stripped)
        if header:
            in_section = header.group(1) == section
            if in_section and key is None:
                return number
            continue
        if in_section and key is not None and re.match(rf"{re.escape(key)}\s*=", stripped):
            return number
    return None


def _where(path: Path | None, source: str, section: str, key: str | None = None) -> str:
    name = str(path) if path else "<profile>"
    line = _line_of(source, section, key)
    at = f"[{section}]" + (f" {key}" if key else "")
    return f"{name}:{line}: {at}" if line else f"{name}: {at}"


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" — did you mean {close[0]!r}?" if close else f" — expected one of: {', '.join(choices)}"


def parse_profile(source: str, path: Path | None = None, name: str | None = None) -> Profile:
    """Validate a profile's TOML text; every problem raises ConfigError naming file, line and key."""
    label = str(path) if path else "<profile>"
    try:
        document = tomlkit.parse(source)
    except ParseError as exc:
        raise ConfigError(f"{label}:{exc.line}: malformed TOML ({exc}) — fix the syntax") from None
    values: dict[str, dict[str, Any]] = {s: {k: spec.default for k, spec in keys.items()} for s, keys in SCHEMA.items()}
    for section, table in document.unwrap().items():
        if section not in SCHEMA:
            raise ConfigError(f"{_where(path, source, section)}: unknown section{_suggest(section, list(SCHEMA))}")
        if not isinstance(table, dict):
            raise ConfigError(f"{label}: {section} must be a table ([{section}])")
        for key, value in table.items():
            spec = SCHEMA[section].get(key)
            if spec is None:
                raise ConfigError(f"{_where(path, source, section, key)}: unknown key{_suggest(key, list(SCHEMA[section]))}")
            if not _fits(spec, value):
                raise ConfigError(f"{_where(path, source, section, key)}: got {value!r}, expected {spec.expected}")
            values[section][key] = value
    if values["target"]["model"] is None:
        raise ConfigError(f"{label}: [target] model is missing — name the GGUF to chat with")
    draft = values["draft"]
    if draft["method"] == "draft" and draft["model"] is None:
        raise ConfigError(f"{_where(path, source, 'draft', 'method')}: method 'draft' needs [draft] model — name a draft GGUF")
    if draft["n_max"] != "auto" and draft["n_min"] > draft["n_max"]:
        raise ConfigError(f"{_where(path, source, 'draft', 'n_min')}: n_min {draft['n_min']} exceeds n_max {draft['n_max']}")
    if draft["ngram_min"] > draft["ngram_max"]:
        raise ConfigError(f"{_where(path, source, 'draft', 'ngram_min')}: ngram_min exceeds ngram_max")
    name = name or (path.stem if path else "profile")
    # Presets open with "# name — summary"; the summary alone describes the profile.
    description = re.sub(rf"^{re.escape(name)}\s*[—–-]+\s*", "", _description(source))
    return Profile(name, path, values, document, description)


def _description(source: str) -> str:
    """The profile's first comment line, which presets use as their one-line summary."""
    for line in source.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""


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
        raise ConfigError(f"unknown profile {name_or_path!r}{_suggest(name_or_path, sorted(profiles))}")
    return profiles[name_or_path]


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    path = find_profile(name_or_path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read profile {path}: {exc} — check the file") from None
    return parse_profile(source, path, path.stem)


# -- models -----------------------------------------------------------------------------------------------------------


def model_base(profile: Profile) -> Path | None:
    """Relative model paths may also be relative to the profile's own folder."""
    return profile.path.parent if profile.path is not None else None


def _template(choice: str | None, base: Path | None) -> str | None:
    """A template file named relative to the profile's folder becomes a full path; a format name stays a name."""
    if choice is None or not models.looks_like_path(choice) and not choice.endswith((".jinja", ".j2")):
        return choice
    path = Path(choice).expanduser()
    return str(path if path.is_absolute() or base is None or path.exists() else base / path)


def engine_config(profile: Profile, **overrides: Any) -> EngineConfig:
    """The engine configuration a profile describes; ``overrides`` are ``section.key`` values from a command line."""
    values = {section: dict(keys) for section, keys in profile.values.items()}
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        spec = SCHEMA[section][key]
        if not _fits(spec, value):
            raise ConfigError(f"{key} = {value!r} is impossible: expected {spec.expected}")
        values[section][key] = value
    target, draft, sampling = values["target"], values["draft"], values["sampling"]
    try:
        if draft["method"] == "mtp":
            raise ConfigError(
                "method 'mtp' needs an engine with multi-token prediction (llama-server --spec-type draft-mtp);"
                " specchat has no MTP backend yet — use a profile with method draft or ngram"
            )
        spec = SpecConfig(
            method=draft["method"],
            n_max=draft["n_max"],
            n_min=draft["n_min"],
            p_min=float(draft["p_min"]),
            ngram_min=draft["ngram_min"],
            ngram_max=draft["ngram_max"],
        )
        base = model_base(profile)
        target_spec = ModelSpec(
            models.resolve(target["model"], "target", base), target["n_gpu_layers"], target["threads"] or default_threads()
        )
        draft_spec = None
        if spec.method == "draft":
            draft_spec = ModelSpec(
                models.resolve(draft["model"], "draft", base), draft["n_gpu_layers"], draft["threads"] or default_threads()
            )
        return EngineConfig(
            target=target_spec,
            draft=draft_spec,
            spec=spec,
            sampling=SamplingParams(
                temperature=float(sampling["temperature"]),
                top_k=sampling["top_k"],
                top_p=float(sampling["top_p"]),
                min_p=float(sampling["min_p"]),
                seed=sampling["seed"],
            ),
            n_ctx=target["n_ctx"],
            system_prompt=values["chat"]["system_prompt"] or None,
            chat_template=_template(values["chat"]["template"], base),
        )
    except SpecchatError as exc:
        raise type(exc)(f"profile {profile.name}: {exc}") from None
