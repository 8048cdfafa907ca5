"""The token ids llama-server held back inside a UTF-8 character, recovered from the text that finally came.

llama-server sends no chunk while the text so far ends inside a UTF-8 sequence; the chunk that completes it carries
the text of every token since, but only the last token's id (``tools/server/server-context.cpp``: ``process_token``
skips ``send_partial_response`` while ``incomplete``, and a partial response holds ``tokens.assign(1, tkn.tok)``). Its
``timings.predicted_n`` says how many tokens were generated in all, so the number held back is known, and with the
target's vocabulary on this machine their ids are the split of the held text into exactly that many token pieces.
A CJK character or an emoji that a vocabulary spells as byte tokens has one such split; where several exist (never
seen with the bundled model), the one the tokenizer itself would choose is taken when it has the right length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

MAX_PIECE_BYTES = 64


class Vocabulary(Protocol):
    n_vocab: int

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str, *, add_special: bool) -> list[int]: ...


class PieceIndex:
    """Token ids by the bytes they print, built once per vocabulary (a 49 k vocabulary in about 50 ms)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._ids: dict[bytes, int] | None = None

    def _index(self) -> dict[bytes, int]:
        if self._ids is None:
            ids: dict[bytes, int] = {}
            for token in range(self.vocab.n_vocab):
                piece = self.vocab.piece(token)
                if piece and len(piece) <= MAX_PIECE_BYTES:
                    ids.setdefault(piece, token)  # the lowest id of pieces printed alike (control tokens print nothing)
            self._ids = ids
        return self._ids

    def split(self, held: bytes, count: int) -> list[int] | None:
        """``count`` token ids whose pieces spell ``held``, or None when no such split exists."""
        if count == 0:
            return [] if not held else None
        ids = self._index()
        splits = _splits(held, count, ids)
        if not splits:
            return None
        if len(splits) > 1:
            text = held.decode("utf-8", "replace")
            tokenized = self.vocab.tokenize(text, add_special=False)
            if tokenized in splits:
                return tokenized
        return splits[0]


def _splits(held: bytes, count: int, ids: dict[bytes, int], limit: int = 4) -> list[list[int]]:
    """Up to ``limit`` ways to spell ``held`` with exactly ``count`` pieces (depth-first, shortest pieces first)."""
    found: list[list[int]] = []

    def walk(start: int, left: int, chosen: list[int]) -> None:
        if len(found) >= limit:
            return
        if left == 0:
            if start == len(held):
                found.append(list(chosen))
            return
        rest = len(held) - start
        for length in range(1, min(MAX_PIECE_BYTES, rest - (left - 1)) + 1):
            token = ids.get(held[start:start + length])
            if token is not None:
                chosen.append(token)
                walk(start + length, left - 1, chosen)
                chosen.pop()

    walk(0, count, [])
    return found


def chunk_tokens(index: PieceIndex | None, content: str, ids: Sequence[int], generated: int | None,
                 seen: int) -> list[int | None]:
    """Every token a chunk stands for, oldest first: the held-back ones (None where they cannot be recovered) and
    the ids it carries. ``generated`` is the chunk's cumulative ``predicted_n``, ``seen`` the tokens counted before."""
    held = max(0, (generated - seen if generated is not None else len(ids)) - len(ids))
    if not held:
        return list(ids)
    recovered = None
    if index is not None and ids:
        text = content.encode("utf-8")
        last = b"".join(index.vocab.piece(t) for t in ids)
        if text.endswith(last):
            recovered = index.split(text[: len(text) - len(last)], held)
    return [*(recovered or [None] * held), *ids]
