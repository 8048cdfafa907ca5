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
from ..engine.config import (
    APIS,
    BACKENDS,
    KV_CACHES,
    DRAFT_MODEL_METHODS,
    METHODS,
    SPEC_TYPES,
    BackendSpec,
    EngineConfig,
    ModelSpec,
    SpecConfig,
    default_threads,
    known_spec_type,
)
from ..engine.loops import LoopRule
from ..engine.sampling import SamplingParams
from ..errors import ConfigError, SpecchatError
from . import models

DEFAULT_PROFILE = "tiny"


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
    if spec.kind is bool:
        return isinstance(value, bool)
    ok_type = _is_int(value) if spec.kind is int else isinstance(value, spec.kind) and not isinstance(value, bool)
    return ok_type and spec.check(value)


# Upper bounds: llama.cpp's C fields are 32-bit and ctypes truncates a larger int without a word (2**32 + 64 context
# tokens would become 64), and nothing sensible lies beyond these.
INT32, UINT32 = 2**31 - 1, 2**32 - 1
MAX_CTX = 2**24
MAX_LAYERS = 10_000
MAX_THREADS = 1024
MAX_DRAFT = 256
LAYERS = f"an integer from -1 (all) to {MAX_LAYERS:,}"
THREADS = f"an integer from 0 (one per core) to {MAX_THREADS}"

