"""Methods combined, as llama.cpp's ``--spec-type ngram-mod,draft-simple`` has them: where the conversation has a match
that is worth verifying, the n-gram drafter's copy (it costs nothing to propose); otherwise the draft model's guess.

llama.cpp takes the first drafter in its order of preference that proposes anything. Here the copy must also be worth
its verify: with ``n_max = "auto"`` the n-gram hazards decide from the match (``MatchHazards``), and a short match the
hazards would not verify leaves the step to the draft model, whose own policy decides how far it drafts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .base import NO_DRAFT, Draft, Drafter, Method, Parts
from .model import ModelDrafter
from .ngram import NgramDrafter

if TYPE_CHECKING:
    from ..loop import Rules


class NgramThenModel(Drafter):
    def __init__(self, ngram: NgramDrafter, model: ModelDrafter, copy_length: Callable[[int], int],
                 model_length: Callable[[], int]) -> None:
        """``copy_length(match)``: how many copied tokens a match is worth verifying; ``model_length()``: how many
        tokens the draft model drafts when the copy is not used (0: a plain step)."""
        self.ngram, self.model = ngram, model
        self.copy_length, self.model_length = copy_length, model_length
        self.turned_down: Draft | None = None  # this step's copy, when it had one and the draft model drafted instead

    # ``blocked`` stays "": the copy reads any token id; the draft model sits out while it cannot
    # (``ModelDrafter.notice``)

    def notice(self, seq: Sequence[int]) -> None:
        self.model.notice(seq)

    def begin_step(self) -> None:
        """A new step: the last one's turned-down copy is not this one's (a plain step proposes nothing)."""
        self.turned_down = None

    def propose(self, seq: Sequence[int], n_max: int, rules: Rules) -> Draft:
        copy = self.ngram.propose(seq, n_max, rules)
        if copy.tokens and self.copy_length(copy.match) > 0:
            return copy  # the step's ``choose`` keeps as much of it as the match is worth
        self.turned_down = copy if copy.tokens else None
        k = min(self.model_length(), n_max)
        return self.model.propose(seq, k, rules) if k > 0 else NO_DRAFT


def _build(parts: Parts) -> NgramThenModel | None:
    if parts.model is None:
        return None
    return NgramThenModel(parts.ngram, parts.model, parts.length.copy_length, parts.length.model_length)


METHOD = Method("ngram+draft", "the n-gram copy where the conversation has a match worth verifying, the draft model"
                " otherwise", "ngram-mod,draft-simple", build=_build, draft_model=True, copies=True)
