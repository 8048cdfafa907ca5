"""The engine: a chat with one target model, sped up by a drafter, answering with a stream of events.

``Engine.reply`` turns a user message into events (see ``events``); each verify step is one call of
``loop.speculate`` — draft, verify, accept, roll back — whose outcome is emitted in the documented order. The
conversation's tokens live in ``conversation``, loading and hot reload in ``loading``, and what drafts and how far
in ``speculation``: the drafters in ``drafters`` (a module per method), the draft length in ``draft_length`` and, for
``n_max = "auto"``, ``adaptive`` (its policies in ``auto``, the costs they learn in ``learned_costs``, what lasts
between processes in ``memory``).
"""

from __future__ import annotations

import codecs
import threading
from contextlib import contextmanager
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from time import perf_counter

import numpy as np

from .. import paths
from ..errors import ConfigError
from .candidates import Ranked, RowJudgement, ranked
from .chat_template import ChatTemplate
from .engine_config import DEFAULT_MAX_TOKENS, EngineConfig
from .conversation import UNSTORED, ChatKey, Forgotten, Message, TokenWindow
from .cpu import ThreadGovernor
from .draft_length.costs import quiet, watched
from .drafters import Draft, Drafter
from .drafters.history import History, HistoryBuilder, StoredChats
from .events import (
    Candidate,
    DraftRejected,
    Event,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    Judgement,
    PlainMeasured,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
    TokenKind,
)
from .llama import Context, DecodeInterrupted, Model, common_prefix
from .loading import LoadedDraft, draft_identity, open_pair, target_identity
from .loop import Rules, StepOutcome, speculate
from .phases import announce
from .repetition import LoopWatch, loop_watch
from .reference import PLAIN_RATE_TOKENS, PlainReference
from .sampling import pick
from .speculation import Speculation
from .stats import ReplyStats, rate

__all__ = ["Engine", "Message"]

RECALL_CONTEXT = 32  # prompt tokens remembered before each reply, so asking again matches them
# The stored chats' index comes before the start's timings and the first reply (issue #47: a question asked the moment
# a start ended drafted from its own chat only): the plain reference waits this long for it — a few hundred stored
# replies index within it here, their tokens cached — and a reply this much more; beyond, the reply says so.
INDEX_BEFORE_TIMING_S = 1.0
INDEX_BEFORE_REPLY_S = 0.1
STILL_INDEXING = "the stored chats are still being indexed: this reply drafts from this chat only"
END_OF_REPLY = "<end>"  # how a candidate that ends the reply is named (its piece is no text)


@dataclass
class _Reply:
    """Bookkeeping of the reply being generated."""

    stats: ReplyStats
    started: float
    state: SpeculationState  # the speculation state the reply last announced
    rules: Rules  # the engine's, keeping ``top`` candidates per position when the reply was asked to
    loop: LoopWatch | None  # the reply's tokens watched for a loop, when the configuration stops one
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    looped: bool = False  # the reply ends after the last token shown: it completed a loop (and a character)
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))


