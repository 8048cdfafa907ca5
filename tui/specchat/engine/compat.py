"""llama.cpp's rule for whether a draft can speculate for a target (``common_speculative_are_compatible``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Token ids below this are control tokens that families renumber freely; llama.cpp skips them too.
FIRST_CHECKED_TOKEN = 5
MAX_VOCAB_SIZE_DIFFERENCE = 128


@dataclass(frozen=True)
class VocabInfo:
    name: str
    vocab_type: str
    n_vocab: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    token_text: Callable[[int], bytes]


def compatibility_problems(target: VocabInfo, draft: VocabInfo) -> list[str]:
    """Every rule the pair fails, each naming the values that differ; empty when compatible."""
    problems = []
    if target.vocab_type != draft.vocab_type:
        problems.append(f"vocabulary type differs (target {target.vocab_type}, draft {draft.vocab_type})")
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        problems.append(
            f"BOS differs (target add_bos={target.add_bos} id={target.bos}, draft add_bos={draft.add_bos} id={draft.bos})"
        )
    if target.add_eos != draft.add_eos or target.eos != draft.eos:
        problems.append(
            f"EOS differs (target add_eos={target.add_eos} id={target.eos}, draft add_eos={draft.add_eos} id={draft.eos})"
        )
    gap = abs(target.n_vocab - draft.n_vocab)
    if gap > MAX_VOCAB_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary sizes differ by {gap} > {MAX_VOCAB_SIZE_DIFFERENCE} (target {target.n_vocab}, draft {draft.n_vocab})"
        )
    for token in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        a, b = target.token_text(token), draft.token_text(token)
        if a != b:
            problems.append(f"token {token} differs (target {a!r}, draft {b!r})")
            break
    return problems


def vocab_from_metadata(name: str, meta: dict[str, Any]) -> VocabInfo:
    """The vocabulary facts of a GGUF header (see ``gguf_header.read_metadata``)."""
    tokens: list[str] = meta.get("tokenizer.ggml.tokens") or []
    return VocabInfo(
        name=name,
        vocab_type=str(meta.get("tokenizer.ggml.model", "none")),
        n_vocab=len(tokens),
        bos=meta.get("tokenizer.ggml.bos_token_id", -1),
        eos=meta.get("tokenizer.ggml.eos_token_id", -1),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        token_text=lambda i: tokens[i].encode("utf-8"),
    )


def check_pair(target: Path, draft: Path) -> list[str]:
    """The compatibility problems of a target/draft pair, read from their headers without loading weights."""
    from .gguf_header import read_metadata

    return compatibility_problems(
        vocab_from_metadata(target.name, read_metadata(target)), vocab_from_metadata(draft.name, read_metadata(draft))
    )
