"""A profile turned into the engine's configuration: its models found on disk, its values checked by the
configuration classes, and a command line's overrides applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..backends.run_config import BackendSettings, RunConfig, kind_named
from ..engine.drafters import METHODS
from ..engine.engine_config import ModelSettings, SpecConfig, default_threads
from ..engine.repetition import LoopRule
from ..engine.sampling import SamplingParams
from ..errors import ConfigError, SpecchatError
from . import models
from .assistant import mtp_drafter
from .schema import SCHEMA, Profile, fits


def model_base(profile: Profile) -> Path | None:
    """Relative model paths may also be relative to the profile's own folder."""
    return profile.path.parent if profile.path is not None else None


def _backend(values: dict[str, Any], base: Path | None) -> BackendSettings:
    binary = values["binary"]
    if binary is not None and base is not None and not Path(binary).expanduser().is_absolute():
        binary = str(base / binary)
    return BackendSettings(kind=values["kind"], spec_type=values["spec_type"], binary=binary, url=values["url"],
                           api_key_env=values["api_key_env"], api=values["api"], args=tuple(values["args"]),
                           ready_timeout=float(values["ready_timeout"]))


def _template(choice: str | None, base: Path | None) -> str | None:
    """A template file named relative to the profile's folder becomes a full path; a format name stays a name."""
    if choice is None or not models.looks_like_path(choice) and not choice.endswith((".jinja", ".j2")):
        return choice
    path = Path(choice).expanduser()
    return str(path if path.is_absolute() or base is None or path.exists() else base / path)


def run_config(profile: Profile, **overrides: Any) -> RunConfig:
    """The configuration a profile describes; ``overrides`` are ``section.key`` values from a command line."""
    values = {section: dict(keys) for section, keys in profile.values.items()}
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        rule = SCHEMA[section][key]
        if not fits(rule, value):
            raise ConfigError(f"{key} = {value!r} is impossible: expected {rule.expected}")
        values[section][key] = value
    target, draft, sampling, chat = values["target"], values["draft"], values["sampling"], values["chat"]
    try:
        spec = SpecConfig(method=draft["method"], n_max=draft["n_max"], n_min=draft["n_min"],
                          p_min=float(draft["p_min"]), ngram_min=draft["ngram_min"], ngram_max=draft["ngram_max"])
        base = model_base(profile)
        own_models = kind_named(values["backend"]["kind"]).own_models
        target_path = _target_path(target["model"], own_models, base)
        return RunConfig(
            target=ModelSettings(target_path, target["n_gpu_layers"], target["threads"] or default_threads()),
            draft=None if own_models else _draft_settings(spec, draft, target_path, base),
            spec=spec,
            sampling=SamplingParams(temperature=float(sampling["temperature"]), top_k=sampling["top_k"],
                                    top_p=float(sampling["top_p"]), min_p=float(sampling["min_p"]),
                                    seed=sampling["seed"]),
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


def _target_path(named: str | None, own_models: bool, base: Path | None) -> Path:
    if not own_models:
        return models.resolve(named, "target", base)
    if named:  # a server with its own models; a local copy of the target only tokenizes
        return models.locate(named, base).path or Path(named)
    return Path("remote")


def _draft_settings(spec: SpecConfig, draft: dict[str, Any], target: Path, base: Path | None) -> ModelSettings | None:
    """The draft model's settings, for a method that loads one here. (An override may ask for a draft the profile
    does not name, --method draft: RunConfig says what is missing.)"""
    threads = draft["threads"] or default_threads()
    if spec.uses_draft_model and draft["model"] is not None:
        return ModelSettings(models.resolve(draft["model"], "draft", base), draft["n_gpu_layers"], threads)
    if METHODS[spec.method].assistant:  # MTP: the target's heads, or its assistant GGUF
        named = draft["model"]
        assistant = models.resolve(named, "draft", base) if named is not None else mtp_drafter(target)
        if assistant is not None:
            return ModelSettings(assistant, draft["n_gpu_layers"], threads)
    return None
