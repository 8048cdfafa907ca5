"""A profile's TOML text validated into a ``Profile``: every problem one ``ConfigError`` naming the file, the line and
the key, and what was expected."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..backends.run_config import BackendSettings, kind_named
from ..engine.engine_config import SpecConfig, check_method
from ..errors import ConfigError
from .schema import SCHEMA, Profile, fits


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
    at = f"[{_shown(section)}]" + (f" {_shown(key)}" if key else "")
    return f"{name}:{line}: {at}" if line else f"{name}: {at}"


def _shown(name: str) -> str:
    """A section or key name as the file has it, quoted when it holds characters a line cannot show."""
    return name if name.isprintable() and name.strip() == name and name else repr(name)


def suggest(word: str, choices: list[str]) -> str:
    """" — did you mean …?" for a misspelt name, else the names it could be."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" — did you mean {close[0]!r}?" if close else f" — expected one of: {', '.join(choices)}"


def parse_profile(source: str, path: Path | None = None, name: str | None = None) -> Profile:
    """Validate a profile's TOML text; every problem raises ConfigError naming file, line and key."""
    label = str(path) if path else "<profile>"
    try:
        document = tomlkit.parse(source)
    except ParseError as exc:
        raise ConfigError(f"{label}:{exc.line}: malformed TOML ({exc}) — fix the syntax") from None
    values: dict[str, dict[str, Any]] = {s: {k: rule.default for k, rule in keys.items()} for s, keys in SCHEMA.items()}
    for section, table in document.unwrap().items():
        if section not in SCHEMA:
            raise ConfigError(f"{_where(path, source, section)}: unknown section{suggest(section, list(SCHEMA))}")
        if not isinstance(table, dict):
            raise ConfigError(f"{label}: {section} must be a table ([{section}])")
        for key, value in table.items():
            rule = SCHEMA[section].get(key)
            if rule is None:
                raise ConfigError(f"{_where(path, source, section, key)}: unknown key{suggest(key, list(SCHEMA[section]))}")
            if not fits(rule, value):
                raise ConfigError(f"{_where(path, source, section, key)}: got {value!r}, expected {rule.expected}")
            values[section][key] = value
    draft, backend = values["draft"], values["backend"]
    kind = kind_named(backend["kind"])  # a name the schema checked
    if values["target"]["model"] is None and not kind.own_models:
        raise ConfigError(f"{label}: [target] model is missing — name the GGUF to chat with")
    try:  # the rules between keys, as the engine's configuration checks them
        spec = SpecConfig(method=draft["method"], n_max=draft["n_max"], n_min=draft["n_min"], p_min=draft["p_min"],
                          ngram_min=draft["ngram_min"], ngram_max=draft["ngram_max"])
        BackendSettings(kind=backend["kind"], spec_type=backend["spec_type"], url=backend["url"], api=backend["api"])
        check_method(spec, draft["model"] is not None, in_engine=kind.runs_engine, own_models=kind.own_models)
    except ConfigError as exc:
        section, key = exc.key or ("draft", None)
        raise ConfigError(f"{_where(path, source, section, key)}: {exc}") from None
    if not kind.server_keys:
        for key in ("spec_type", "binary", "url", "api_key_env"):
            if backend[key] is not None:
                raise ConfigError(f"{_where(path, source, 'backend', key)}: {key} applies to a llama-server or remote"
                                  " backend — set [backend] kind, or remove the key")
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
