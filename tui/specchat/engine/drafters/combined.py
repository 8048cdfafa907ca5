"""Methods combined, as llama.cpp's ``--spec-type ngram-mod,draft-simple`` has them: where earlier text has a match
that is worth verifying, its copy (it costs nothing to propose); otherwise the draft model's guess. Method
"ngram+draft" copies from the conversation (``ngram``); "suffix+draft" (``suffix_draft``) from the user's stored chats
too (``suffix``).

llama.cpp takes the first drafter in its order of preference that proposes anything. Here the copy must also be worth
its verify: with ``n_max = "auto"`` the n-gram hazards decide from the match and the copy's own survival
(``MatchHazards``), and a copy the hazards would not verify leaves the step to the draft model, whose own policy
decides how far it drafts — not at all where even a draft always right could not pay (the embedded pair on a
2-core CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .base import NO_DRAFT, Draft, Drafter, Method, Parts

if TYPE_CHECKING:
    from ..rules import Rules


class CopyThenModel(Drafter):
    def __init__(self, copier: Drafter, model: Drafter, copy_length: Callable[[Draft], int],
                 model_length: Callable[[], int]) -> None:
        """``copier``: the drafter that copies earlier text; ``copy_length(copy)``: how many of a copy's tokens are
        worth verifying; ``model_length()``: how many tokens the draft model drafts when the copy is not used (0: a
        plain step)."""
        self.copier, self.model = copier, model
        self.copy_length, self.model_length = copy_length, model_length
        self.turned_down: Draft | None = None  # this step's copy, when it had one and the draft model drafted instead

    # ``blocked`` stays "": a copy reads any token id; the draft model sits out while it cannot
    # (``ModelDrafter.notice``)

    def notice(self, seq: Sequence[int]) -> None:
        self.model.notice(seq)

    def begin_step(self) -> None:
        """A new step: the last one's turned-down copy is not this one's (a plain step proposes nothing)."""
        self.turned_down = None

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        copy = self.copier.propose(seq, budget, rules)
        if copy.tokens and self.copy_length(copy) > 0:
            return copy  # the step's ``choose`` keeps as much of it as the match is worth
        self.turned_down = copy if copy.tokens else None
        k = min(self.model_length(), budget)
        return self.model.propose(seq, k, rules) if k > 0 else NO_DRAFT


def then_model(copier: Drafter, parts: Parts) -> CopyThenModel | None:
    """``copier``'s copies where they are worth verifying, else the loaded draft model's guesses (None without one)."""
    if parts.model is None:
        return None
    return CopyThenModel(copier, parts.model, parts.length.copy_length, parts.length.model_length)


METHOD = Method("ngram+draft", "the n-gram copy where the conversation has a match worth verifying, the draft model"
                " otherwise", "ngram-mod,draft-simple", build=lambda parts: then_model(parts.ngram, parts),
                draft_model=True, copies=True)
