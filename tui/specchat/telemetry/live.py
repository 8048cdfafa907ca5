"""Live statistics for the sidebar, computed from the engine's events only (engine → events → telemetry → widgets).

Every figure is re-derivable from the event stream: counts from ``StepVerified``, times from the ``elapsed`` of each
``TokenEmitted``. A rate needs a minimum window (tokens of one step arrive together, so a shorter window measures
nothing but that); a figure that cannot be measured is None and shows as "–". The chat's counters
cover the current chat and profile: a new chat, an opened one or a profile switch starts them again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

from ..engine.events import (
    ContextTrimmed,
    DraftSource,
    Event,
    PlainMeasured,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
)
from ..engine.reference import PlainReference
from ..engine.stats import ReplyStats, rate

RATE_WINDOW_S = 1.0  # tokens/s "now" is measured over the last second of generation
MIN_NOW_WINDOW_S = 0.5  # and only once that second holds at least this much of it
SPARK_POINTS = 40
# A reply's undrafted steps check the reference once there are this many (a median of fewer is one hiccup away from
# wrong), and replace it when they disagree by more than REFERENCE_NOISE: two plain runs of the same prompt on this
# machine differ by about ±10 %, a reference taken beside a compile by 3× to 30× (issue #47).
CHECK_STEPS = 16
REFERENCE_NOISE = 0.2


@dataclass
class LiveTelemetry:
    """Everything the sidebar shows, updated event by event; times come from the events themselves."""

    speculation: SpeculationState | None = None
    reply: ReplyStats = field(default_factory=ReplyStats)  # counters of the reply in progress (or the last one)
    chat: ReplyStats = field(default_factory=ReplyStats)  # the same counters over this chat
    spark: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK_POINTS))
    draft_length: int = 0  # in use: the cap when it is fixed, "auto"'s latest choice
    adaptive: bool = False  # the draft length is "auto"'s choice
    sampled: bool = False  # the profile samples: a reference its replies give is a sampled one
    generating: bool = False
    reply_tokens: int = 0
    reply_tps: float | None = None  # decode rate of the last finished reply
    ttft: float | None = None
    context_used: int = 0
    n_ctx: int = 0
    reference: PlainReference | None = None  # plain decoding of the same target, measured (engine/reference.py)
    unmeasured: str = ""  # without a reference: why, and what would measure one
    prompt_tokens: int = 0  # of the reply in progress (or the last one): where its context depth starts
    estimated: bool = False  # token counts are tiktoken's estimates (a server that streams text without ids)
    trimmed: int = 0
    stored_chats: str = ""  # why the reply cannot draft from the stored chats yet (ReplyStarted), "" when it can
    threads: ThreadsAdjusted | None = None  # the engine's last thread change (a busy machine), if any
    drafted_from: dict[DraftSource, int] = field(default_factory=dict)  # the reply's drafted tokens by source
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=512))
    _step_ends: dict[int, float] = field(default_factory=dict)  # each step's last token, seconds into the reply
    _plain_steps: list[tuple[int, int]] = field(default_factory=list)  # the reply's undrafted steps: (step, depth)
    _token_steps: int = 0  # steps that emitted tokens after the reply's first (a rate needs two)
    _last_step: int = 0

    def consume(self, events: Iterable[Event]) -> None:
        for event in events:
            self._consume(event)

    def _consume(self, event: Event) -> None:
        if isinstance(event, TokenEmitted):
            self._token(event)
        elif isinstance(event, StepVerified):
            self._step(event)
        elif isinstance(event, ReplyStarted):
            self._reply_started(event)
        elif isinstance(event, SpeculationChanged):
            self.speculation = event.speculation
        elif isinstance(event, ThreadsAdjusted):
            self.threads = event
        elif isinstance(event, PlainMeasured):
            self.reference = PlainReference.measured(event.tps, event.depth, event.per_token_s, event.sampled,
                                                     "a plain run after the last reply (the start's ran beside busy"
                                                     " cores)")
        elif isinstance(event, ContextTrimmed):
            self.trimmed += event.dropped_messages
        elif isinstance(event, ReplyFinished):
            self._reply_finished(event)

    def _token(self, event: TokenEmitted) -> None:
        self.reply_tokens += 1
        self._recent.append(event.elapsed)
        if self.ttft is None:
            self.ttft = event.elapsed  # seconds to the first token
        elif event.step != self._last_step:
            self._token_steps += 1
        self._last_step = event.step
        self.context_used += 1
        self._step_ends[event.step] = event.elapsed

    def _step(self, event: StepVerified) -> None:
        for counters in (self.reply, self.chat):
            counters.record_step(event.drafted, event.accepted, event.ignored, event.withheld)
        self.draft_length = event.draft_length
        self.context_used = event.context_used
        if event.source is not None:
            self.drafted_from[event.source] = self.drafted_from.get(event.source, 0) + event.drafted
        if event.drafted:
            self.spark.append(event.accepted / event.drafted)
        self._plain_step(event)

    def _reply_started(self, event: ReplyStarted) -> None:
        self.reply = ReplyStats()
        self.drafted_from = {}
        self.generating = True
        self.reply_tokens = 0
        self.reply_tps = self.ttft = None
        self._recent.clear()
        self._step_ends.clear()
        self._plain_steps.clear()
        self._token_steps = self._last_step = 0
        self.speculation = event.speculation
        self.context_used = self.prompt_tokens = event.prompt_tokens
        self.estimated = event.estimated_tokens
        self.stored_chats = event.stored_chats
        self.n_ctx = event.n_ctx

    def _reply_finished(self, event: ReplyFinished) -> None:
        self.generating = False
        stats = event.stats
        self.reply_tps = stats.decode_tps
        self.ttft = stats.ttft
        self.context_used = stats.context_used
        self.speculation = SpeculationState(stats.method, stats.speculation_active, stats.speculation_reason)
        self._check_reference(stats.busy_cores is not None)

    def reset_chat(self) -> None:
        """A new chat, an opened one or another profile: the chat's counters start again."""
        self.reply, self.chat = ReplyStats(), ReplyStats()
        self.drafted_from = {}
        self.spark.clear()
        self.reply_tokens, self.reply_tps, self.ttft, self.trimmed = 0, None, None, 0
        self.prompt_tokens, self._token_steps, self._last_step = 0, 0, 0
        self._recent.clear()
        self._step_ends.clear()
        self._plain_steps.clear()
        self.stored_chats = ""

    def _plain_step(self, step: StepVerified) -> None:
        """An undrafted step (nothing drafted, withheld or ignored) is plain decoding, at the depth it decoded at. (A
        server's step may be counted before its token arrives: its time is read when the reply ends.)"""
        if not (step.drafted or step.withheld or step.ignored):
            self._plain_steps.append((step.step, step.context_used - 1))

    def _check_reference(self, busy: bool) -> None:
        """The reply's undrafted steps against the reference: where they disagree beyond the noise (or there is no
        reference), they become it — the rate this machine showed just now, at their depth, the slope kept. A step's
        time is the wait from the previous step's last token to its own. Steps of a reply that other processes kept
        waiting (``busy``) are no plain rate of this machine."""
        ends = self._step_ends
        steps = [(ends[n] - ends[n - 1], depth) for n, depth in self._plain_steps
                 if n in ends and n - 1 in ends and ends[n] > ends[n - 1]]
        if steps:  # a server's tokens read in one burst arrive microseconds apart: those gaps time no step
            typical = median(seconds for seconds, _ in steps)
            steps = [(seconds, depth) for seconds, depth in steps if seconds >= 0.25 * typical]
        if len(steps) < CHECK_STEPS or busy or self.busy_machine:
            return
        seen = 1.0 / median(seconds for seconds, _ in steps)
        depth = round(sum(d for _, d in steps) / len(steps))
        old = self.reference
        held = old.tps_at(depth) if old is not None and old.busy is None else None
        if held is not None and abs(seen / held - 1.0) <= REFERENCE_NOISE:
            return
        before = f" (the reference read {held:.0f} tok/s there)" if held is not None else ""
        slope = old.per_token_s if old is not None else None
        self.reference = PlainReference.measured(seen, depth, slope, self.sampled,
                                                 f"the last reply's {len(steps)} undrafted steps{before}")

    @property
    def nothing_drafted(self) -> bool:
        """The reply in progress (or the last one) judged steps and drafted in none: it *is* plain decoding."""
        reply = self.reply
        return reply.steps > 0 and reply.drafted == reply.withheld == reply.ignored == 0 and not self.estimated

    @property
    def depth(self) -> float | None:
        """The reply's mean context depth: its prompt, then half of what it generated (decoding slows linearly)."""
        if not self.prompt_tokens and not self.reply_tokens:
            return None
        return self.prompt_tokens + self.reply_tokens / 2

    @property
    def plain_tps(self) -> float | None:
        """Plain decoding of the same target at this reply's depth and with its sampling; None: not measurable."""
        depth = self.depth
        if self.reference is None or self.reference.busy is not None:
            return None  # a run beside busy cores divides nothing (issue #47: it read 3 tok/s of 150)
        return self.reference.tps_at(depth if depth is not None else self.reference.depth)

    @property
    def plain_source(self) -> str:
        reference = self.reference
        if reference is None:
            return self.unmeasured
        if reference.busy is not None:
            return (f"not compared — the plain run was taken while other processes kept {reference.busy:.1f} cores"
                    " busy; it is run again after a reply on a quiet machine")
        return reference.describe(self.depth)

    def tps_now(self) -> float | None:
        """Tokens per second over the last second of generation."""
        if len(self._recent) < 2:
            return None
        horizon = self._recent[-1] - RATE_WINDOW_S
        window = [t for t in self._recent if t >= horizon]
        return rate(len(window) - 1, window[-1] - window[0], MIN_NOW_WINDOW_S)

    def reply_rate(self) -> float | None:
        """Decode tokens/s of the current reply so far (the first token to the last), or of the last finished one."""
        if not self.generating:
            return self.reply_tps
        if self.ttft is None or not self._recent or self._token_steps < 2:
            return None
        return rate(self.reply_tokens - 1, self._recent[-1] - self.ttft)

    @property
    def busy_machine(self) -> str | None:
        """One line when the engine decodes with fewer threads than allowed because other processes use the cores."""
        t = self.threads
        if t is None or t.threads >= t.allowed:
            return None
        return (f"busy machine: others use {t.others_cores:.1f} of {t.n_cores} cores — decoding with {t.threads} of"
                f" {t.allowed} threads")

    def speedup(self) -> float | None:
        if self.nothing_drafted:
            return 1.0  # its steps are plain decoding: by construction, whatever a reference measured elsewhere
        reply, plain = self.reply_rate(), self.plain_tps
        return reply / plain if reply and plain else None
