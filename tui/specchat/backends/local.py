"""The in-process backend: specchat's own speculative engine on llama.cpp, through llama-cpp-python."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..engine import Engine, Message, ReplyFinished
from ..engine.engine_config import without_speculation
from ..engine.drafters.stored_chats import StoredChats
from ..engine.conversation import NOT_KEPT, UNSTORED, ChatKey, Forgotten, as_dicts
from ..engine.events import Event, SpeculationState
from ..engine.llama import model_identity
from ..engine.reference import PlainReference
from ..telemetry.memory import peak_rss_bytes, reset_peak_rss
from .run_config import RunConfig
from .run_config import BackendKind
from .offload import asked_gpu_layers, cpu_only_warning, in_process_build


class LocalBackend:
    rejected_tails = True
    where = "in-process (llama-cpp-python)"
    pid = None
    no_reference = ""

    def __init__(self, config: RunConfig, stored: StoredChats | None = None) -> None:
        self.engine = Engine(config, stored_chats_read=stored)
        self._target_id = model_identity(config.target.path)

    @property
    def config(self) -> RunConfig:
        return self.engine.config

    @property
    def target_id(self) -> str:
        return self._target_id

    @property
    def notes(self) -> list[str]:
        offload = self.cpu_only  # (asks NVML which fix to name: once)
        return self.engine.notes + ([offload] if offload else [])

    @property
    def cpu_only(self) -> str:
        return cpu_only_warning(asked_gpu_layers(self.config), in_process_build())

    @property
    def draft_length(self) -> int:
        return self.engine.speculation.draft_length

    def answer(self, earlier: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False, top: int = 0,
               chat: ChatKey = UNSTORED) -> Iterator[Event]:
        self.engine.restore(earlier)
        reset_peak_rss()
        return self.engine.reply(text, max_tokens=max_tokens, should_stop=should_stop, top=top, chat=chat)

    def apply(self, config: RunConfig) -> str:
        action = self.engine.apply(config)
        if action == "full reload":
            self._target_id = model_identity(config.target.path)
        return action

    def speculation_state(self) -> SpeculationState:
        return self.engine.speculation_state()

    def plain_reference(self) -> PlainReference | None:
        reference = self.engine.plain_reference()
        self.no_reference = "" if reference is not None else \
            "not measured — the context has no room for a plain run of 32 tokens (raise n_ctx)"
        return reference

    def rerun_plain(self, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int,
                    should_stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], list[int]]:
        engine, original = self.engine, self.engine.config
        after = engine.chat.snapshot()  # the conversation as it was, a trimmed chat's window included
        try:
            engine.restore(earlier)
            engine.apply(without_speculation(original))
            engine.truncate_cache(reused_tokens)
            reset_peak_rss()
            events = engine.reply(text, max_tokens=max_tokens, should_stop=should_stop, chat=NOT_KEPT)
            finished = [e for e in events if isinstance(e, ReplyFinished)][-1]
            summary = finished.stats.summary() | {"peak_rss": peak_rss_bytes(), "finish_reason": finished.finish_reason}
            return summary, list(engine.messages[-1].tokens or [])
        finally:
            engine.apply(original)
            engine.chat.resume(after)

    def render(self, messages: list[Message]) -> str:
        return self.engine.template.render(as_dicts(messages), add_generation_prompt=True)

    def clear_cache(self, *, replies: bool = False) -> None:
        self.engine.clear_cache(replies=replies)

    def model_files(self) -> dict[str, Path]:
        files = {"target": self.engine.target.path}
        if self.engine.draft_model is not None:
            files["draft"] = self.engine.draft_model.path
        return files

    def learn_stored_chats(self, read: StoredChats, *, wait: bool = False) -> None:
        self.engine.learn_stored_chats(read)
        if wait:
            self.engine.wait_for_stored_chats()

    def forget(self, what: Forgotten) -> None:
        self.engine.forget(what)

    def close(self) -> None:
        self.engine.close()


KIND = BackendKind("local", "in-process", LocalBackend, runs_engine=True)
