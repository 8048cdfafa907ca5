"""Drafts from a second, smaller GGUF that shares the target's vocabulary (method "draft"; llama.cpp's draft-simple)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..llama import SequenceCache, common_prefix
from ..sampling import Dist, distribution, greedy_token, top_probability
from .base import NO_DRAFT, Draft, Drafter, Method

if TYPE_CHECKING:
    from ..rules import Rules


class ModelDrafter(Drafter):
    """Drafts with a second GGUF that shares the target's vocabulary, keeping its own KV cache across steps."""

    def __init__(self, ctx: SequenceCache, n_vocab: int) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.blocked = ""  # why the draft cannot read the conversation, when it cannot
        self._buffer: np.ndarray | None = None

    def notice(self, seq: Sequence[int]) -> None:
        """Whether the draft can read the conversation as it now is (``blocked`` says why not). Vocabularies may
        differ by up to 128 ids: a conversation holding an id the draft does not have cannot be decoded by it, so
        nothing is drafted until that id leaves the conversation."""
        unknown = next((t for t in seq[common_prefix(self.ctx.cached, seq):] if t >= self.n_vocab), None)
        self.blocked = "" if unknown is None else \
            f"the draft model cannot read token {unknown} of the conversation (its vocabulary is smaller)"

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        self.notice(seq)
        if self.blocked:
            return NO_DRAFT
        self.ctx.sync(seq)
        sampling = rules.sampling
        tokens: list[int] = []
        qs: list[Dist] = []
        rows = self._rows(budget) if rules.top else None
        for i in range(budget):
            row = self.ctx.logits()[-1]
            if rows is not None:
                rows[i] = row
            # Confidence depends only on what precedes this position, never on the token drawn for it, so stopping
            # here keeps sampled output exact.
            if sampling.greedy:
                if rules.p_min > 0 and top_probability(row) < rules.p_min:
                    return Draft(tokens, None, withheld=1, rows=rows)
                token = greedy_token(row)
            else:
                q = distribution(row, sampling)
                if q.top_prob() < rules.p_min:
                    return Draft(tokens, qs, withheld=1, rows=rows)
                token = q.sample(rules.draft_rng)
                qs.append(q)
            tokens.append(token)
            # Nothing after an end token is needed, and nothing after an id the target does not have can be judged.
            if rules.vocab.is_eog(token) or token >= rules.vocab.n_vocab:
                break
            if i + 1 < budget:
                self.ctx.decode([token])
        return Draft(tokens, None if sampling.greedy else qs, rows=rows)

    def _rows(self, n: int) -> np.ndarray:
        """A buffer for ``n`` rows of draft logits, reused from step to step (a copy costs less than ranking it)."""
        if self._buffer is None or len(self._buffer) < n:
            self._buffer = np.empty((n, self.ctx.model.n_vocab), dtype=np.float32)
        return self._buffer[:n]



METHOD = Method("draft", "a smaller model of the same family drafts; the target verifies", "draft-simple",
                build=lambda parts: parts.model, draft_model=True)
