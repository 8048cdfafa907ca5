"""A stored reply read back step by step, and one token explained: what the app's replay and inspector, the REPL's
``/replay`` and ``/inspect`` and ``specchat replay`` show — read from the reply's trace only (``chats/trace.py``), so
a reopened chat shows exactly what the live reply did.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ..engine.events import (
    DraftRejected,
    DraftSource,
    Event,
    Judgement,
    ReplyFinished,
    ReplyStarted,
    StepVerified,
    TokenEmitted,
    TokenKind,
)
from ..engine.stats import ReplyStats
from ..colours import PROVENANCE
from ..figures import DASH, num, pct
from ..telemetry.live import LiveTelemetry
from .records import ReplyRecord
from .trace import Row, events_of

NO_TRACE = "this reply was stored before specchat kept each step — only replies written since can be replayed"
DAMAGED = "this reply's stored steps are damaged (or were written by another specchat) — it cannot be replayed"
CHUNKS = "an OpenAI-compatible endpoint streams text chunks: which of their tokens were drafted is not known"
MIN_COPY_CHARS = 4  # a shorter tail of a copy is found anywhere: it says nothing of where the draft came from


@dataclass
class Step:
    """One verify step as it happened (step 0: the token the prompt's prefill chose)."""

    number: int
    tokens: list[TokenEmitted] = field(default_factory=list)  # shown, in order: accepted ones, then the target's
    rejected: DraftRejected | None = None
    verified: StepVerified | None = None
    events: int = 0  # how many of the reply's events lead up to this step's end (for the figures at that step)

    @property
    def accepted(self) -> list[TokenEmitted]:
        return [t for t in self.tokens if t.kind is TokenKind.ACCEPTED]

    @property
    def own(self) -> TokenEmitted | None:
        """The target's own token of the step: a correction, a bonus or a plain token (None: an end token)."""
        return next((t for t in self.tokens if t.kind is not TokenKind.ACCEPTED), None)


@dataclass
class Replay:
    events: list[Event]
    steps: list[Step]
    # The figures after the events consumed so far, for stepping forward: replaying a whole reply step by step would
    # otherwise consume its first events once per step.
    _running: tuple[int, LiveTelemetry] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, trace: list[Row]) -> Replay:
        """The steps of a stored trace; raises ValueError when it is damaged (or written by another specchat)."""
        try:
            events = list(events_of(trace))
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise ValueError(DAMAGED) from exc
        steps: list[Step] = []
        for i, event in enumerate(events, start=1):
            if isinstance(event, TokenEmitted | DraftRejected | StepVerified):
                if not steps or steps[-1].number != event.step:
                    steps.append(Step(event.step))
                step = steps[-1]
                if isinstance(event, TokenEmitted):
                    step.tokens.append(event)
                elif isinstance(event, DraftRejected):
                    step.rejected = event
                else:
                    step.verified = event
                step.events = i
        return cls(events, steps)

    def telemetry_at(self, index: int) -> LiveTelemetry:
        """The sidebar's figures for this reply as they were when step ``index`` (of ``steps``) ended. The chat's
        counters are not kept with a reply: they show "–" (a fresh, empty count), not this reply's as the chat's."""
        upto = self.steps[index].events
        consumed, running = self._running if self._running and self._running[0] <= upto else (0, LiveTelemetry())
        running.consume(self.events[consumed:upto])
        self._running = (upto, running)
        telemetry = copy.deepcopy(running)
        telemetry.chat = ReplyStats()
        finished = self.finished
        telemetry.adaptive = bool(finished and finished.stats.adaptive)
        return telemetry

    @property
    def finished(self) -> ReplyFinished | None:
        return next((e for e in reversed(self.events) if isinstance(e, ReplyFinished)), None)  # the last, if any

    def ghosts_until(self, index: int) -> dict[int, str]:
        """The rejected tails of steps 0..``index``, keyed as a record's ghosts (by the segment they follow)."""
        ghosts, shown = {}, 0
        for step in self.steps[: index + 1]:
            if step.rejected is not None and (shown or step.accepted):
                key = shown + len(step.accepted) - 1
                ghosts[key] = ghosts.get(key, "") + step.rejected.text
            shown += len(step.tokens)
        return ghosts

    @property
    def started(self) -> ReplyStarted | None:
        return next((e for e in self.events if isinstance(e, ReplyStarted)), None)


