"""The ways of running a model, as profiles name them (``[backend] kind``). Each module of this package that defines
``KIND`` (a ``BackendKind``) is one: ``local`` (specchat's engine in this process), ``llama_server`` (a llama-server
specchat starts), ``remote`` (a server already running). They are found here, so a new backend is one new module
(docs/extending.md: "Adding a backend"); what opens, switches, parses and checks a configuration reads a kind's
capabilities below, never its name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..discovery import declared_in
from ..engine.engine_config import Runner
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..engine.drafters.history import StoredChats
    from . import Backend
    from .run_config import RunConfig


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

    @property
    def runner(self) -> Runner:
        """What the method rules need to know of it (``engine.engine_config.check_method``)."""
        return Runner(engine=self.runs_engine, own_models=self.own_models)


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
