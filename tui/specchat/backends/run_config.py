"""Where a chat runs: in this process, in a llama-server specchat starts, or on a server already running — the
backends' part of a chat's configuration, beside the engine's (``engine.engine_config``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.engine_config import EngineConfig, Runner
from ..errors import ConfigError
from .kinds import BackendKind, kind_named

# llama.cpp's --spec-type names (common/speculative.cpp)
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple",
              "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
APIS = ("auto", "llama.cpp", "openai")


def known_spec_type(value: str) -> bool:
    """One of llama.cpp's spec types, or a comma-separated list of them (the first that drafts wins, n-grams first)."""
    return all(name in SPEC_TYPES for name in value.split(","))  # llama.cpp splits on commas alone: no spaces


@dataclass(frozen=True)
class BackendSettings:
    """Where the model runs: ``kind`` names one of ``kinds.backend_kinds()`` — in this process (local), in a
    llama-server specchat starts (llama-server), on a server already running (remote: llama-server or any
    OpenAI-compatible one, such as vLLM) — and the rest are llama.cpp's server flags."""

    kind: str = "local"
    spec_type: str | None = None  # llama.cpp's --spec-type; None: from the profile's method
    binary: str | None = None
    url: str | None = None
    api_key_env: str | None = None  # the name of the environment variable holding the API key, never the key
    api: str = "auto"
    args: tuple[str, ...] = ()
    ready_timeout: float = 120.0

    def __post_init__(self) -> None:
        kind = kind_named(self.kind)
        if self.spec_type is not None and not known_spec_type(self.spec_type):
            raise ConfigError(f"unknown spec type {self.spec_type!r} — llama.cpp's are {', '.join(SPEC_TYPES)}, or a"
                              " comma-separated list of them", ("backend", "spec_type"))
        if kind.needs_url and not self.url:
            raise ConfigError(f"a {kind.name} backend needs [backend] url, e.g. \"http://gpu-box:8080\"",
                              ("backend", "kind"))
        if self.api not in APIS:
            raise ConfigError(f"unknown api {self.api!r} — use one of {', '.join(APIS)}", ("backend", "api"))


@dataclass(frozen=True)
class RunConfig(EngineConfig):
    """A chat's whole configuration: the engine's, and the backend it runs on. What every front end and backend takes;
    the in-process engine reads the engine's part only."""

    # A factory: the kinds are found among modules that import this one, so none is looked up while it loads.
    backend: BackendSettings = field(default_factory=BackendSettings)

    @property
    def backend_kind(self) -> BackendKind:
        return kind_named(self.backend.kind)

    @property
    def runner(self) -> Runner:
        return self.backend_kind.runner