def step_lines(replay: Replay, index: int) -> list[str]:
    """Step ``index`` in words: its draft as proposed, what the target kept, its rejected tail, its own token, and
    the reply's figures as they were then."""
    step = replay.steps[index]
    verified = step.verified
    started = replay.started
    if step.number == 0:
        own = step.own
        lines = [f"step 0: the prompt's prefill chose {_quote(own.text) if own else 'the end'}"]
    elif verified is None:
        text = _quote("".join(t.text for t in step.tokens))
        lines = [f"chunk {step.number}: {text} — {CHUNKS}" if started and started.estimated_tokens
                 else f"step {step.number}: {text} — not finished (the reply stopped inside it)"]
    else:
        proposed = [t.text for t in step.accepted] + list(step.rejected.pieces if step.rejected else ())
        head = f"step {step.number}: "
        if verified.drafted:
            head += f"drafted {verified.drafted}"
            if verified.source is not None:
                head += f" from {source_words(verified.source, verified.origin)}"
            if proposed:
                head += ": " + " ".join(_quote(p) for p in proposed)
        else:
            head += "no draft" + (f" ({verified.ignored} drafted, dropped by n_min)" if verified.ignored else "")
        lines = [head]
        if verified.drafted:
            lines.append(f"  verified in one batch of {verified.drafted + 1}: accepted {verified.accepted} of"
                         f" {verified.drafted}" + (" (the last is the end of the reply)"
                                                     if verified.accepted > len(step.accepted) else ""))
        if step.rejected is not None:
            lines.append(f"  rejected tail: {_quote(step.rejected.text)}" if step.rejected.text or not step.rejected.tokens
                         else f"  rejected tail: {len(step.rejected.tokens)} tokens (which ones the backend does not say)")
        elif verified.drafted > verified.accepted:
            lines.append(f"  rejected: {verified.drafted - verified.accepted} tokens (the backend does not say which)")
        own = step.own
        finished = replay.finished if index == len(replay.steps) - 1 else None
        if own:
            lines.append(f"  then {PROVENANCE[own.kind].name.removeprefix('the ')}: {_quote(own.text)}")
        elif finished is not None and finished.finish_reason == "loop":
            lines.append("  then the reply stopped in a loop (what the step verified after it is neither shown nor"
                         " counted)")
        else:
            lines.append("  then the end of the reply")
    t = replay.telemetry_at(index)
    counters = t.reply
    lines.append(f"  so far: {t.reply_tokens} token{'s' if t.reply_tokens != 1 else ''} · acceptance {pct(counters.acceptance_rate)} · mean accepted"
                 f" length {num(counters.mean_acceptance_length, '.2f')} · {num(t.reply_rate(), '.1f', suffix=' tok/s')}"
                 f" · TTFT {num(t.ttft, '.0f', 1000, ' ms')} · context {t.context_used}/{t.n_ctx or DASH}")
    return lines


def token_lines(record: ReplyRecord, index: int) -> list[str]:
    """What decided token ``index`` of a reply (an index into its segments)."""
    if not record.trace:
        return [NO_TRACE]
    try:
        replay = Replay.of(record.trace)
    except ValueError as exc:
        return [str(exc)]
    tokens = [t for s in replay.steps for t in s.tokens]
    token = tokens[index]
    step = next(s for s in replay.steps if token in s.tokens)
    j = token.judgement
    where = f"step {token.step}" if token.step else "the prefill"
    if j and step.verified and step.verified.drafted:
        where += (f", position {j.position + 1} of its {step.verified.drafted}-token draft" if j.position
                  < step.verified.drafted else f", after its {step.verified.drafted}-token draft")
    lines = [f"{_quote(token.text)} — {PROVENANCE[token.kind].name}, {where}"]
    if j is None:
        return lines + ["no candidates were kept for this reply (it was written before the inspector, or by a script)"]
    lines += _judgement_lines(j, token)
    if token.kind is TokenKind.CORRECTED and step.rejected is not None and step.rejected.pieces:
        lines.append("rejected tail, position by position: " + " · ".join(_quote(p) for p in step.rejected.pieces))
    if j.unknown:
        lines.append(f"not known: {j.unknown}")
    return lines