SCHEMA: dict[str, dict[str, Key]] = {
    "target": {
        "model": Key(str, None, "a GGUF path or model name"),
        "n_ctx": Key(int, 4096, f"an integer from 64 to {MAX_CTX:,}", lambda v: 64 <= v <= MAX_CTX),
        "n_gpu_layers": Key(int, 0, LAYERS, lambda v: -1 <= v <= MAX_LAYERS),
        "threads": Key(int, 0, THREADS, lambda v: 0 <= v <= MAX_THREADS),
        "adapt_threads": Key(bool, True, "true (fewer threads while the machine is busy) or false"),
        "kv_cache": Key(str, "q8_0", f"one of {', '.join(KV_CACHES)}", lambda v: v in KV_CACHES),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: 0 < v < 1e6),
    },
    "draft": {
        "method": Key(str, "none", f"one of {', '.join(METHODS)}", lambda v: v in METHODS),
        "model": Key(str, None, "a GGUF path or model name"),
        "n_gpu_layers": Key(int, 0, LAYERS, lambda v: -1 <= v <= MAX_LAYERS),
        "threads": Key(int, 0, THREADS, lambda v: 0 <= v <= MAX_THREADS),
        "n_max": Key((int, str), 4, f'an integer from 1 to {MAX_DRAFT} or "auto"',
                     lambda v: v == "auto" or (_is_int(v) and 1 <= v <= MAX_DRAFT)),
        "n_min": Key(int, 0, f"an integer from 0 to {MAX_DRAFT}", lambda v: 0 <= v <= MAX_DRAFT),
        "p_min": Key((int, float), 0.0, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        "ngram_min": Key(int, 2, f"an integer from 1 to {MAX_DRAFT}", lambda v: 1 <= v <= MAX_DRAFT),
        "ngram_max": Key(int, 4, f"an integer from 1 to {MAX_DRAFT}", lambda v: 1 <= v <= MAX_DRAFT),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: 0 < v < 1e6),
    },
    "sampling": {
        "temperature": Key((int, float), 0.0, "a number from 0 (greedy) to 100", lambda v: 0 <= v <= 100),
        "top_k": Key(int, 40, f"an integer from 0 (off) to {INT32:,}", lambda v: 0 <= v <= INT32),
        "top_p": Key((int, float), 0.95, "a number in (0, 1]", lambda v: 0 < v <= 1),
        "min_p": Key((int, float), 0.05, "a number in [0, 1)", lambda v: 0 <= v < 1),
        "seed": Key(int, 0, f"an integer from 0 to {UINT32:,}", lambda v: 0 <= v <= UINT32),
    },
    "backend": {
        "kind": Key(str, "local", f"one of {', '.join(BACKENDS)}", lambda v: v in BACKENDS),
        "spec_type": Key(str, None, f"one of llama.cpp's spec types: {', '.join(SPEC_TYPES)}, or a comma-separated"
                         " list of them without spaces (the first that drafts wins)", known_spec_type),
        "binary": Key(str, None, "the path of a llama-server binary"),
        "url": Key(str, None, 'an http:// or https:// URL, e.g. "http://gpu-box:8080"',
                   lambda v: v.startswith(("http://", "https://"))),
        "api_key_env": Key(str, None, "the NAME of an environment variable holding the API key (never the key)",
                           lambda v: v.isidentifier()),
        "api": Key(str, "auto", f"one of {', '.join(APIS)}", lambda v: v in APIS),
        "args": Key(list, [], "a list of extra llama-server arguments, as strings",
                    lambda v: all(isinstance(a, str) for a in v)),
        "ready_timeout": Key((int, float), 120, "seconds > 0 to wait for the server to load (at most a day)",
                             lambda v: 0 < v <= 86400),
    },
    "chat": {
        "system_prompt": Key(str, "", "a string"),
        "template": Key(str, None, "a Jinja file or one of llama.cpp's chat format names (e.g. \"chatml\")"),
        "stop_on_loop": Key(bool, True, "true (stop a reply that repeats the same span: engine/loops.py) or false"),
        "loop_repeats": Key(int, LoopRule.repeats, "an integer from 2 to 1,000", lambda v: 2 <= v <= 1000),
        "loop_min_tokens": Key(int, LoopRule.min_tokens, "an integer from 2 to 100,000", lambda v: 2 <= v <= 100_000),
        "loop_window": Key(int, LoopRule.window, "an integer from 2 to 100,000", lambda v: 2 <= v <= 100_000),
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

    @property
    def system_prompt(self) -> str | None:
        return self.values["chat"]["system_prompt"] or None

    @property
    def method(self) -> str:
        return self.values["draft"]["method"]

    @property
    def backend_kind(self) -> str:
        return self.values["backend"]["kind"]


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
    if values["target"]["model"] is None and values["backend"]["kind"] != "remote":
        raise ConfigError(f"{label}: [target] model is missing — name the GGUF to chat with")
    draft = values["draft"]
    if draft["method"] in DRAFT_MODEL_METHODS and draft["model"] is None:
        raise ConfigError(f"{_where(path, source, 'draft', 'method')}: method '{draft['method']}' needs [draft] model —"
                          " name a draft GGUF")
    if draft["n_max"] != "auto" and draft["n_min"] > draft["n_max"]:
        raise ConfigError(f"{_where(path, source, 'draft', 'n_min')}: n_min {draft['n_min']} exceeds n_max {draft['n_max']}")
    if draft["ngram_min"] > draft["ngram_max"]:
        raise ConfigError(f"{_where(path, source, 'draft', 'ngram_min')}: ngram_min exceeds ngram_max")
    backend = values["backend"]
    if backend["kind"] == "remote" and backend["url"] is None:
        raise ConfigError(f"{_where(path, source, 'backend', 'kind')}: a remote backend needs [backend] url")
    if backend["kind"] == "local":
        for key in ("spec_type", "binary", "url", "api_key_env"):
            if backend[key] is not None:
                raise ConfigError(f"{_where(path, source, 'backend', key)}: {key} applies to a llama-server or remote"
                                  " backend — set [backend] kind, or remove the key")
        if draft["method"] == "mtp":
            raise ConfigError(f"{_where(path, source, 'draft', 'method')}: method 'mtp' needs a llama.cpp server —"
                              " set [backend] kind = \"llama-server\" (multi-token prediction runs there)")
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


def _backend(values: dict[str, Any], base: Path | None) -> BackendSpec:
    binary = values["binary"]
    if binary is not None and base is not None and not Path(binary).expanduser().is_absolute():
        binary = str(base / binary)
    return BackendSpec(kind=values["kind"], spec_type=values["spec_type"], binary=binary, url=values["url"],
                       api_key_env=values["api_key_env"], api=values["api"], args=tuple(values["args"]),
                       ready_timeout=float(values["ready_timeout"]))


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
    target, draft, sampling, chat = values["target"], values["draft"], values["sampling"], values["chat"]
    try:
        spec = SpecConfig(
            method=draft["method"],
            n_max=draft["n_max"],
            n_min=draft["n_min"],
            p_min=float(draft["p_min"]),
            ngram_min=draft["ngram_min"],
            ngram_max=draft["ngram_max"],
        )
        base = model_base(profile)
        remote = values["backend"]["kind"] == "remote"
        if not remote:
            target_path = models.resolve(target["model"], "target", base)
        elif target["model"]:  # a remote server holds its own models; a local copy of the target only tokenizes
            target_path = models.locate(target["model"], base).path or Path(target["model"])
        else:
            target_path = Path("remote")
        target_spec = ModelSpec(target_path, target["n_gpu_layers"], target["threads"] or default_threads())
        draft_spec = None
        if spec.uses_draft_model and not remote:
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
            kv_cache=target["kv_cache"],
            system_prompt=values["chat"]["system_prompt"] or None,
            chat_template=_template(values["chat"]["template"], base),
            backend=_backend(values["backend"], base),
            adapt_threads=target["adapt_threads"],
            loop=LoopRule(chat["loop_repeats"], chat["loop_min_tokens"], chat["loop_window"]) if chat["stop_on_loop"]
            else None,
        )
    except SpecchatError as exc:
        raise type(exc)(f"profile {profile.name}: {exc}") from None
