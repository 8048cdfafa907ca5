"""One reply's run: the prefill's token, then draft → verify steps (``loop.speculate``) until the reply ends, each
step's outcome emitted in the documented order (see ``events``).

``Engine.reply`` prepares the prompt and the turn and starts a ``ReplyRun``; the run takes the steps and ends the turn
(the reply joins the conversation, the drafters learn it, the costs are re-timed where due). It owns only what lives as
long as the reply — its tokens, its text as shown, its loop watch and the state it last announced.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Generator, Iterator
from time import perf_counter

from .candidates import Ranked, RowJudgement, ranked
from .conversation import TokenWindow
from .cpu import ThreadGovernor
from .draft_length.costs import quiet
from .drafters import Draft
from .engine_config import EngineConfig
from .events import (
    Candidate,
    DraftRejected,
    Event,
    Judgement,
    SpeculationChanged,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
    TokenKind,
)
from .llama import DecodeInterrupted
from .loading import ModelPair
from .loop import StepOutcome, speculate
from .repetition import loop_watch
from .rules import Rules
from .sampling import pick
from .speculation import Speculation
from .stats import ReplyStats
from .stored_index import StoredChatsIndexer

END_OF_REPLY = "<end>"  # how a candidate that ends the reply is named (its piece is no text)


class ReplyRun:
    """The steps of one reply on the engine's models, conversation and speculation."""

    def __init__(self, config: EngineConfig, pair: ModelPair, chat: TokenWindow, speculation: Speculation,
                 governor: ThreadGovernor | None, index: StoredChatsIndexer, stats: ReplyStats, rules: Rules,
                 started: float) -> None:
        self.config, self.pair, self.chat, self.speculation = config, pair, chat, speculation
        self.ctx, self.target = pair.target.ctx, pair.target.model
        self.governor, self.index, self.stats, self.rules, self.started = governor, index, stats, rules, started
        self.state = speculation.state()  # the speculation state the reply last announced
        self.loop = loop_watch(config.loop)  # the reply's tokens watched for a loop, when the configuration stops one
        self.reply_tokens: list[int] = []  # the reply's, as decided (every byte)
        self.pieces: list[str] = []  # the reply's text, piece by piece as shown
        self.looped = False  # the reply ends after the last token shown: it completed a loop (and a character)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._depth = 0  # the context depth the step under way started at

    def run(self, prompt: list[int], max_tokens: int, should_stop: Callable[[], bool],
            recall: list[int] | None, chat: int | None) -> Generator[Event, None, tuple[str, str]]:
        """The reply's steps, with the stored chats' index paused and a long prefill stoppable, then the turn's end
        (``recall``: the prompt's last tokens the reply is kept with for later chats; None: it is private); returns
        the reply's text and why it ended."""
        self.speculation.begin_reply()
        if self.governor is not None:
            self.pair.use_threads(self.governor.threads)  # models loaded since were made with the profile's count
            self.governor.busiest = 0.0
        contexts = self.pair.contexts
        for ctx in contexts:  # a long prefill (the target's, or the draft's first) stops when asked, mid-batch
            ctx.interrupt = should_stop
        finish = "error"
        try:
            with self.index.paused():
                finish = yield from self.generate(prompt, max_tokens, should_stop)
        except DecodeInterrupted:
            finish = "cancelled"
        except GeneratorExit:
            finish = "cancelled"  # a consumer that stops iterating has cancelled the reply
            raise
        finally:
            for ctx in contexts:
                ctx.interrupt = None
            text = self._end(recall, chat, finish)
        return text, finish

    def _end(self, recall: list[int] | None, chat: int | None, finish: str) -> str:
        """The reply joins the conversation as far as it was shown, and is kept with the ``recall`` tokens before it
        for drafting in later chats (None: it is not, being private); returns its text."""
        stats = self.stats
        # Bytes of a character the reply was cut inside are not text (llama.cpp's server holds them back too): the
        # text is what was shown, and the tokens keep every byte.
        text = "".join(self.pieces)
        self.chat.end_turn(text, list(self.reply_tokens), finish)
        stats.t_total = perf_counter() - self.started
        governor = self.governor
        busy = governor is not None and not quiet(governor.busiest)
        stats.busy_cores = governor.busiest if busy else None
        self.speculation.end_reply(recall, self.reply_tokens, chat, quiet=not busy)
        if finish not in ("cancelled", "error"):  # (a cancel wants the prompt back at once)
            # "Off" is never for good: between replies, the costs "auto" judged by are probed again where due.
            with self.index.paused():  # the stored chats' index waits, as for every timing
                self.speculation.retime(stats.t_total - stats.t_prefill,
                                        governor.others if governor is not None else None, len(self.chat.tokens))
        final_state = self.speculation.state()  # as the next reply starts: a re-timing may have switched it
        stats.speculation_active, stats.speculation_reason = final_state.active, final_state.reason
        stats.context_used = len(self.chat.tokens)
        stats.threads = governor.threads if governor is not None else self.config.target.threads
        return text

    def generate(self, prompt: list[int], max_tokens: int,
                 should_stop: Callable[[], bool]) -> Generator[Event, None, str]:
        """The prefill's token, then draft → verify steps until the reply ends; returns why it ended."""
        stats = self.stats
        t = perf_counter()
        stats.prefill_tokens = self.ctx.sync(prompt)
        stats.t_prefill = perf_counter() - t
        row = self.ctx.logits()[-1]
        judged = [RowJudgement(ranked(row, self.rules.top)[0])] if self.rules.top else []
        first = pick(row, self.config.sampling, self.rules.rng)
        if self.target.is_eog(first):
            return "stop"
        yield self._emit(first, TokenKind.TARGET, 0, self._judgement(judged, None, 0))
        step = 0
        while True:
            ended = self._ended(max_tokens, should_stop)
            if ended:
                return ended
            step += 1
            outcome = self._step(max_tokens)
            yield from self._step_events(outcome, step)
            if self.looped:
                # Cut midway through the accepted tokens, the step left the rest in the cache: drop them.
                self.ctx.truncate(len(self.chat.tokens))
                return "loop"
            if outcome.ends_reply:
                stats.end_from_draft = outcome.token is None
                return "stop"
            governor = self.governor
            if governor is not None and governor.check():
                yield ThreadsAdjusted(governor.threads, governor.allowed, governor.others, governor.n_cores)

    def _ended(self, max_tokens: int, should_stop: Callable[[], bool]) -> str | None:
        """Why the reply ends before another step, if it does."""
        if self.stats.generated >= max_tokens:
            return "length"
        if should_stop():
            return "cancelled"
        if self.config.n_ctx - len(self.ctx.cached) - 1 < 0:  # no slot left after the pending token
            return "context_full"
        return None

    def _step(self, max_tokens: int) -> StepOutcome:
        """One draft → verify step, with room for the target's own token after the draft, so every judged token can
        be shown."""
        room = self.config.n_ctx - len(self.ctx.cached) - 1
        limit = min(room, max_tokens - self.stats.generated - 1, (self.speculation.max_verify or self.ctx.n_batch) - 1)
        k, choose = self.speculation.begin_step(limit)
        self._depth = len(self.ctx.cached)
        return speculate(self.ctx, self.chat.tokens, self.speculation.drafter, k, self.rules, choose)

    def _step_events(self, outcome: StepOutcome, step: int) -> Iterator[Event]:
        """A step's events in the documented order: accepted tokens, rejected tail, the target's token, counts."""
        stats = self.stats
        stats.t_draft += outcome.t_draft
        stats.t_verify += outcome.t_verify
        rows, draft = outcome.rows, outcome.draft
        drafted, accepted = outcome.drafted, outcome.n_accepted
        for i, token in enumerate(outcome.accepted):
            yield self._emit(token, TokenKind.ACCEPTED, step, self._judgement(rows, draft, i))
            if self.looped:  # a loop completed midway: the reply ends here, the step counts as far as it was shown
                drafted = accepted = i + 1
                break
        stats.record_step(drafted, accepted, outcome.ignored, outcome.withheld, outcome.draft.from_text)
        if outcome.rejected and not self.looped:
            tail = outcome.rejected
            yield DraftRejected(tuple(tail), self.target.detokenize([t for t in tail if t < self.target.n_vocab]), step,
                                tuple(self._text(t) for t in tail))
        if outcome.token is not None and not self.target.is_eog(outcome.token) and not self.looped:
            yield self._emit(outcome.token, outcome.kind, step, self._judgement(rows, draft, outcome.n_accepted))
        self.speculation.stepped(outcome, self._depth, self.chat.tokens)
        state = self.speculation.state()  # "auto" switched, or the drafter met a token it cannot read
        if state != self.state:
            self.state = state
            yield SpeculationChanged(state)
        length = self.speculation.draft_length
        stats.draft_length = length
        yield StepVerified(step, drafted, accepted, outcome.ignored, outcome.withheld, length, len(self.chat.tokens),
                           draft.source if drafted else None, draft.origin if drafted else None)

    def _text(self, token: int) -> str:
        """A candidate's text: a token that is only part of a UTF-8 character shows its bytes (<0xE3>), not U+FFFD;
        the end of the reply is named ``<end>``, another control token (no text of its own) by its name."""
        if not 0 <= token < self.target.n_vocab:
            return ""
        if self.target.is_eog(token):
            return END_OF_REPLY
        piece = self.target.piece(token)
        if not piece:
            return self.target.token_text(token).decode("utf-8", "replace") or f"<token {token}>"
        try:
            return piece.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"<0x{b:02X}>" for b in piece)

    def _candidates(self, best: Ranked) -> tuple[Candidate, ...]:
        return tuple(Candidate(token, self._text(token), p) for token, p in best)

    def _judgement(self, rows: list[RowJudgement], draft: Draft | None, i: int) -> Judgement | None:
        """What decided the token at position ``i`` of a step (None when the reply keeps no candidates)."""
        if not rows:
            return None
        row = rows[i]
        if draft is None or i >= len(draft.tokens):  # a plain token, or a bonus: no draft token was judged here
            return Judgement(i, self._candidates(row.top))
        token = draft.tokens[i]
        copied = draft.copied or []
        return Judgement(i, self._candidates(row.top), self._candidates(row.draft_top),
                         Candidate(token, self._text(token), row.p_drafted or 0.0), row.draft_p, row.p_sampled,
                         row.q_sampled, row.accept, len(copied) - len(draft.tokens) if copied else draft.match,
                         self.target.detokenize([t for t in copied if 0 <= t < self.target.n_vocab]), draft.remembered,
                         draft.origin)

    def _emit(self, token: int, kind: TokenKind, step: int, judgement: Judgement | None = None) -> TokenEmitted:
        stats = self.stats
        text = self.decoder.decode(self.target.piece(token))
        self.reply_tokens.append(token)
        self.pieces.append(text)
        self.chat.generated(token)
        elapsed = perf_counter() - self.started
        stats.token_emitted(kind, step, elapsed)
        if self.loop is not None and self.loop.add(token, whole=not self.decoder.getstate()[0]):
            self.looped = True
            stats.loop_span, stats.loop_tokens = self.loop.span, self.loop.covered
        return TokenEmitted(token, text, kind, step, elapsed, judgement)