def judgement_of(record: ReplyRecord, index: int) -> Judgement | None:
    """Token ``index``'s judgement as the reply's trace kept it (None without one)."""
    tokens = [row for row in record.trace if row.get("type") == "token"]
    if index >= len(tokens) or "top" not in tokens[index]:
        return None
    (event,) = events_of([tokens[index]])
    return event.judgement


def copy_source(texts: list[str], copied: str) -> tuple[int, int, int] | None:
    """Where in the chat an n-gram draft's source lies, as (text index, start, end) in ``texts`` (the chat's turns up
    to the token, oldest first), the latest occurrence. The copied tokens may hold the chat template's own text (a role
    name between two turns), so the longest tail of them found in one turn is taken — the tail holds what was copied."""
    piece = copied
    while len(piece.strip()) >= MIN_COPY_CHARS:
        for turn in reversed(range(len(texts))):
            at = texts[turn].rfind(piece)
            if at >= 0:
                return turn, at, at + len(piece)
        piece = piece[1:]
    return None


def _judgement_lines(j: Judgement, token: TokenEmitted) -> list[str]:
    lines = []
    if j.top:
        lines.append("target's top (softmax of its logits): " + _ranked(j.top))
    drafted = j.drafted
    if drafted is not None:
        if j.accept is not None:  # a sampled model draft: judged through the sampling chain, not the raw softmax
            chance = (f"through the sampling chain p/q = {_p(j.p_sampled or 0.0)}/{_p(j.q or 0.0)}, so min(1, p/q) ="
                      f" {pct(j.accept)}")
            verdict = (f"accepted ({chance})" if token.kind is TokenKind.ACCEPTED
                       else f"rejected ({chance}); the target drew {_quote(token.text)} from max(0, p − q)")
        else:
            verdict = ("accepted: it is the target's choice here" if token.kind is TokenKind.ACCEPTED
                       else f"rejected: the target chose {_quote(token.text)} instead")
        q = f", the draft's {_p(j.draft_p)}" if j.draft_p is not None else ""
        lines.append(f"drafted {_quote(drafted.text)} (softmax: the target's p {_p(drafted.p)}{q}) — {verdict}")
    if j.draft_top:
        lines.append("draft's top (softmax of its logits): " + _ranked(j.draft_top))
    if j.copied:
        source = (source_words(DraftSource.STORED_CHAT, j.origin) if j.origin is not None else
                  "a reply generated earlier in this session (another chat, a regenerated reply or an A/B rerun)"
                  if j.remembered else "earlier in this chat")
        lines.append(f"copied draft: matched {j.match} tokens, copied from {source}: {_quote(j.copied)}")
    return lines


SOURCE_WORDS = {DraftSource.CONVERSATION: "earlier in this chat",
                DraftSource.REMEMBERED: "a reply generated earlier in this session",
                DraftSource.STORED_CHAT: "a stored reply",
                DraftSource.MODEL: "the draft model"}


def source_words(source: DraftSource, origin: tuple[int, int] | None) -> str:
    """Where a draft came from, in words; a stored reply by its chat (``specchat chats show N`` prints it). The
    message's row id stays in the trace, not in the words: no command lists it."""
    words = SOURCE_WORDS[source]
    return f"{words} of chat {origin[0]}" if origin is not None else words


def _ranked(candidates) -> str:
    return " · ".join(f"{_quote(c.text)} {_p(c.p)}" for c in candidates)


def _p(p: float) -> str:
    return f"{p:.1%}" if p >= 0.001 else f"{p:.1e}"


def _quote(text: str) -> str:
    return repr(text) if text else "''"
