"""The in-process backend: specchat's own speculative engine on llama.cpp, through llama-cpp-python."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..engine import Engine, EngineConfig, Message, ReplyFinished
from ..engine.events import Event, SpeculationState
from ..engine.llama import model_identity
from ..telemetry.memory import peak_rss_bytes, reset_peak_rss


class LocalBackend:
    rejected_tails = True
    where = "in-process (llama-cpp-python)"
    pid = None

    def __init__(self, config: EngineConfig) -> None:
        self.engine = Engine(config)
        self._target_id = model_identity(config.target.path)

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    @property
    def target_id(self) -> str:
        return self._target_id

    @property
    def notes(self) -> list[str]:
        return self.engine.notes

    @property
    def n_max(self) -> int:
        return self.engine.n_max

    def answer(self, history: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False) -> Iterator[Event]:
        self.engine.restore(history)
        reset_peak_rss()
        return self.engine.reply(text, max_tokens=max_tokens, should_stop=should_stop)

    def apply(self, config: EngineConfig) -> str:
        action = self.engine.apply(config)
        if action == "full reload":
            self._target_id = model_identity(config.target.path)
        return action

    def speculation_state(self) -> SpeculationState:
        return self.engine.speculation_state()

    def measure_plain_rate(self) -> float | None:
        return self.engine.measure_plain_rate()

    def rerun_plain(self, history: list[Message], text: str, reused_tokens: int,
                    max_tokens: int) -> tuple[dict[str, Any], list[int]]:
        engine, original = self.engine, self.engine.config
        after = list(engine.messages)
        try:
            engine.restore(history)
            engine.apply(dataclasses.replace(original, spec=dataclasses.replace(original.spec, method="none")))
            engine.truncate_cache(reused_tokens)
            reset_peak_rss()
            finished = [e for e in engine.reply(text, max_tokens=max_tokens) if isinstance(e, ReplyFinished)][-1]
            return finished.stats.summary() | {"peak_rss": peak_rss_bytes()}, list(engine.messages[-1].tokens or [])
        finally:
            engine.apply(original)
            engine.restore(after)

    def render(self, messages: list[Message]) -> str:
        return self.engine.template.render([{"role": m.role, "content": m.content} for m in messages],
                                           add_generation_prompt=True)

    def clear_cache(self, *, replies: bool = False) -> None:
        self.engine.clear_cache(replies=replies)

    def model_files(self) -> dict[str, Path]:
        files = {"target": self.engine.target.path}
        if self.engine.draft_model is not None:
            files["draft"] = self.engine.draft_model.path
        return files

    def close(self) -> None:
        self.engine.close()
