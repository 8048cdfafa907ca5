"""Where draft tokens come from: a smaller model, or earlier text of the conversation itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .llama import Context
from .sampling import Dist, SamplingParams, distribution, greedy_token, top_probability


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: list[int]
    # Per-token draft distributions when the draft was sampled; None for one-hot drafts (greedy or n-gram).
    q: list[Dist] | None = None


class ModelDrafter:
    """Drafts with a second GGUF that shares the target's vocabulary, keeping its own KV cache across steps."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def reset(self) -> None:
        """Nothing to forget: the draft cache is reconciled with the sequence on every proposal."""

    def propose(
        self, seq: Sequence[int], n_max: int, p_min: float, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        self.ctx.sync(seq)
        tokens: list[int] = []
        qs: list[Dist] = []
        for i in range(n_max):
            row = self.ctx.logits()[-1]
            if sampling.greedy:
                token = greedy_token(row)
                confident = p_min <= 0 or top_probability(row) >= p_min
            else:
                q = distribution(row, sampling)
                token = q.sample(rng)
                confident = q.top_prob() >= p_min
                qs.append(q)
            if not confident:
                if qs:
                    qs.pop()
                break
            tokens.append(token)
            if i + 1 < n_max:
                self.ctx.decode([token])
        return Draft(tokens, None if sampling.greedy else qs)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens and propose what followed.

    Keys of every size in [n_min, n_max] are indexed incrementally as the sequence grows, so a proposal costs a few
    dictionary lookups, never a rescan of the context. Longer keys are tried first because they predict better.
    """

    def __init__(self, key_min: int = 2, key_max: int = 4) -> None:
        self.sizes = range(key_max, key_min - 1, -1)
        self.reset()

    def reset(self) -> None:
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are in the index

    def propose(
        self, seq: Sequence[int], n_max: int, p_min: float, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        end = len(seq) - 1  # the n-gram ending at the last token is the key; only earlier ones may answer it
        for stop in range(self._indexed, end):
            for n in self.sizes:
                if stop + 1 >= n:
                    self._index[tuple(seq[stop + 1 - n : stop + 1])] = stop + 1
        self._indexed = max(self._indexed, end)
        for n in self.sizes:
            if len(seq) < n + 1:
                continue
            follow = self._index.get(tuple(seq[len(seq) - n :]))
            if follow is not None:
                return Draft(list(seq[follow : follow + n_max]))
        return Draft([])


Drafter = ModelDrafter | NgramDrafter
