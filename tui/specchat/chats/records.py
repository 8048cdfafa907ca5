"""A chat's turns: the user's messages and replies built from the engine's events, never read back from a view."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..engine.events import DraftRejected, ReplyFinished, ReplyStarted, TokenEmitted
from .trace import Row, line_of, row_of

Segment = tuple[str, str]  # (text, kind) where kind is a TokenKind value
INTERRUPTED = "interrupted"  # the finish reason of a reply whose app quit or died while it streamed
INSPECTOR_TOP = 5  # candidates kept per token for the token inspector (``engine.events.Judgement``)


@dataclass
class UserTurn:
    text: str
    role: str = "user"


@dataclass
class ReplyRecord:
    """A reply as its events built it: what a view draws, what the store saves, what A/B compares with."""

    segments: list[Segment] = field(default_factory=list)
    # The target's ids, one per segment; None when a stored record's ids were damaged (its text is tokenized again).
    tokens: list[int] | None = field(default_factory=list)
    ghosts: dict[int, str] = field(default_factory=dict)  # segment index → rejected draft text shown after it
    finish_reason: str | None = None  # None while streaming
    stats: dict | None = None  # the engine's summary of the reply, once finished
    target_id: str = ""  # the model whose token ids ``tokens`` are
    reused_tokens: int | None = None  # prompt tokens already in the KV cache when the reply started
    conditions: dict | None = None  # what an A/B must share with this reply (``ab.conditions_of``)
    profile: str = ""  # the profile the reply ran under ("" for replies stored before specchat kept it)
    # Every event of the reply as ``trace`` rows: what the inspector and the replay read (empty for replies stored
    # before specchat kept them).
    trace: list[Row] = field(default_factory=list)
    role: str = "assistant"
    trace_encoded: list[str] = field(default_factory=list, repr=False, compare=False)  # its first rows, as stored

    def trace_lines(self) -> list[str]:
        """The trace as the store keeps it, each row encoded once (a streaming reply is saved every second)."""
        for row in self.trace[len(self.trace_encoded):]:
            self.trace_encoded.append(line_of(row))
        return self.trace_encoded

    @property
    def text(self) -> str:
        return "".join(piece for piece, _ in self.segments)

    @property
    def streaming(self) -> bool:
        return self.finish_reason is None

    def add(self, events: Iterable[object]) -> None:
        for event in events:
            self.trace.append(row_of(event))
            if isinstance(event, TokenEmitted):
                self.segments.append((event.text, event.kind.value))
                if self.tokens is not None:
                    self.tokens.append(event.token)
            elif isinstance(event, DraftRejected) and self.segments:
                # The step's accepted tokens came before it and its correction comes after: the ghost sits right
                # where the draft was rejected.
                index = len(self.segments) - 1
                self.ghosts[index] = self.ghosts.get(index, "") + event.text
            elif isinstance(event, ReplyStarted):
                self.reused_tokens = event.reused_tokens
            elif isinstance(event, ReplyFinished):
                self.finish_reason = event.finish_reason
                self.stats = event.stats.summary() | {"reused_tokens": self.reused_tokens,
                                                      "conditions": self.conditions, "profile": self.profile}


Turn = UserTurn | ReplyRecord
