"""Where a chat runs: in this process, in a llama-server specchat starts, or on a server already running — the
backends' part of a chat's configuration, beside the engine's (``engine.engine_config``).

The ways of running a model are the *kinds*, as profiles name them (``[backend] kind``). Each module of this package
that defines ``KIND`` (a ``BackendKind``) is one: ``local`` (specchat's engine in this process), ``llama_server`` (a
llama-server specchat starts), ``remote`` (a server already running). They are found here, so a new backend is one
new module (docs/extending.md: "Adding a backend"); what opens, switches, parses and checks a configuration reads a
kind's capabilities, never its name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..discovery import declared_in
from ..engine.engine_config import EngineConfig
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..engine.drafters.stored_chats import StoredChats
    from . import Backend

# llama.cpp's --spec-type names (common/speculative.cpp)
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple",
              "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
APIS = ("auto", "llama.cpp", "openai")


def known_spec_type(value: str) -> bool:
    """One of llama.cpp's spec types, or a comma-separated list of them (the first that drafts wins, n-grams first)."""
    return all(name in SPEC_TYPES for name in value.split(","))  # llama.cpp splits on commas alone: no spaces


@dataclass(frozen=True)
class BackendSettings:
    """Where the model runs: ``kind`` names one of ``backend_kinds()`` — in this process (local), in a
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
    def in_engine(self) -> bool:
        return self.backend_kind.runs_engine

    @property
    def own_models(self) -> bool:
        return self.backend_kind.own_models


@dataclass(frozen=True)
class BackendKind:
    """One way of running a model. Kinds whose ``open`` is the same callable switch between each other in place
    (``Backend.apply``); any other switch closes one backend before the next opens."""

    name: str  # [backend] kind
    label: str  # the word the profile picker shows
    open: Callable[[RunConfig, StoredChats | None], Backend]  # a configuration and the stored chats to draft from
    runs_engine: bool = False  # specchat's own loop runs here: its drafters, "auto" learning from every step
    starts_process: bool = False  # specchat starts (and stops) the process that holds the models
    own_models: bool = False  # a server's models, not files named here: no [target] model needed, no draft file
    needs_url: bool = False  # reached at [backend] url
    server_keys: bool = False  # reads [backend] spec_type, binary, url and api_key_env (llama.cpp's server flags)

    @property
    def switches_speculation(self) -> bool:
        """Whether speculation can be switched off or redrawn from here (the toggle, the draft length, A/B): in the
        engine, or by restarting a process specchat started."""
        return self.runs_engine or self.starts_process


@functools.cache
def backend_kinds() -> dict[str, BackendKind]:
    """Every kind, found among this package's modules, in the order lists and errors name them (``local`` first). Found
    on first use rather than on import: the modules that define them import the configuration this one validates."""
    found = declared_in(__name__.rpartition(".")[0], "KIND", BackendKind, lambda kind: kind.name, "backend")
    order = sorted(found, key=lambda kind: (not kind.runs_engine, not kind.starts_process, kind.name))
    return {kind.name: kind for kind in order}


def kind_named(name: str) -> BackendKind:
    kinds = backend_kinds()
    if name not in kinds:
        raise ConfigError(f"unknown backend {name!r} — use one of {', '.join(kinds)}", ("backend", "kind"))
    return kinds[name]
