"""What an engine runs: which models, how it speculates, how it samples. Validated on construction. Where a chat runs
(a llama-server, a remote box) is the backends' part of it: ``backends.run_config``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..errors import ConfigError
from .cpu import cores
from .drafters import METHODS
from .repetition import LoopRule
from .sampling import SamplingParams

# The target's KV cache types. q8_0 and bf16 keep a verify batch bit-identical to one-at-a-time decoding; f16 does not
# on the CPU beyond 256 tokens of context (llama.cpp splits a lone token's f16 attention across threads).
KV_CACHES = ("q8_0", "bf16", "f16")
DEFAULT_MAX_TOKENS = 1024  # the longest reply when a front end does not say
AnyConfig = TypeVar("AnyConfig", bound="EngineConfig")  # the engine's configuration, or a chat's (``RunConfig``)


def default_threads() -> int:
    """One per core this process may run on (``taskset``, a container's cpuset), at most 8."""
    return max(1, min(cores(), 8))


@dataclass(frozen=True)
class ModelSettings:
    path: Path
    n_gpu_layers: int = 0
    threads: int = field(default_factory=default_threads)

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError(f"threads must be ≥ 1, got {self.threads}")


DEFAULT_N_MAX = 4  # draft tokens a step where a profile sets no n_max


@dataclass(frozen=True)
class SpecConfig:
    method: str = "none"
    n_max: int | str = DEFAULT_N_MAX  # the draft cap, or "auto": adaptive draft length with an automatic off-switch
    n_min: int = 0
    p_min: float = 0.0
    ngram_min: int = 2
    ngram_max: int = 4
    off_by_hand: bool = False  # method "none" because the user switched speculation off for a while, not the profile

    def __post_init__(self) -> None:
        # The profile parser builds one too: these rules are checked here only, and it names the key's line.
        if self.method not in METHODS:
            raise ConfigError(f"unknown speculation method {self.method!r} — use one of {', '.join(METHODS)}",
                              ("draft", "method"))
        if self.n_max != "auto" and not (isinstance(self.n_max, int) and self.n_max >= 1):
            raise ConfigError(f"n_max must be an integer ≥ 1 (draft tokens per step) or \"auto\", got {self.n_max!r}",
                              ("draft", "n_max"))
        method = METHODS[self.method]
        if self.adaptive and method.build is not None and not (method.copies or method.draft_model):
            # "auto" prices a copy by its match, a model's draft by its acceptance and the draft model's cost
            raise ConfigError(f"method '{self.method}' has no \"auto\" draft length — set n_max to a number of"
                              " tokens", ("draft", "n_max"))
        if self.n_min < 0:
            raise ConfigError(f"n_min must be ≥ 0, got {self.n_min}", ("draft", "n_min"))
        if isinstance(self.n_max, int) and self.n_min > self.n_max:
            raise ConfigError(f"n_min {self.n_min} exceeds n_max {self.n_max}", ("draft", "n_min"))
        if not 0 <= self.p_min <= 1:
            raise ConfigError(f"p_min must be a probability in [0, 1], got {self.p_min}", ("draft", "p_min"))
        if self.ngram_min < 1:
            raise ConfigError(f"ngram_min must be ≥ 1, got {self.ngram_min}", ("draft", "ngram_min"))
        if self.ngram_min > self.ngram_max:
            raise ConfigError(f"ngram_min exceeds ngram_max ({self.ngram_min} > {self.ngram_max})",
                              ("draft", "ngram_min"))

    @property
    def adaptive(self) -> bool:
        return self.n_max == "auto"

    @property
    def uses_draft_model(self) -> bool:
        """Loads [draft] model."""
        return METHODS[self.method].draft_model

    @property
    def copies(self) -> bool:
        """Drafts by copying earlier text (the n-gram drafter)."""
        return METHODS[self.method].copies

    @property
    def reads_stored_chats(self) -> bool:
        """Copies from the user's stored chats too (methods "suffix" and "suffix+draft")."""
        return METHODS[self.method].reads_stored_chats


@dataclass(frozen=True)
class EngineConfig:
    target: ModelSettings
    draft: ModelSettings | None = None
    spec: SpecConfig = SpecConfig()
    sampling: SamplingParams = SamplingParams()
    n_ctx: int = 4096
    kv_cache: str = "q8_0"  # the target's KV cache type, one of KV_CACHES
    system_prompt: str | None = None
    chat_template: str | None = None  # a Jinja file or one of llama.cpp's names; None: the GGUF's own
    adapt_threads: bool = True  # fewer threads while other processes keep the cores busy (engine/cpu.py)
    loop: LoopRule | None = None  # stop a reply that repeats itself (engine/repetition.py); profiles turn it on

    def __post_init__(self) -> None:
        if self.n_ctx < 64:
            raise ConfigError(f"n_ctx must be ≥ 64 tokens, got {self.n_ctx}")
        if self.kv_cache not in KV_CACHES:
            raise ConfigError(f"unknown KV cache type {self.kv_cache!r} — use one of {', '.join(KV_CACHES)}")
        check_method(self.spec, self.draft is not None, in_engine=self.in_engine, own_models=self.own_models)

    @property
    def in_engine(self) -> bool:
        """Whether specchat's engine runs it (every method with a drafter here) rather than a server (the methods only
        llama.cpp runs); ``backends.run_config.RunConfig`` says when a backend does."""
        return True

    @property
    def own_models(self) -> bool:
        """Whether the models are a server's own: then it needs no draft file named here."""
        return False


def check_method(spec: SpecConfig, draft_named: bool, *, in_engine: bool, own_models: bool) -> None:
    """What the method needs of the rest of the configuration: a draft model (a server with its own models holds
    one), a llama.cpp server for a method only it runs. The profile parser checks a profile with this too."""
    method = METHODS[spec.method]
    if method.draft_model and not draft_named and not own_models:
        raise ConfigError(f"method '{spec.method}' needs [draft] model — name a draft GGUF", ("draft", "method"))
    if method.server_only and in_engine:
        raise ConfigError(f"method '{spec.method}' needs a llama.cpp server — set [backend] kind = \"llama-server\""
                          f" ({method.server_only})", ("draft", "method"))


SWITCHED_OFF_BY_HAND = "switched off by hand — Ctrl+T in the app, /spec on in the REPL, turns it back on"


def without_speculation(config: AnyConfig) -> AnyConfig:
    """The same configuration decoding plainly: the other arm of every comparison."""
    return dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none"))
