"""Drafts copied from earlier text, the user's stored chats included (method "suffix", after SuffixDecoding and
vLLM's ``method: "suffix"``).

Two sources answer each step: the conversation (with the replies this process gave in other chats — the n-gram
drafter) and every stored reply of earlier chats (``history``). The longer match drafts: how far back the text before
a copy agrees with the end of the conversation is the best evidence that the copy goes on; at the same length the
conversation's copy wins, being the closer text. Until the index over earlier chats is built (off the engine's
thread) the conversation drafts alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import Draft, Drafter, Method

if TYPE_CHECKING:
    from ..rules import Rules


class SuffixDrafter(Drafter):
    def __init__(self, ngram: Drafter, stored_chats: Drafter) -> None:
        self.ngram, self.stored_chats = ngram, stored_chats

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        copy = self.ngram.propose(seq, budget, rules)
        recalled = self.stored_chats.propose(seq, budget, rules)
        return recalled if recalled.tokens and recalled.match > copy.match else copy


METHOD = Method("suffix", "copies from earlier text of this chat and of every stored chat (a llama.cpp server runs"
                " ngram-cache on lookup caches of the stored chats); no draft model", "ngram-cache",
                build=lambda parts: SuffixDrafter(parts.ngram, parts.stored_chats), copies=True, reads_stored_chats=True)
