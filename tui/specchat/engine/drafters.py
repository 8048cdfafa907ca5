"""Where draft tokens come from: a smaller model, or earlier text of the conversation itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .llama import SequenceCache, common_prefix
from .sampling import Dist, distribution, greedy_token, top_probability

if TYPE_CHECKING:
    from .loop import Rules


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: list[int]
    # Per-token draft distributions when the draft was sampled; None for one-hot drafts (greedy or n-gram).
    q: list[Dist] | None = None
    withheld: int = 0  # 1 when drafting stopped because the next token's confidence was below p_min
    match: int = 0  # n-gram drafts: how many tokens before the copied text matched the end of the conversation


NO_DRAFT = Draft([])


class ModelDrafter:
    """Drafts with a second GGUF that shares the target's vocabulary, keeping its own KV cache across steps."""

    def __init__(self, ctx: SequenceCache, n_vocab: int) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.blocked = ""  # why the draft cannot read the conversation, when it cannot

    def propose(self, seq: Sequence[int], n_max: int, rules: Rules) -> Draft:
        # Vocabularies may differ by up to 128 ids: a conversation holding an id the draft does not have cannot be
        # decoded by it, so nothing is drafted until that id leaves the conversation.
        unknown = next((t for t in seq[common_prefix(self.ctx.cached, seq):] if t >= self.n_vocab), None)
        if unknown is not None:
            self.blocked = f"the draft model cannot read token {unknown} of the conversation (its vocabulary is smaller)"
            return NO_DRAFT
        self.blocked = ""
        self.ctx.sync(seq)
        sampling = rules.sampling
        tokens: list[int] = []
        qs: list[Dist] = []
        for i in range(n_max):
            row = self.ctx.logits()[-1]
            # Confidence depends only on what precedes this position, never on the token drawn for it, so stopping
            # here keeps sampled output exact.
            if sampling.greedy:
                if rules.p_min > 0 and top_probability(row) < rules.p_min:
                    return Draft(tokens, None, withheld=1)
                token = greedy_token(row)
            else:
                q = distribution(row, sampling)
                if q.top_prob() < rules.p_min:
                    return Draft(tokens, qs, withheld=1)
                token = q.sample(rules.draft_rng)
                qs.append(q)
            tokens.append(token)
            # Nothing after an end token is needed, and nothing after an id the target does not have can be judged.
            if rules.vocab.is_eog(token) or token >= rules.vocab.n_vocab:
                break
            if i + 1 < n_max:
                self.ctx.decode([token])
        return Draft(tokens, None if sampling.greedy else qs)


class NgramDrafter:
    """Prompt lookup over the whole conversation: the reply is drafted from what followed the same text earlier.

    Every n-gram of sizes ``key_min..key_max`` is indexed incrementally with the positions that followed its most
    recent occurrences, so a proposal costs a few lookups, never a rescan. A proposal takes the longest key the
    sequence ends with; among that key's occurrences, the one whose match reaches furthest back (the most recent on
    a tie), and drafts what followed it — cut where another occurrence that matched about as well went on
    differently, since the copies diverge there. ``Draft.match`` is how many tokens the match reached back: a long
    match means the reply is copying, and "auto" trusts such drafts more.
    """

    blocked = ""
    OCCURRENCES = 8  # occurrences kept per key: the most recent ones
    MAX_MATCH = 64  # how far back a match is followed

    def __init__(self, key_min: int = 2, key_max: int = 4) -> None:
        self.sizes = range(key_max, key_min - 1, -1)
        self.reset()

    def reset(self) -> None:
        self._index: dict[tuple[int, ...], list[int]] = {}
        self._indexed = 0  # n-grams ending before this position are in the index

    def propose(self, seq: Sequence[int], n_max: int, rules: Rules) -> Draft:
        end = len(seq) - 1  # the n-gram ending at the last token is the key; only earlier ones may answer it
        for stop in range(self._indexed, end):
            for n in self.sizes:
                if stop + 1 >= n:
                    follows = self._index.setdefault(tuple(seq[stop + 1 - n : stop + 1]), [])
                    follows.append(stop + 1)
                    if len(follows) > self.OCCURRENCES:
                        del follows[0]
        self._indexed = max(self._indexed, end)
        for n in self.sizes:
            if len(seq) > n and (follows := self._index.get(tuple(seq[len(seq) - n :]))):
                return self._continuation(seq, follows, n, n_max, rules)
        return NO_DRAFT

    def _continuation(self, seq: Sequence[int], follows: list[int], n: int, n_max: int, rules: Rules) -> Draft:
        """What followed the best occurrences of the key: their vote at the first token (ties go to the longer match,
        then the more recent), then as far as those that agreed go on alike."""
        matches = sorted(((self._match_length(seq, follow, n), follow) for follow in follows), reverse=True)
        best = matches[0][0]
        # Occurrences that matched about as well as the best one; much shorter matches are weaker evidence.
        group = [follow for length, follow in matches if length * 2 >= best]
        first = [seq[follow] for follow in group if follow < len(seq)]
        if not first:
            return NO_DRAFT
        token = max(first, key=lambda t: (first.count(t), -first.index(t)))
        group = [follow for follow in group if follow < len(seq) and seq[follow] == token]
        tokens = [token]
        while len(tokens) < n_max and not rules.vocab.is_eog(tokens[-1]):
            ahead = {seq[follow + len(tokens)] for follow in group if follow + len(tokens) < len(seq)}
            if len(ahead) != 1:
                break  # the copies diverge here, or none goes further
            tokens.append(ahead.pop())
        return Draft(tokens, match=best)

    def _match_length(self, seq: Sequence[int], follow: int, n: int) -> int:
        """How many tokens before ``follow`` equal the tokens at the end of ``seq`` (at least the key's ``n``)."""
        last, length = len(seq) - 1, n
        limit = min(self.MAX_MATCH, follow)
        while length < limit and seq[follow - 1 - length] == seq[last - length]:
            length += 1
        return length


Drafter = ModelDrafter | NgramDrafter
