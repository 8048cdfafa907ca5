"""Loading a target and a draft, and what a configuration change forces to reload: ``ModelPair`` is the one owner of
the models an engine decodes with.

A target's weights and KV cache depend on its file, GPU layers and context size; a draft's weights on its file and GPU
layers. Anything else (threads, method, draft length, sampling) changes without a reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import IncompatibleDraftError
from .chat_template import ChatTemplate
from .compat import check_pair
from .engine_config import EngineConfig, ModelSettings
from .drafters.model import ModelDrafter
from .llama import Context, Model, check_gguf_file
from .phases import announce


def target_identity(config: EngineConfig) -> tuple[object, ...]:
    return (config.target.path, config.target.n_gpu_layers, config.n_ctx, config.kv_cache, config.chat_template)


def draft_identity(model: ModelSettings) -> tuple[object, ...]:
    return (model.path, model.n_gpu_layers)


def check_draft_compatible(target: Path, draft: Path) -> None:
    problems = check_pair(target, draft)
    if problems:
        raise IncompatibleDraftError(
            f"draft {draft.name} cannot speculate for target {target.name}: {problems[0]}"
            " — pick a draft of the same model family (see: specchat profiles drafts)"
        )


@dataclass
class LoadedTarget:
    model: Model
    ctx: Context
    template: ChatTemplate

    @classmethod
    def open(cls, config: EngineConfig) -> LoadedTarget:
        announce(f"loading the target {config.target.path.name}")
        model = Model(config.target.path, role="target", n_gpu_layers=config.target.n_gpu_layers)
        try:
            ctx = Context(model, n_ctx=config.n_ctx, threads=config.target.threads, kv_cache=config.kv_cache)
            template = ChatTemplate.of_model(model, config.chat_template)
        except BaseException:
            model.close()
            raise
        return cls(model, ctx, template)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


@dataclass
class LoadedDraft:
    model: Model
    ctx: Context
    drafter: ModelDrafter
    identity: tuple[object, ...]  # see draft_identity
    threads: int

    @classmethod
    def open(cls, config: EngineConfig) -> LoadedDraft:
        draft = config.draft
        assert draft is not None  # EngineConfig guarantees it for method "draft"
        check_gguf_file(draft.path, "draft")
        # Judge the pair from the vocabularies first: an incompatible draft is refused before its weights load.
        check_draft_compatible(config.target.path, draft.path)
        announce(f"loading the draft {draft.path.name}")
        model = Model(draft.path, role="draft", n_gpu_layers=draft.n_gpu_layers)
        try:
            ctx = Context(model, n_ctx=config.n_ctx, threads=draft.threads)
        except BaseException:
            model.close()
            raise
        return cls(model, ctx, ModelDrafter(ctx, model.n_vocab), draft_identity(draft), draft.threads)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def open_pair(config: EngineConfig) -> tuple[LoadedTarget, LoadedDraft | None]:
    """The target, and the draft model when the method drafts with one; nothing stays loaded if either fails."""
    target = LoadedTarget.open(config)
    try:
        return target, LoadedDraft.open(config) if config.spec.uses_draft_model else None
    except BaseException:
        target.close()
        raise


class ModelPair:
    """The target and the draft model loaded for a configuration; ``switch`` loads only what a new one changes."""

    def __init__(self, config: EngineConfig) -> None:
        self.target, self.draft = open_pair(config)
        self.config = config

    def switch(self, config: EngineConfig) -> str:
        """Load what ``config`` changes; returns "full reload" (the target changed: both models reload), "draft
        reloaded" (only the draft) or "parameters" (nothing reloads). If a load fails the pair stays as it was."""
        old = self.config
        if target_identity(config) != target_identity(old):
            target, draft = open_pair(config)
            self.close()
            self.target, self.draft, self.config = target, draft, config
            return "full reload"
        action = "parameters"
        wanted = config.draft if config.spec.uses_draft_model else None
        if wanted is not None and (self.draft is None or self.draft.identity != draft_identity(wanted)):
            draft = LoadedDraft.open(config)
            if self.draft is not None:
                self.draft.close()
            self.draft = draft
            action = "draft reloaded"
        elif self.draft is not None and (config.draft is None or self.draft.identity != draft_identity(config.draft)):
            # The profile no longer names this draft: free its memory rather than keep it for a toggle back.
            self.draft.close()
            self.draft = None
        if config.target.threads != old.target.threads:
            self.target.ctx.set_threads(config.target.threads)
        if self.draft is not None and config.draft is not None and config.draft.threads != self.draft.threads:
            self.draft.ctx.set_threads(config.draft.threads)
            self.draft.threads = config.draft.threads
        self.config = config
        return action

    def use_threads(self, threads: int) -> None:
        """Decode with ``threads`` threads from now on (never more than each model is configured for)."""
        self.target.ctx.set_threads(min(threads, self.config.target.threads))
        if self.draft is not None:
            self.draft.ctx.set_threads(min(threads, self.draft.threads))

    @property
    def contexts(self) -> list[Context]:
        return [self.target.ctx] + ([self.draft.ctx] if self.draft is not None else [])

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()
