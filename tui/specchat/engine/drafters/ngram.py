"""Drafts copied from earlier text of the conversation, or of replies remembered from other chats (method "ngram";
prompt lookup, llama.cpp's ngram types)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import NO_DRAFT, Draft, Drafter, Method

if TYPE_CHECKING:
    from ..rules import Rules


class _Index:
    """The n-grams of one token sequence, each with the positions that followed its most recent occurrences."""

    OCCURRENCES = 8  # occurrences kept per key: the most recent ones

    def __init__(self, sizes: range) -> None:
        self.sizes = sizes
        self.follows: dict[tuple[int, ...], list[int]] = {}
        self.indexed = 0  # n-grams ending before this position are in the index

    def extend(self, seq: Sequence[int], end: int) -> None:
        """Index the n-grams of ``seq`` that end before ``end``."""
        for stop in range(self.indexed, end):
            for n in self.sizes:
                if stop + 1 >= n:
                    follows = self.follows.setdefault(tuple(seq[stop + 1 - n : stop + 1]), [])
                    follows.append(stop + 1)
                    if len(follows) > self.OCCURRENCES:
                        del follows[0]
        self.indexed = max(self.indexed, end)


class NgramDrafter(Drafter):
    """Prompt lookup: the reply is drafted from what followed the same text earlier in the conversation, or in replies
    remembered from earlier conversations of this session (asking again, regenerating, an A/B rerun).

    The n-grams of sizes ``key_min..key_max`` are indexed incrementally, so a proposal costs a few lookups, never a
    rescan. A proposal takes the longest key the conversation ends with; among that key's occurrences, those whose
    match reaches about as far back as the best one vote on the first token (ties go to the longer match, the current
    conversation, the more recent), and the draft goes on as far as the occurrences that agreed go on alike — it stops
    where the copies diverge. ``Draft.match`` is how many tokens the match reached back: a long match means the reply
    is copying, and "auto" trusts such drafts more.
    """

    MAX_MATCH = 256  # how far back a match is followed
    MEMORY_TOKENS = 65_536  # remembered tokens at most; the oldest half goes when it is full
    SEPARATOR = -1  # between remembered sequences: no token matches it

    def __init__(self, key_min: int = 2, key_max: int = 4) -> None:
        self.sizes = range(key_max, key_min - 1, -1)
        self._kept: list[tuple[int | None, list[int]]] = []  # each remembered sequence with the chat it came from
        self._index_kept()
        self.reset()

    def _index_kept(self) -> None:
        """The remembered sequences laid end to end, separated, and indexed anew."""
        self._memory = [token for _, tokens in self._kept for token in (self.SEPARATOR, *tokens)]
        self._recall = _Index(self.sizes)
        self._recall.extend(self._memory, len(self._memory))

    def reset(self) -> None:
        """Start over with a new conversation (what is remembered stays)."""
        self._conversation = _Index(self.sizes)

    def forget(self) -> None:
        """Forget the remembered replies too."""
        self._kept = []
        self._index_kept()
        self.reset()

    def forget_chats(self, chats: set[int]) -> None:
        """Forget the replies remembered from these chats (deleted, made private, or messages of them deleted)."""
        kept = [(chat, tokens) for chat, tokens in self._kept if chat not in chats]
        if len(kept) != len(self._kept):
            self._kept = kept
            self._index_kept()

    @property
    def remembered(self) -> int:
        """Tokens kept from earlier conversations."""
        return sum(len(tokens) for _, tokens in self._kept)

    @property
    def index_size(self) -> int:
        """n-gram keys indexed: the conversation's and the remembered replies' together."""
        return len(self._conversation.follows) + len(self._recall.follows)

    def remember(self, tokens: Sequence[int], chat: int | None = None) -> None:
        """Keep ``tokens`` (a reply and the text just before it, in stored chat ``chat``, None for none) for drafting in
        later conversations."""
        if len(self._memory) + len(tokens) >= self.MEMORY_TOKENS:  # the oldest half goes
            total = len(self._memory)
            while self._kept and total > self.MEMORY_TOKENS // 2:
                total -= len(self._kept.pop(0)[1]) + 1
            self._index_kept()
        self._kept.append((chat, list(tokens)))
        self._memory += [self.SEPARATOR, *tokens]
        self._recall.extend(self._memory, len(self._memory))

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        # The n-gram ending at the last token is the key: only earlier ones may answer it.
        self._conversation.extend(seq, len(seq) - 1)
        for n in self.sizes:
            if len(seq) <= n:
                continue
            key = tuple(seq[len(seq) - n :])
            occurrences = ([(seq, follow, 1) for follow in self._conversation.follows.get(key, ())]
                           + [(self._memory, follow, 0) for follow in self._recall.follows.get(key, ())])
            if occurrences:
                return self._continuation(seq, occurrences, n, budget, rules)
        return NO_DRAFT

    def _continuation(self, seq: Sequence[int], occurrences: list[tuple[Sequence[int], int, int]], n: int, budget: int,
                      rules: Rules) -> Draft:
        matches = sorted(((self._match_length(seq, source, follow, n), current, follow, source)
                          for source, follow, current in occurrences), key=lambda m: m[:3], reverse=True)
        best = matches[0][0]
        # Occurrences that matched about as well as the best one; much shorter matches are weaker evidence.
        # (An occurrence that ends its remembered sequence has nothing after it: the separator is no token.)
        group = [(source, follow) for length, _, follow, source in matches
                 if length * 2 >= best and follow < len(source) and source[follow] != self.SEPARATOR]
        if not group:
            return NO_DRAFT
        first = [source[follow] for source, follow in group]
        token = max(first, key=lambda t: (first.count(t), -first.index(t)))
        group = [(source, follow) for source, follow in group if source[follow] == token]
        tokens = [token]
        while len(tokens) < budget and not rules.vocab.is_eog(tokens[-1]):
            i = len(tokens)
            ahead = {source[follow + i] for source, follow in group if follow + i < len(source)}
            if len(ahead) != 1 or self.SEPARATOR in ahead:
                break  # the copies diverge here, or none goes further
            tokens.append(ahead.pop())
        if not rules.top:
            return Draft(tokens, match=best, from_text=True)
        source, follow = group[0]  # the best-ranked occurrence that agreed: the text shown as the copy's source
        start = follow - self._match_length(seq, source, follow, n)
        return Draft(tokens, match=best, copied=list(source[start: follow + len(tokens)]),
                     remembered=source is self._memory, from_text=True)

    def _match_length(self, seq: Sequence[int], source: Sequence[int], follow: int, n: int) -> int:
        """How many tokens before ``follow`` in ``source`` equal the end of ``seq`` (at least the key's ``n``)."""
        last, length = len(seq) - 1, n
        limit = min(self.MAX_MATCH, follow, len(seq))
        while length < limit and source[follow - 1 - length] == seq[last - length]:
            length += 1
        return length


METHOD = Method("ngram", "copies from earlier text where the conversation repeats itself; no draft model",
                "ngram-simple", build=lambda parts: parts.ngram, copies=True)
