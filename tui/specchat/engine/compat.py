"""llama.cpp's rule for whether a draft can speculate for a target (``common_speculative_are_compatible``).

The vocabulary facts are read by llama.cpp itself (a vocabulary-only load: no weights), so defaults that a GGUF leaves
out — whether to add BOS, which depends on the tokenizer and its pre-tokenizer — are the ones llama.cpp will use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .file_version import FileVersion, file_version

# Token ids below this are control tokens that families renumber freely; llama.cpp skips them too.
FIRST_CHECKED_TOKEN = 5
MAX_VOCAB_SIZE_DIFFERENCE = 128


@dataclass(frozen=True)
class VocabInfo:
    vocab_type: int
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
    # EOS ids matter only when the tokenizer appends EOS; otherwise llama.cpp does not compare them.
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        problems.append(
            f"EOS differs (target add_eos={target.add_eos} id={target.eos}, draft add_eos={draft.add_eos} id={draft.eos})"
        )
    gap = abs(target.n_vocab - draft.n_vocab)
    if gap > MAX_VOCAB_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary sizes differ by {gap} > {MAX_VOCAB_SIZE_DIFFERENCE} (target {target.n_vocab}, draft {draft.n_vocab})"
        )
    else:
        for token in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
            a, b = target.token_text(token), draft.token_text(token)
            if a != b:
                problems.append(f"token {token} differs (target {a!r}, draft {b!r})")
                break
    return problems


def read_vocab(path: Path, role: str) -> tuple[VocabInfo, Callable[[], None]]:
    """The vocabulary facts of a GGUF as llama.cpp reads them, and the function that frees them."""
    from .llama import Model

    model = Model(path, role=role, vocab_only=True)
    info = VocabInfo(model.vocab_type, model.n_vocab, model.bos, model.eos, model.add_bos, model.add_eos,
                     model.token_text)
    return info, model.close


_judged: dict[tuple[FileVersion, FileVersion], tuple[str, ...]] = {}  # pairs judged, by both files' versions


def check_pair(target: Path, draft: Path) -> list[str]:
    """The compatibility problems of a target/draft pair, without loading either model's weights: judged once per
    version of both files (every load of the pair and every F2 listing of drafts asks again)."""
    versions = file_version(target), file_version(draft)
    if versions[0] is None or versions[1] is None:
        return _judge(target, draft)
    key = (versions[0], versions[1])
    judged = _judged.get(key)  # (threads may judge the same pair at once: each gets the same verdict)
    if judged is None:
        judged = _judged[key] = tuple(_judge(target, draft))
    return list(judged)


def _judge(target: Path, draft: Path) -> list[str]:
    target_vocab, close_target = read_vocab(target, "target")
    try:
        draft_vocab, close_draft = read_vocab(draft, "draft")
        try:
            return compatibility_problems(target_vocab, draft_vocab)
        finally:
            close_draft()
    finally:
        close_target()