class Engine:
    """Not thread-safe: drive it from one thread, the same one for its whole life — loading included. llama.cpp's CPU
    backend keeps a team of compute threads (OpenMP) per calling thread; a second caller makes a second team that
    fights the first for the cores (a REPL that loaded on one thread and decoded on another drafted at half speed)."""

    def __init__(self, config: EngineConfig, read_history: StoredChats | None = None) -> None:
        """``read_history``: the stored replies to draft from too (``learn_history``), indexed before anything is
        timed."""
        self.config = config
        self._target, self._draft = open_pair(config)
        self.chat = TokenWindow(self._target.model, self._target.template)
        self.speculation = Speculation(config)
        self._read_history = read_history
        self._history_builder: HistoryBuilder | None = None
        self._idle = threading.Event()  # no reply running: the index over earlier chats builds only then
        self._idle.set()
        self._busy_reference = False  # the last plain reference ran beside busy cores (``plain_reference``)
        self._set_up_speculation()
        self._governor = self._new_governor()
        self.new_chat()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def target(self) -> Model:
        return self._target.model

    @property
    def ctx(self) -> Context:
        return self._target.ctx

    @property
    def template(self) -> ChatTemplate:
        return self._target.template

    @property
    def draft_model(self) -> Model | None:
        return self._draft.model if self._draft is not None else None

    @property
    def messages(self) -> list[Message]:
        return self.chat.messages

    @property
    def tokens(self) -> list[int]:
        return self.chat.tokens

    @property
    def notes(self) -> list[str]:
        """What the configuration does differently from what it says, each as one line to show once."""
        return ([self.template.note] if self.template.note else []) + self.speculation.notes() + \
            ([self.history.problem] if self.history.problem else [])

    def close(self) -> None:
        self._stop_history()
        if self._draft is not None:
            self._draft.close()
        self._target.close()

    def apply(self, config: EngineConfig) -> str:
        """Switch to ``config`` with the least work, keeping the conversation; returns what was done.

        "parameters": draft length, sampling or a method the loaded models serve change from the next step on, nothing
        reloads.
        "draft reloaded": only the draft model changed. "full reload": the target changed (both models reload and
        the conversation is re-tokenized for it). If a load fails the engine keeps its previous configuration.
        """
        old = self.config
        if target_identity(config) != target_identity(old):
            target, draft = open_pair(config)
            self.close()
            self._target, self._draft, self.config = target, draft, config
            self.speculation.forget_target()
            self._history_builder = None  # its index held the old target's token ids
            messages = [Message(m.role, m.content, None, m.finish_reason) for m in self.messages]
            self.chat = TokenWindow(target.model, target.template)
            self._set_up_speculation()
            self._governor = self._new_governor()
            # Token ids of the old target mean nothing to the new one: keep the text, re-tokenize.
            self.restore(messages)
            return "full reload"
        action = "parameters"
        wanted_draft = config.draft if config.spec.uses_draft_model else None
        if wanted_draft is not None and (self._draft is None or self._draft.identity != draft_identity(wanted_draft)):
            draft = LoadedDraft.open(config)
            if self._draft is not None:
                self._draft.close()
            self._draft = draft
            action = "draft reloaded"
        elif self._draft is not None and (config.draft is None or self._draft.identity != draft_identity(config.draft)):
            # The profile no longer names this draft: free its memory rather than keep it for a toggle back.
            self._draft.close()
            self._draft = None
        if config.target.threads != old.target.threads:
            self.ctx.set_threads(config.target.threads)
        if self._draft is not None and config.draft is not None and config.draft.threads != self._draft.threads:
            self._draft.ctx.set_threads(config.draft.threads)
            self._draft.threads = config.draft.threads
        self.config = config
        if config.spec != old.spec or config.sampling != old.sampling or action == "draft reloaded":
            self._set_up_speculation()
        else:
            self.speculation.follow(config, self._draft)
        if (config.target.threads, config.adapt_threads) != (old.target.threads, old.adapt_threads):
            self._governor = self._new_governor()
        return action

    def _set_up_speculation(self) -> None:
        """Speculation as the configuration says, with the models loaded now, from the conversation as it is. The
        stored chats are indexed first where that is quick: the first reply drafts from them (issue #47), and a sweep
        waits for no index."""
        self._index_history_if_read()
        self._index_before_timing()
        with self._measuring():  # a verify sweep may run
            self.speculation.configure(self.config, self._target, self._draft, len(self.tokens))

    @contextmanager
    def _measuring(self) -> Iterator[None]:
        """Timings are taken: the index over earlier chats waits (it would slow them, and a measured cost with it)."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    # -- earlier chats -----------------------------------------------------------------------------------------

    def learn_history(self, read: StoredChats) -> None:
        """Draft from the user's earlier chats too, where the method reads them ("suffix"): ``read`` yields the stored
        replies, and is called on a thread of its own whenever the index is built (for each target), so the first
        token never waits for it."""
        self._stop_history()
        self._read_history = read
        self._history_builder = None
        self._index_history_if_read()

    def forget(self, what: Forgotten) -> None:
        """A stored chat was deleted or made private, or messages of one deleted: nothing more is drafted from them.
        Any thread may call this."""
        self.speculation.history.forget(what)

    @property
    def history(self) -> History:
        return self.speculation.history

    def wait_for_history(self, timeout: float | None = None) -> bool:
        """Wait until the index over earlier chats is built; False if it is still building after ``timeout``."""
        return self._history_builder is None or self._history_builder.wait(timeout)

    def _index_before_timing(self) -> None:
        """A timing pauses the index: it waits up to INDEX_BEFORE_TIMING_S for it first, saying so, so that the first
        reply drafts from the stored chats (under a second for some 800 stored messages here)."""
        if not self.wait_for_history(0):
            announce("indexing the stored chats (the first reply drafts from them)")
            self.wait_for_history(INDEX_BEFORE_TIMING_S)

    def _index_history_if_read(self) -> None:
        if self._read_history is None or self._history_builder is not None \
                or not self.config.spec.reads_history:
            return
        target = self.target
        self._history_builder = HistoryBuilder(self.speculation.history, self._read_history, target.path,
                                               target.identity, self.template,
                                               paths.cache_dir() / "history" / f"{target.identity}.npz", self._idle)

    def _stop_history(self) -> None:
        if self._history_builder is not None:
            self._history_builder.stop()

    def _new_governor(self) -> ThreadGovernor | None:
        if not self.config.adapt_threads:
            return None
        return ThreadGovernor(self.config.target.threads, self._use_threads)

    def _use_threads(self, threads: int) -> None:
        """Decode with ``threads`` threads from now on (never more than each model is configured for)."""
        self.ctx.set_threads(min(threads, self.config.target.threads))
        if self._draft is not None:
            self._draft.ctx.set_threads(min(threads, self._draft.threads))

    @property
    def ngram_index_size(self) -> int:
        """n-gram keys the prompt-lookup drafter holds (bounded however long the chat: benchmarks/stress)."""
        return self.speculation.ngram.index_size

    @property
    def threads(self) -> int:
        return self._governor.threads if self._governor is not None else self.config.target.threads

    @property
    def drafter(self) -> Drafter | None:
        return self.speculation.drafter

    @property
    def max_verify(self) -> int | None:
        return self.speculation.max_verify

    @property
    def n_max(self) -> int:
        return self.speculation.n_max

    def speculation_state(self) -> SpeculationState:
        return self.speculation.state()

    # -- conversation ------------------------------------------------------------------------------------------

    def new_chat(self) -> None:
        """Start over with only the system prompt; the KV cache keeps whatever prefix still matches."""
        system = self.config.system_prompt
        self.restore([Message("system", system)] if system else [])

    def restore(self, messages: list[Message]) -> None:
        """Continue an earlier conversation; the KV cache is reused as far as it matches. (A front end passes its
        history with every question: when it is already the conversation, nothing is re-tokenized.)"""
        before = self.chat.tokens
        if self.chat.restore(messages):
            self._index_anew_unless_grown(before)

    def _index_anew_unless_grown(self, before: list[int]) -> None:
        """Drafters that index the conversation start over unless it only grew from ``before``."""
        if common_prefix(before, self.chat.tokens) < len(before):
            self.speculation.ngram.reset()

    def clear_cache(self, *, replies: bool = False) -> None:
        """Empty the KV caches, so the next reply decodes its whole prompt (benchmarks time cold prompts); with
        ``replies``, forget the replies the n-gram drafter remembers from earlier conversations too."""
        self.ctx.truncate(0)
        if self._draft is not None:
            self._draft.ctx.truncate(0)
        if replies:
            self.speculation.ngram.forget()

    def truncate_cache(self, n_keep: int) -> None:
        """Keep only the first ``n_keep`` cached tokens (an A/B rerun starts from the cache state of the reply it
        compares with)."""
        self.ctx.truncate(n_keep)

    def plain_reference(self, tokens: int = PLAIN_RATE_TOKENS) -> PlainReference | None:
        """Plain decoding of this target, measured through the same step a reply takes and undone: what "vs plain"
        compares with. A run of ``tokens`` at the conversation's depth with the profile's sampling (its own random
        draws: the target's are not disturbed), and how much a step slows per token of context (measured once per
        model, threads and KV cache, kept in the user cache). None when the context has no room for the run."""
        self._index_before_timing()
        with self._measuring():
            reference, others = watched(lambda: self._plain_reference(tokens))
        # Beside busy cores a start read 3 tok/s where the machine decodes at 150 (issue #47): such a run is marked,
        # compared with nothing, and measured again after the first reply that finds the machine quiet.
        self._busy_reference = reference is not None and not quiet(others)
        if self._busy_reference:
            reference = replace(reference, busy=others)
        return reference

    def _plain_again(self, finish: str) -> PlainMeasured | None:
        """Between replies: the plain run again where the last one was taken beside busy cores, if it is quiet now."""
        if not self._busy_reference or finish in ("cancelled", "error"):
            return None
        if not quiet(watched(lambda: None)[1]):  # a look at the cores first (0.2 s): a busy run would cost seconds
            return None
        reference = self.plain_reference()
        if reference is None or reference.busy is not None:
            return None
        return reference.remeasured()

    def _plain_reference(self, tokens: int) -> PlainReference | None:
        slope = self.speculation.depth_slope()
        announce(f'measuring plain decoding for "vs plain" ({tokens} tokens)')
        seq = list(self.tokens) or [max(self.target.bos, 0)]
        keep = len(seq) - 1
        if keep + tokens + 1 >= self.ctx.n_ctx:
            return None
        if keep:
            self.ctx.sync(seq[:-1])
        else:
            self.ctx.truncate(0)
        sampling = self.config.sampling
        rules = Rules(sampling, np.random.default_rng(sampling.seed), np.random.default_rng(sampling.seed), self.target)
        times = []
        for _ in range(tokens):
            seq.append(speculate(self.ctx, seq, None, 0, rules).token)
            times.append(perf_counter())
        self.ctx.truncate(keep)
        tps = rate(len(times) - 1, times[-1] - times[0])
        if tps is None:
            return None
        return PlainReference.measured(tps, keep + tokens // 2, slope, not sampling.greedy,
                                       f"a plain run of {tokens} tokens after loading, same loop")

    # -- generation --------------------------------------------------------------------------------------------

    def reply(
        self,
        user_text: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        should_stop: Callable[[], bool] = lambda: False,
        top: int = 0,
        chat: ChatKey = UNSTORED,
    ) -> Iterator[Event]:
        """Answer ``user_text``, yielding events as tokens are decided. Stops between steps when ``should_stop()``.
        With ``top``, each token carries its ``Judgement``: the ``top`` best candidates of the target (and of a model
        draft) at its position, for the token inspector. ``chat``: the stored chat the reply is in — the reply is kept
        for drafting in later chats unless that chat is private."""
        if not user_text.strip():
            raise ConfigError("the message is empty — type something to send")
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be ≥ 1, got {max_tokens}")
        if top < 0:
            raise ConfigError(f"the number of candidates kept per token must be ≥ 0, got {top}")
        started = perf_counter()
        cfg = self.config
        stale = self.history.take_stale()  # chats deleted or made private: what this process kept of them goes
        if stale:
            self.speculation.ngram.forget_chats(stale)
        user = Message("user", user_text)
        prompt, rendered, history, trimmed = self.chat.prompt(user, min(max_tokens, cfg.n_ctx // 4), cfg.n_ctx)
        if trimmed:
            yield trimmed
        state = self.speculation_state()
        stats = ReplyStats(method=cfg.spec.method, speculation_active=state.active,
                           speculation_reason=state.reason, n_max=self.n_max, adaptive=cfg.spec.adaptive,
                           prompt_tokens=len(prompt), n_ctx=cfg.n_ctx)
        reused = min(common_prefix(self.ctx.cached, prompt), len(prompt) - 1)
        recall = prompt[-RECALL_CONTEXT:]  # a copy: ``prompt`` becomes the conversation and grows with the reply
        before = self.chat.tokens
        self.chat.begin_turn(history, user, prompt, rendered)
        self._index_anew_unless_grown(before)
        indexed = not self.config.spec.reads_history or self.wait_for_history(INDEX_BEFORE_REPLY_S)
        yield ReplyStarted(len(prompt), reused, len(prompt) - reused, cfg.n_ctx, state,
                           stored_chats="" if indexed else STILL_INDEXING)

        reply = _Reply(stats, started, state, replace(self.speculation.rules, top=top), loop_watch(cfg.loop))
        self.speculation.begin_reply()
        if self._governor is not None:
            self._use_threads(self._governor.threads)  # models loaded since were made with the profile's count
            self._governor.busiest = 0.0
        contexts = [self.ctx] + ([self._draft.ctx] if self._draft is not None else [])
        for ctx in contexts:  # a long prefill (the target's, or the draft's first) stops when asked, mid-batch
            ctx.interrupt = should_stop
        finish = "error"
        self._idle.clear()
        try:
            finish = yield from self._generate(reply, prompt, max_tokens, should_stop)
        except DecodeInterrupted:
            finish = "cancelled"
        except GeneratorExit:
            finish = "cancelled"  # a consumer that stops iterating has cancelled the reply
            raise
        finally:
            self._idle.set()
            for ctx in contexts:
                ctx.interrupt = None
            text = self._end_reply(reply, recall if not chat.private else None, chat.id, finish)
        measured = self._plain_again(finish)
        if measured is not None:
            yield measured
        yield ReplyFinished(text, finish, stats)

    def _generate(self, reply: _Reply, prompt: list[int], max_tokens: int,
                  should_stop: Callable[[], bool]) -> Generator[Event, None, str]:
        """The prefill's token, then draft → verify steps until the reply ends; returns why it ended."""
        cfg, stats = self.config, reply.stats
        t = perf_counter()
        stats.prefill_tokens = self.ctx.sync(prompt)
        stats.t_prefill = perf_counter() - t
        row = self.ctx.logits()[-1]
        judged = [RowJudgement(ranked(row, reply.rules.top)[0])] if reply.rules.top else []
        first = pick(row, cfg.sampling, reply.rules.rng)
        if self.target.is_eog(first):
            return "stop"
        yield self._emit(reply, first, TokenKind.TARGET, 0, self._judgement(judged, None, 0))
        step = 0
        while True:
            room = cfg.n_ctx - len(self.ctx.cached) - 1  # slots left after the pending token
            if stats.generated >= max_tokens:
                return "length"
            if should_stop():
                return "cancelled"
            if room < 0:
                return "context_full"
            step += 1
            # Room for the target's own token after the draft, so every judged token can be shown.
            limit = min(room, max_tokens - stats.generated - 1, (self.max_verify or self.ctx.n_batch) - 1)
            k, choose = self.speculation.begin_step(limit)
            depth = len(self.ctx.cached)
            outcome = speculate(self.ctx, self.tokens, self.drafter, k, reply.rules, choose)
            yield from self._step_events(reply, outcome, step, depth)
            if reply.looped:
                # Cut midway through the accepted tokens, the step left the rest in the cache: drop them.
                self.ctx.truncate(len(self.tokens))
                return "loop"
            if outcome.ends_reply:
                stats.end_from_draft = outcome.token is None
                return "stop"
            governor = self._governor
            if governor is not None and governor.check():
                yield ThreadsAdjusted(governor.threads, governor.allowed, governor.others, governor.n_cores)

    def _end_reply(self, reply: _Reply, recall: list[int] | None, chat: int | None, finish: str) -> str:
        """The reply joins the conversation as far as it was shown, and is kept with the ``recall`` tokens before it
        for drafting in later chats (None: it is not, being private); returns its text."""
        stats = reply.stats
        # Bytes of a character the reply was cut inside are not text (llama.cpp's server holds them back too): the
        # text is what was shown, and the tokens keep every byte.
        text = "".join(reply.text)
        self.chat.end_turn(text, list(reply.tokens), finish)
        stats.t_total = perf_counter() - reply.started
        governor = self._governor
        busy = governor is not None and not quiet(governor.busiest)
        stats.busy_cores = governor.busiest if busy else None
        self.speculation.end_reply(recall, reply.tokens, chat, quiet=not busy)
        if finish not in ("cancelled", "error"):  # (a cancel wants the prompt back at once)
            # "Off" is never for good: between replies, the costs "auto" judged by are probed again where due.
            with self._measuring():  # the stored chats' index waits, as for every timing
                self.speculation.retime(stats.t_total - stats.t_prefill,
                                        governor.others if governor is not None else None, len(self.tokens))
        final_state = self.speculation_state()  # as the next reply starts: a re-timing may have switched it
        stats.speculation_active, stats.speculation_reason = final_state.active, final_state.reason
        stats.context_used = len(self.tokens)
        stats.threads = self.threads
        return text

    def _step_events(self, reply: _Reply, outcome: StepOutcome, step: int, depth: int) -> Iterator[Event]:
        """A step's events in the documented order: accepted tokens, rejected tail, the target's token, counts."""
        stats = reply.stats
        stats.t_draft += outcome.t_draft
        stats.t_verify += outcome.t_verify
        rows, draft = outcome.rows, outcome.draft
        drafted, accepted = outcome.drafted, outcome.n_accepted
        for i, token in enumerate(outcome.accepted):
            yield self._emit(reply, token, TokenKind.ACCEPTED, step, self._judgement(rows, draft, i))
            if reply.looped:  # a loop completed midway: the reply ends here, the step counts as far as it was shown
                drafted = accepted = i + 1
                break
        stats.record_step(drafted, accepted, outcome.ignored, outcome.withheld, outcome.draft.from_text)
        if outcome.rejected and not reply.looped:
            tail = outcome.rejected
            yield DraftRejected(tuple(tail), self.target.detokenize([t for t in tail if t < self.target.n_vocab]), step,
                                tuple(self._text(t) for t in tail))
        if outcome.token is not None and not self.target.is_eog(outcome.token) and not reply.looped:
            yield self._emit(reply, outcome.token, outcome.kind, step, self._judgement(rows, draft, outcome.n_accepted))
        self.speculation.stepped(outcome, depth, self.tokens)
        state = self.speculation_state()  # "auto" switched, or the drafter met a token it cannot read
        if state != reply.state:
            reply.state = state
            yield SpeculationChanged(state)
        stats.n_max = self.n_max
        draft = outcome.draft
        yield StepVerified(step, drafted, accepted, outcome.ignored, outcome.withheld, self.n_max, len(self.tokens),
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

    def _emit(self, reply: _Reply, token: int, kind: TokenKind, step: int,
              judgement: Judgement | None = None) -> TokenEmitted:
        stats = reply.stats
        text = reply.decoder.decode(self.target.piece(token))
        reply.tokens.append(token)
        reply.text.append(text)
        self.chat.generated(token)
        elapsed = perf_counter() - reply.started
        stats.token_emitted(kind, step, elapsed)
        if reply.loop is not None and reply.loop.add(token, whole=not reply.decoder.getstate()[0]):
            reply.looped = True
            stats.loop_span, stats.loop_tokens = reply.loop.span, reply.loop.covered
        return TokenEmitted(token, text, kind, step, elapsed, judgement)
