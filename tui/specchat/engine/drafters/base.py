"""What every drafter shares: the draft it proposes, the protocol the step loop asks of it, and the method that names
it in profiles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..events import DraftSource, Origin
from ..sampling import Dist

if TYPE_CHECKING:
    from ..rules import Rules


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: list[int]
    # Per-token draft distributions when the draft was sampled; None for one-hot drafts (greedy or n-gram).
    q: list[Dist] | None = None
    withheld: int = 0  # 1 when drafting stopped because the next token's confidence was below p_min
    match: int = 0  # n-gram drafts: how many tokens before the copied text matched the end of the conversation
    # For the inspector (``Rules.top``): a model draft's logits at each drafted position (ranked after the verify, for
    # the positions it judged only); an n-gram draft's source, the matched tokens then the copied ones, and whether
    # it was a reply remembered from another chat.
    rows: np.ndarray | None = None
    copied: list[int] | None = None
    remembered: bool = False
    from_text: bool = False  # copied from earlier text (the n-gram drafter), not guessed by a model
    origin: Origin | None = None  # copied from a stored reply of an earlier chat (``drafters.stored_chats``): which one
    # A copy scored by frequency: the chance that its first 1, 2, … tokens are all right ("auto" prices it by the
    # lower of this and what the match length says).
    survival: tuple[float, ...] | None = None

    @property
    def source(self) -> DraftSource | None:
        if not self.tokens:
            return None
        if self.origin is not None:
            return DraftSource.STORED_CHAT
        if self.from_text:
            return DraftSource.REMEMBERED if self.remembered else DraftSource.CONVERSATION
        return DraftSource.MODEL


NO_DRAFT = Draft([])


class Drafter(Protocol):
    """What the step loop asks of a source of draft tokens. A drafter may subclass it to take the defaults: it can
    always draft, reads any conversation, and turns nothing down."""

    blocked: str = ""  # why it cannot draft now, or "" when it can

    def notice(self, seq: Sequence[int]) -> None:
        """The conversation changed to ``seq``: check whether it can still read it."""

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        """At most ``budget`` tokens to follow ``seq``."""
        ...

    def begin_step(self) -> None:
        """A step begins (before ``propose``, which a plain step does not call)."""

    # This step's draft that was proposed but not verified, for "auto" to learn from (the combined method's copy,
    # when the draft model drafted instead).
    turned_down: Draft | None = None


class LengthSplit(Protocol):
    """How a combined method splits a step between a copy and the draft model (``draft_length.DraftLength``)."""

    def copy_length(self, copy: Draft) -> int: ...

    def model_length(self) -> int: ...


@dataclass(frozen=True)
class Parts:
    """What a method's drafter is built from: the engine's n-gram drafter (it remembers replies across switches), the
    loaded draft model's drafter, the draft-length policy in use, and the index over the user's stored chats — each
    typed by what a method asks of it, so this module imports none of them."""

    ngram: Drafter
    model: Drafter | None
    length: LengthSplit
    stored_chats: Drafter


@dataclass(frozen=True)
class Method:
    """A speculation method as profiles name it (``[draft] method``). A module of this package that defines ``METHOD``
    adds one: profiles, ``specchat ask --method``, the engine and llama-server's flags read them from here."""

    name: str
    about: str
    spec_type: str  # llama.cpp's --spec-type that runs it on a llama-server
    build: Callable[[Parts], Drafter | None] | None = None  # None: no drafter here ("none"; ``server_only`` ones)
    draft_model: bool = False  # loads [draft] model
    assistant: bool = False  # [draft] model is optional: an assistant GGUF where the target has no heads of its own
    copies: bool = False  # drafts by copying earlier text: "auto" prices its drafts by how far the match reaches
    reads_stored_chats: bool = False  # drafts from the user's earlier chats: the engine indexes them (``Parts.stored_chats``)
    server_only: str = ""  # why only a llama.cpp server runs it
