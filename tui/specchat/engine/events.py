"""What the engine reports while it answers, in the order it happens.

A reply is: ``ReplyStarted``, maybe ``ContextTrimmed`` first, then per verify step some ``TokenEmitted`` and at most
one ``DraftRejected`` followed by ``StepVerified``, and finally ``ReplyFinished`` with the reply's telemetry.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .telemetry import ReplyStats


class TokenKind(StrEnum):
    ACCEPTED = "accepted"  # a draft token the target agreed with
    CORRECTED = "corrected"  # the target's token where it rejected a draft token
    BONUS = "bonus"  # the target's extra token after a fully accepted draft
    TARGET = "target"  # plain target output, no draft this step


@dataclass(frozen=True, slots=True)
class SpeculationState:
    method: str
    active: bool
    reason: str = ""  # why speculation is off, when it is


@dataclass(frozen=True, slots=True)
class ContextTrimmed:
    dropped_messages: int
    tokens_before: int
    tokens_after: int
    n_ctx: int


@dataclass(frozen=True, slots=True)
class ReplyStarted:
    prompt_tokens: int  # the whole conversation as the target sees it
    reused_tokens: int  # already in the target's KV cache
    prefill_tokens: int  # decoded now
    n_ctx: int
    speculation: SpeculationState


@dataclass(frozen=True, slots=True)
class SpeculationChanged:
    speculation: SpeculationState


@dataclass(frozen=True, slots=True)
class TokenEmitted:
    token: int
    text: str
    kind: TokenKind
    step: int
    elapsed: float  # seconds since the reply was requested, so views need no clock of their own


@dataclass(frozen=True, slots=True)
class DraftRejected:
    tokens: tuple[int, ...]
    text: str
    step: int


@dataclass(frozen=True, slots=True)
class StepVerified:
    step: int
    drafted: int
    accepted: int
    ignored: int
    n_max: int
    context_used: int


@dataclass(frozen=True, slots=True)
class ReplyFinished:
    text: str
    finish_reason: str  # "stop", "length", "context_full" or "cancelled"
    stats: ReplyStats


Event = ReplyStarted | ContextTrimmed | SpeculationChanged | TokenEmitted | DraftRejected | StepVerified | ReplyFinished
