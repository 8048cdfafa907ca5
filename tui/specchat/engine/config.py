"""What an engine runs: which models, how it speculates, how it samples. Validated on construction."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .loops import LoopRule
from .sampling import SamplingParams

# "ngram+draft": the n-gram drafter's copy where the conversation has a match worth verifying, the draft model otherwise
METHODS = ("none", "draft", "ngram", "ngram+draft", "mtp")
DRAFT_MODEL_METHODS = ("draft", "ngram+draft")  # the methods that load [draft] model
BACKENDS = ("local", "llama-server", "remote")
# llama.cpp's --spec-type names (common/speculative.cpp)
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple",
              "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
APIS = ("auto", "llama.cpp", "openai")
# The target's KV cache types. q8_0 and bf16 keep a verify batch bit-identical to one-at-a-time decoding; f16 does not
# on the CPU beyond 256 tokens of context (llama.cpp splits a lone token's f16 attention across threads).
KV_CACHES = ("q8_0", "bf16", "f16")
DEFAULT_MAX_TOKENS = 1024  # the longest reply when a front end does not say


def known_spec_type(value: str) -> bool:
    """One of llama.cpp's spec types, or a comma-separated list of them (the first that drafts wins, n-grams first)."""
    return all(name in SPEC_TYPES for name in value.split(","))  # llama.cpp splits on commas alone: no spaces


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@dataclass(frozen=True)
class ModelSpec:
    path: Path
    n_gpu_layers: int = 0
    threads: int = field(default_factory=default_threads)

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError(f"threads must be ≥ 1, got {self.threads}")


@dataclass(frozen=True)
class SpecConfig:
    method: str = "none"
    n_max: int | str = 4  # or "auto": adaptive draft length with an automatic off-switch
    n_min: int = 0
    p_min: float = 0.0
    ngram_min: int = 2
    ngram_max: int = 4
    off_by_hand: bool = False  # method "none" because the user switched speculation off for a while, not the profile

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"unknown speculation method {self.method!r} — use one of {', '.join(METHODS)}")
        if self.n_max != "auto" and not (isinstance(self.n_max, int) and self.n_max >= 1):
            raise ConfigError(f"n_max must be an integer ≥ 1 (draft tokens per step) or \"auto\", got {self.n_max!r}")
        if self.n_min < 0 or (isinstance(self.n_max, int) and self.n_min > self.n_max):
            raise ConfigError(f"n_min must be between 0 and n_max ({self.n_max}), got {self.n_min}")
        if not 0 <= self.p_min <= 1:
            raise ConfigError(f"p_min must be a probability in [0, 1], got {self.p_min}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(f"n-gram sizes need 1 ≤ ngram_min ≤ ngram_max, got {self.ngram_min}..{self.ngram_max}")

    @property
    def adaptive(self) -> bool:
        return self.n_max == "auto"

    @property
    def uses_draft_model(self) -> bool:
        return self.method in DRAFT_MODEL_METHODS

    @property
    def copies(self) -> bool:
        """Drafts by copying earlier text (the n-gram drafter)."""
        return self.method in ("ngram", "ngram+draft")


@dataclass(frozen=True)
class BackendSpec:
    """Where the model runs: in this process (local), in a llama-server specchat starts (llama-server), or on a server
    already running (remote: llama-server or any OpenAI-compatible one, such as vLLM)."""

    kind: str = "local"
    spec_type: str | None = None  # llama.cpp's --spec-type; None: from the profile's method
    binary: str | None = None
    url: str | None = None
    api_key_env: str | None = None  # the name of the environment variable holding the API key, never the key
    api: str = "auto"
    args: tuple[str, ...] = ()
    ready_timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise ConfigError(f"unknown backend {self.kind!r} — use one of {', '.join(BACKENDS)}")
        if self.spec_type is not None and not known_spec_type(self.spec_type):
            raise ConfigError(f"unknown spec type {self.spec_type!r} — llama.cpp's are {', '.join(SPEC_TYPES)}, or a"
                              " comma-separated list of them")
        if self.kind == "remote" and not self.url:
            raise ConfigError("a remote backend needs [backend] url, e.g. \"http://gpu-box:8080\"")
        if self.api not in APIS:
            raise ConfigError(f"unknown api {self.api!r} — use one of {', '.join(APIS)}")


@dataclass(frozen=True)
class EngineConfig:
    target: ModelSpec
    draft: ModelSpec | None = None
    spec: SpecConfig = SpecConfig()
    sampling: SamplingParams = SamplingParams()
    n_ctx: int = 4096
    kv_cache: str = "q8_0"  # the target's KV cache type, one of KV_CACHES
    system_prompt: str | None = None
    chat_template: str | None = None  # a Jinja file or one of llama.cpp's names; None: the GGUF's own
    backend: BackendSpec = BackendSpec()
    adapt_threads: bool = True  # fewer threads while other processes keep the cores busy (engine/cpu.py)
    loop: LoopRule | None = None  # stop a reply that repeats itself (engine/loops.py); profiles turn it on

    def __post_init__(self) -> None:
        if self.n_ctx < 64:
            raise ConfigError(f"n_ctx must be ≥ 64 tokens, got {self.n_ctx}")
        if self.kv_cache not in KV_CACHES:
            raise ConfigError(f"unknown KV cache type {self.kv_cache!r} — use one of {', '.join(KV_CACHES)}")
        if self.spec.uses_draft_model and self.draft is None and self.backend.kind != "remote":
            raise ConfigError(f"method '{self.spec.method}' needs a draft model — set [draft] model in the profile")
        if self.spec.method == "mtp" and self.backend.kind == "local":
            raise ConfigError("method 'mtp' needs a llama.cpp server (multi-token prediction heads run there, not in"
                              " specchat's own loop) — set [backend] kind = \"llama-server\"")


SWITCHED_OFF_BY_HAND = "switched off by hand — Ctrl+T in the app, /spec on in the REPL, turns it back on"


def without_speculation(config: EngineConfig) -> EngineConfig:
    """The same configuration decoding plainly: the other arm of every comparison."""
    return dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none"))
