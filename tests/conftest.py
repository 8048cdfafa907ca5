"""Shared fixtures: the real bundled model pair, loaded through llama-cpp-python."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specchat.profiles import embedded
from specchat.engine.config import EngineConfig, ModelSpec, SpecConfig
from specchat.engine.core import Engine
from specchat.engine.events import (
    ContextTrimmed,
    DraftRejected,
    Event,
    ReplyFinished,
    ReplyStarted,
    StepVerified,
    TokenEmitted,
)
from specchat.engine.sampling import SamplingParams

THREADS = 2


@pytest.fixture
def isolated_user_dirs(tmp_path, monkeypatch) -> None:
    """No real model folders, user profiles or keymaps leak into a test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("SPECCHAT_MODEL_DIRS", "LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def target_path() -> Path:
    return embedded.target_path()


@pytest.fixture(scope="session")
def draft_path() -> Path:
    return embedded.draft_path()


@dataclass
class Run:
    """Everything one reply produced, split by event type."""

    events: list[Event]
    tokens: list[TokenEmitted] = field(default_factory=list)
    rejected: list[DraftRejected] = field(default_factory=list)
    steps: list[StepVerified] = field(default_factory=list)
    trimmed: list[ContextTrimmed] = field(default_factory=list)

    def __post_init__(self) -> None:
        for e in self.events:
            {TokenEmitted: self.tokens, DraftRejected: self.rejected, StepVerified: self.steps,
             ContextTrimmed: self.trimmed}.get(type(e), []).append(e)

    @property
    def started(self) -> ReplyStarted:
        return next(e for e in self.events if isinstance(e, ReplyStarted))

    @property
    def finished(self) -> ReplyFinished:
        assert isinstance(self.events[-1], ReplyFinished)
        return self.events[-1]

    @property
    def ids(self) -> list[int]:
        return [t.token for t in self.tokens]


def run(engine: Engine, prompt: str, **kwargs) -> Run:
    return Run(list(engine.reply(prompt, **kwargs)))


EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(target_path: Path, draft_path: Path) -> Iterator[EngineFactory]:
    engines: list[Engine] = []

    def factory(method: str = "none", *, n_ctx: int = 2048, sampling: SamplingParams | None = None,
                system_prompt: str | None = "You are a helpful assistant.", **spec) -> Engine:
        config = EngineConfig(
            target=ModelSpec(target_path, threads=THREADS),
            draft=ModelSpec(draft_path, threads=THREADS) if method == "draft" else None,
            spec=SpecConfig(method, **spec),
            sampling=sampling or SamplingParams(),
            n_ctx=n_ctx,
            system_prompt=system_prompt,
        )
        engine = Engine(config)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        engine.close()
