"""What llama-server is told: a profile as its command line, its spec type, and what only a new process can change."""

from __future__ import annotations

import dataclasses

from ..engine.drafters import METHODS
from ..errors import ConfigError
from .run_config import RunConfig

DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
SERVER_DEFAULT_N_MAX = 3  # llama-server's --spec-draft-n-max default
BATCH = 512


def uses_draft_model(kind: str) -> bool:
    """Whether a spec type (or a comma-separated list of them) loads a separate draft model."""
    return any(name in DRAFT_MODEL_TYPES for name in kind.split(","))


def loads_draft(config: RunConfig) -> bool:
    """Whether the server loads a second GGUF: a draft model, or the assistant of an MTP target (Gemma 4's)."""
    kind = spec_type(config)
    return config.draft is not None and (uses_draft_model(kind) or kind == "draft-mtp")


def spec_type(config: RunConfig) -> str:
    """llama.cpp's spec type for a configuration; method "none" is plain decoding whatever [backend] spec_type says."""
    if config.spec.method == "none":
        return "none"
    return config.backend.spec_type or METHODS[config.spec.method].spec_type


def reads_lookup_caches(config: RunConfig) -> bool:
    """Whether the server drafts with ngram-cache, which reads the stored chats as lookup caches (``lookup_cache``)."""
    return "ngram-cache" in spec_type(config).split(",")


def learns_across_requests(config: RunConfig) -> bool:
    """Whether the server's drafting keeps what every request said until it stops: its n-gram types hold their tables
    for the whole process (llama.cpp makes the speculative state once per server)."""
    return "ngram" in spec_type(config)


def server_args(config: RunConfig) -> list[str]:
    """llama-server's command line for a profile (host and port are added when it starts)."""
    target, spec, kind = config.target, config.spec, spec_type(config)
    args = ["-m", str(target.path), "-c", str(config.n_ctx), "-t", str(target.threads), "-tb", str(target.threads),
            "-ngl", str(target.n_gpu_layers), "-ctk", config.kv_cache, "-ctv", config.kv_cache, "-np", "1", "--metrics",
            "--no-webui", "--spec-type", kind,
            # The in-process engine's batches (512 tokens); and a request dropped mid-prompt (Esc) stops within one
            # of them, where llama-server's default of 2048 kept the server busy with the rest of the prompt.
            "-b", str(BATCH), "-ub", str(BATCH)]
    if uses_draft_model(kind) and config.draft is None:
        raise ConfigError(f"spec type {kind} needs a draft model — set [draft] model in the profile")
    if loads_draft(config):
        args += ["-md", str(config.draft.path), "-td", str(config.draft.threads), "-ngld", str(config.draft.n_gpu_layers)]
    if kind != "none" and isinstance(spec.n_max, int):
        args += ["--spec-draft-n-max", str(spec.n_max), "--spec-draft-n-min", str(spec.n_min),
                 "--spec-draft-p-min", str(spec.p_min)]
    return args + list(config.backend.args)


def restart_needed(running: RunConfig, new: RunConfig) -> bool:
    """What only a new server process can change: everything but sampling. (llama-server's per-request speculative
    parameters are compiled out of this build — ``#if 0`` in tools/server/server-schema.cpp — so a new draft length
    or method means a new process.)"""
    def fixed(c: RunConfig) -> tuple:  # the loop rule is specchat's, read from the stream
        return dataclasses.replace(c, sampling=running.sampling, system_prompt=None, loop=None)
    return fixed(running) != fixed(new)
