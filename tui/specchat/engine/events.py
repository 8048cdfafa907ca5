"""What the engine reports while it answers, in the order it happens.

A reply is: maybe ``ContextTrimmed``, then ``ReplyStarted``, the prefill's first token (``TokenEmitted``, step 0),
then for each verify step, in this order:
1. ``TokenEmitted`` for each draft token the target accepted (kind ``accepted``);
2. ``DraftRejected`` with the rejected tail of the draft, if any was rejected;
3. ``TokenEmitted`` for the target's own token: the correction (``corrected``), the bonus after a fully accepted draft
   (``bonus``) or a plain token (``target``) — absent when that token, or an accepted draft token, ended the reply;
4. ``SpeculationChanged`` if the step switched speculation on or off, then ``StepVerified`` with the step's counts;
5. ``ThreadsAdjusted`` when the engine changed how many threads decode the next steps (a busy machine);
and finally ``ReplyFinished`` with the reply's telemetry. A rejected tail is therefore always shown between the
accepted tokens of its step and the target's correction. A step whose tokens complete a loop (``repetition``) ends the reply
at that token, and its ``StepVerified`` counts the step as far as it was shown (as a llama-server's cut stream is
counted): its draft as long as the accepted tokens shown, the rest of what it verified neither shown nor counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .stats import ReplyStats


class TokenKind(StrEnum):
    ACCEPTED = "accepted"  # a draft token the target agreed with
    CORRECTED = "corrected"  # the target's token where it rejected a draft token
    BONUS = "bonus"  # the target's extra token after a fully accepted draft
    TARGET = "target"  # plain target output, no draft this step


class DraftSource(StrEnum):
    """Where a step's draft came from."""

    CONVERSATION = "conversation"  # copied from earlier text of this chat
    REMEMBERED = "remembered"  # copied from a reply this process gave in another chat
    STORED_CHAT = "history"  # copied from a stored reply of an earlier chat (``StepVerified.origin`` names it; the
    # value is what traces stored before the name said "stored chat")
    MODEL = "model"  # guessed by a draft model


Origin = tuple[int, int]  # a stored reply: (conversation id, message id) in the chats store


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
    estimated_tokens: bool = False  # counts are tiktoken's estimates: the server streams text without token ids
    stored_chats: str = ""  # why this reply cannot draft from the stored chats yet ("" when it can, or reads none)


@dataclass(frozen=True, slots=True)
class SpeculationChanged:
    speculation: SpeculationState


@dataclass(frozen=True, slots=True)
class Candidate:
    token: int
    text: str
    p: float  # softmax of the model's raw logits at this position (temperature 1), as llama-server's n_probs


@dataclass(frozen=True, slots=True)
class Judgement:
    """What decided one token, for the token inspector; kept only when a reply is asked for it (``top``)."""

    position: int  # in its step's draft: an accepted token i at i, the correction or bonus after the accepted ones
    top: tuple[Candidate, ...]  # the target's best candidates at this position, most likely first
    draft_top: tuple[Candidate, ...] = ()  # a model draft's best candidates at the same position
    drafted: Candidate | None = None  # the draft's token here, with the target's p of it (a correction: the rejected)
    draft_p: float | None = None  # a model draft's softmax probability of ``drafted``
    # A sampled model draft is judged through the sampling chain (top-k/top-p/min-p/temperature): the chain's p and q
    # of ``drafted``, and min(1, p/q), the chance it had to be accepted.
    p_sampled: float | None = None
    q: float | None = None
    accept: float | None = None
    match: int = 0  # an n-gram draft: how many tokens matched the end of the conversation
    copied: str = ""  # an n-gram draft: the earlier text it copied from, the matched part first
    remembered: bool = False  # an n-gram draft copied from a reply of an earlier chat
    origin: Origin | None = None  # a draft copied from a stored reply: which one
    unknown: str = ""  # what the backend cannot tell about this token (a server does not say what it rejected)


@dataclass(frozen=True, slots=True)
class TokenEmitted:
    token: int
    text: str
    kind: TokenKind
    step: int
    elapsed: float  # seconds since the reply was requested, so views need no clock of their own
    judgement: Judgement | None = None


@dataclass(frozen=True, slots=True)
class DraftRejected:
    tokens: tuple[int, ...]
    text: str
    step: int
    pieces: tuple[str, ...] = ()  # each rejected token's own text: what each rejected position proposed


@dataclass(frozen=True, slots=True)
class StepVerified:
    step: int
    drafted: int
    accepted: int  # an accepted end-of-generation token included (it ends the reply and is not shown)
    ignored: int  # draft tokens dropped because the draft was shorter than n_min
    withheld: int  # draft positions not proposed because the draft's confidence was below p_min
    draft_length: int  # in use after this step: the cap when it is fixed, "auto"'s latest choice
    context_used: int
    source: DraftSource | None = None  # where the draft came from (None: nothing drafted, or a server's draft)
    origin: Origin | None = None  # a draft copied from a stored reply: which one


@dataclass(frozen=True, slots=True)
class ThreadsAdjusted:
    threads: int  # decoding the next steps
    allowed: int  # the most the profile allows
    others_cores: float  # cores other processes kept busy over the last second
    n_cores: int


@dataclass(frozen=True, slots=True)
class ReplyFinished:
    text: str
    # "stop", "length", "loop" (it repeated itself: engine/repetition.py), "context_full", "cancelled" or "error"
    finish_reason: str
    stats: ReplyStats


@dataclass(frozen=True, slots=True)
class PlainMeasured:
    """Plain decoding measured again after a reply, in a quiet window: the start's run was taken while other processes
    kept the cores busy, and "vs plain" compares with this one now (``engine.reference``)."""

    tps: float  # plain tokens/s at ``depth`` tokens of context
    depth: int
    per_token_s: float | None  # seconds a token of context adds to a step
    sampled: bool


Event = (ReplyStarted | ContextTrimmed | SpeculationChanged | TokenEmitted | DraftRejected | StepVerified
         | ThreadsAdjusted | PlainMeasured | ReplyFinished)
