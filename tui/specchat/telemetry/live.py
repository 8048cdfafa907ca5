"""Live statistics for the sidebar, computed from the engine's events only (engine → events → telemetry → widgets)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..engine.events import (
    ContextTrimmed,
    Event,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    TokenEmitted,
)
from ..engine.telemetry import ReplyStats

RATE_WINDOW_S = 1.0  # tokens/s "now" is measured over the last second
SPARK_POINTS = 40


@dataclass
class LiveTelemetry:
    """Everything the sidebar shows, updated event by event; times come from the events themselves."""

    speculation: SpeculationState | None = None
    reply: ReplyStats = field(default_factory=ReplyStats)  # counters of the reply in progress (or the last one)
    chat: ReplyStats = field(default_factory=ReplyStats)  # the same counters over the whole chat
    spark: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK_POINTS))
    n_max: int = 0
    generating: bool = False
    reply_tokens: int = 0
    reply_tps: float | None = None
    ttft: float | None = None
    context_used: int = 0
    n_ctx: int = 0
    plain_tps: float | None = None  # plain decoding of the same target, measured
    plain_source: str = ""
    trimmed: int = 0
    last_finish: str = ""
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=512))

    def consume(self, events: Iterable[Event]) -> None:
        for event in events:
            self._consume(event)

    def _consume(self, event: Event) -> None:
        if isinstance(event, TokenEmitted):
            self.reply_tokens += 1
            self._recent.append(event.elapsed)
            if self.ttft is None:
                self.ttft = event.elapsed  # seconds to the first token
            self.context_used += 1
        elif isinstance(event, StepVerified):
            for counters in (self.reply, self.chat):
                counters.record_step(event.drafted, event.accepted, event.ignored)
            self.n_max = event.n_max
            self.context_used = event.context_used
            if event.drafted:
                self.spark.append(event.accepted / event.drafted)
        elif isinstance(event, ReplyStarted):
            self.reply = ReplyStats()
            self.generating = True
            self.reply_tokens = 0
            self.reply_tps = self.ttft = None
            self._recent.clear()
            self.speculation = event.speculation
            self.context_used = event.prompt_tokens
            self.n_ctx = event.n_ctx
        elif isinstance(event, SpeculationChanged):
            self.speculation = event.speculation
        elif isinstance(event, ContextTrimmed):
            self.trimmed += event.dropped_messages
        elif isinstance(event, ReplyFinished):
            self.generating = False
            self.last_finish = event.finish_reason
            stats = event.stats
            self.reply_tps = stats.decode_tps
            self.ttft = stats.ttft
            self.context_used = stats.context_used
            self.speculation = SpeculationState(stats.method, stats.speculation_active, stats.speculation_reason)
            if stats.method == "none" and stats.decode_tps:
                self.set_plain_reference(stats.decode_tps, "a plain reply of this target")

    def set_plain_reference(self, tps: float, source: str) -> None:
        self.plain_tps, self.plain_source = tps, source

    def tps_now(self) -> float | None:
        """Tokens per second over the last second of generation (None before two tokens)."""
        if len(self._recent) < 2:
            return None
        horizon = self._recent[-1] - RATE_WINDOW_S
        window = [t for t in self._recent if t >= horizon]
        if len(window) < 2 or window[-1] <= window[0]:
            return None
        return (len(window) - 1) / (window[-1] - window[0])

    def reply_rate(self) -> float | None:
        """Decode tokens/s of the current reply so far, or of the last finished one."""
        if not self.generating or self.ttft is None or self.reply_tokens < 2:
            return self.reply_tps
        elapsed = self._recent[-1] - self.ttft
        return (self.reply_tokens - 1) / elapsed if elapsed > 0 else None

    def speedup(self) -> float | None:
        rate = self.reply_rate()
        return rate / self.plain_tps if rate and self.plain_tps else None
