"""An MTP target's drafter: heads inside the target (Qwen3.5/3.6: ``nextn_predict_layers`` in its header), or a
separate assistant GGUF (Gemma 4: ``general.architecture`` "gemma4_assistant", passed to llama-server as the draft
model with ``--spec-type draft-mtp``; ggml-org/llama.cpp #22673, #23398). A profile names its assistant, or one is found
beside the target by its architecture — LM Studio keeps them in an ``MTP/`` folder."""

from __future__ import annotations

from pathlib import Path

from ..engine.gguf_header import read_metadata
from ..errors import ConfigError, ModelError

ASSISTANT = "_assistant"  # an assistant's architecture is its target's with this after it


def has_mtp_heads(meta: dict) -> bool:
    arch = meta.get("general.architecture", "")
    return int(meta.get(f"{arch}.nextn_predict_layers") or 0) > 0


def _architecture(path: Path) -> str:
    try:
        return str(read_metadata(path).get("general.architecture", ""))
    except ModelError:
        return ""  # a file that is no GGUF (or a broken one) is nobody's assistant


def find_assistant(target: Path) -> Path | None:
    """The assistant GGUF beside ``target``: in its folder, or an ``MTP/`` folder there or beside it."""
    wanted = _architecture(target) + ASSISTANT
    for folder in (target.parent, target.parent / "MTP", target.parent.parent / "MTP"):
        for candidate in sorted(folder.glob("*.gguf")) if folder.is_dir() else ():
            if candidate != target and _architecture(candidate) == wanted:
                return candidate
    return None


def no_drafter(target: Path, meta: dict) -> str:
    """The line for an MTP target with neither heads nor an assistant: what is missing and what to do."""
    arch = meta.get("general.architecture", "?")
    return (f"{target.name} has no MTP heads of its own ({arch}) and no assistant GGUF ({arch}{ASSISTANT}) was found"
            " beside it or in an MTP/ folder — download its assistant (LM Studio keeps it in MTP/) or name it as"
            " [draft] model")


def mtp_drafter(target: Path) -> Path | None:
    """What drafts for an MTP target named no assistant: None when its own heads do, else the assistant found beside
    it; one line saying what to do when there is neither."""
    meta = read_metadata(target)
    if has_mtp_heads(meta):
        return None
    found = find_assistant(target)
    if found is None:
        raise ConfigError(no_drafter(target, meta), ("draft", "model"))
    return found
