"""The engine: a chat with one target model, sped up by a drafter, answering with a stream of events.

``Engine.reply`` turns a user message into events (see ``events``): it prepares the prompt and the turn, and a
``reply_run.ReplyRun`` takes the steps — each one call of ``loop.speculate``: draft, verify, accept, roll back. The
models and what a new configuration reloads are ``loading.ModelPair``'s, the index over the stored chats
``stored_index``'s, the conversation's tokens ``conversation``'s, and what drafts and how far ``speculation``'s: the
drafters in ``drafters`` (a module per method), the draft length in ``draft_length`` and, for ``n_max = "auto"``,
``auto_length`` (its policies in ``policies``, the costs they learn in ``learned_costs``, what lasts between processes
in ``learned_store``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from time import perf_counter

from ..errors import ConfigError
from .chat_template import ChatTemplate
from .engine_config import DEFAULT_MAX_TOKENS, EngineConfig
from .conversation import UNSTORED, ChatKey, Forgotten, Message, TokenWindow
from .cpu import ThreadGovernor
from .draft_length.costs import quiet, watched
from .drafters.stored_chats import StoredChatsDrafter, StoredChats
from .events import Event, PlainMeasured, ReplyFinished, ReplyStarted, SpeculationState
from .llama import Context, Model, common_prefix
from .loading import ModelPair
from .reference import PLAIN_RATE_TOKENS, PlainReference, measure_plain
from .reply_run import ReplyRun
from .speculation import Speculation
from .stats import ReplyStats
from .stored_index import INDEX_BEFORE_REPLY_S, STILL_INDEXING, StoredChatsIndexer

__all__ = ["Engine", "Message"]

RECALL_CONTEXT = 32  # prompt tokens remembered before each reply, so asking again matches them


class Engine:
    """Not thread-safe: drive it from one thread, the same one for its whole life — loading included. llama.cpp's CPU
    backend keeps a team of compute threads (OpenMP) per calling thread; a second caller makes a second team that
    fights the first for the cores (a REPL that loaded on one thread and decoded on another drafted at half speed)."""

    def __init__(self, config: EngineConfig, stored_chats_read: StoredChats | None = None) -> None:
        """``stored_chats_read``: the stored replies to draft from too (``learn_stored_chats``), indexed before anything is
        timed."""
        self.config = config
        self.pair = ModelPair(config)
        self.chat = TokenWindow(self.target, self.template)
        self.speculation = Speculation(config)
        self.index = StoredChatsIndexer(stored_chats_read)
        self._busy_reference = False  # the last plain reference ran beside busy cores (``plain_reference``)
        self._set_up_speculation()
        self._governor = self._new_governor()
        self.new_chat()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def target(self) -> Model:
        return self.pair.target.model

    @property
    def ctx(self) -> Context:
        return self.pair.target.ctx

    @property
    def template(self) -> ChatTemplate:
        return self.pair.target.template

    @property
    def draft_model(self) -> Model | None:
        return self.pair.draft.model if self.pair.draft is not None else None

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
            ([self.stored_chats.problem] if self.stored_chats.problem else [])

    def close(self) -> None:
        self.index.stop()
        self.pair.close()

    def apply(self, config: EngineConfig) -> str:
        """Switch to ``config`` with the least work, keeping the conversation; returns what was done
        (``ModelPair.switch``). If a load fails the engine keeps its previous configuration."""
        old = self.config
        action = self.pair.switch(config)
        self.config = config
        if action == "full reload":
            self.index.stop()  # its index held the old target's token ids
            self.speculation.forget_target()
            # Token ids of the old target mean nothing to the new one: keep the text, re-tokenize.
            messages = [Message(m.role, m.content, None, m.finish_reason) for m in self.messages]
            self.chat = TokenWindow(self.target, self.template)
            self._set_up_speculation()
            self._governor = self._new_governor()
            self.restore(messages)
            return action
        if config.spec != old.spec or config.sampling != old.sampling or action == "draft reloaded":
            self._set_up_speculation()
        else:
            self.speculation.follow(config, self.pair.draft)
        if (config.target.threads, config.adapt_threads) != (old.target.threads, old.adapt_threads):
            self._governor = self._new_governor()
        return action

    def _set_up_speculation(self) -> None:
        """Speculation as the configuration says, with the models loaded now, from the conversation as it is. The
        stored chats are indexed first where that is quick: the first reply drafts from them (issue #47), and a sweep
        waits for no index."""
        self._index_if_read()
        self.index.before_timing()
        with self.index.paused():  # a verify sweep may run
            self.speculation.configure(self.config, self.pair.target, self.pair.draft, len(self.tokens))

    # -- the stored chats --------------------------------------------------------------------------------------

    def learn_stored_chats(self, read: StoredChats) -> None:
        """Draft from the user's stored chats too, where the method reads them ("suffix"): ``read`` yields the stored
        replies, and is called on a thread of its own whenever the index is built (for each target), so the first
        token never waits for it."""
        self.index.read_from(read)
        self._index_if_read()

    def forget(self, what: Forgotten) -> None:
        """A stored chat was deleted or made private, or messages of one deleted: nothing more is drafted from them.
        Any thread may call this."""
        self.speculation.stored_chats.forget(what)

    @property
    def stored_chats(self) -> StoredChatsDrafter:
        return self.speculation.stored_chats

    def wait_for_stored_chats(self, timeout: float | None = None) -> bool:
        """Wait until the index over the stored chats is built; False if it is still building after ``timeout``."""
        return self.index.wait(timeout)

    def _index_if_read(self) -> None:
        if self.config.spec.reads_stored_chats:
            self.index.start(self.speculation.stored_chats, self.target, self.template)

    # -- threads and speculation -------------------------------------------------------------------------------

    def _new_governor(self) -> ThreadGovernor | None:
        if not self.config.adapt_threads:
            return None
        return ThreadGovernor(self.config.target.threads, self.pair.use_threads)

    def speculation_state(self) -> SpeculationState:
        return self.speculation.state()

    # -- conversation ------------------------------------------------------------------------------------------

    def new_chat(self) -> None:
        """Start over with only the system prompt; the KV cache keeps whatever prefix still matches."""
        system = self.config.system_prompt
        self.restore([Message("system", system)] if system else [])

    def restore(self, messages: list[Message]) -> None:
        """Continue an earlier conversation; the KV cache is reused as far as it matches. (A front end passes the
        conversation with every question: when it is already the conversation, nothing is re-tokenized.)"""
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
        for ctx in self.pair.contexts:
            ctx.truncate(0)
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
        self.index.before_timing()
        with self.index.paused():  # (the depth slope, measured once, is timed inside the watched window too)
            reference, others = watched(lambda: measure_plain(self.ctx, self.target, self.tokens, self.config.sampling,
                                                              self.speculation.depth_slope(), tokens))
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
        check_request(user_text, max_tokens, top)
        started = perf_counter()
        cfg = self.config
        stale = self.stored_chats.take_stale()  # chats deleted or made private: what this process kept of them goes
        if stale:
            self.speculation.ngram.forget_chats(stale)
        user = Message("user", user_text)
        prompt, rendered, kept, trimmed = self.chat.prompt(user, min(max_tokens, cfg.n_ctx // 4), cfg.n_ctx)
        if trimmed:
            yield trimmed
        run = self._start_run(len(prompt), top, started)
        reused = min(common_prefix(self.ctx.cached, prompt), len(prompt) - 1)
        recall = prompt[-RECALL_CONTEXT:]  # a copy: ``prompt`` becomes the conversation and grows with the reply
        before = self.chat.tokens
        self.chat.begin_turn(kept, user, prompt, rendered)
        self._index_anew_unless_grown(before)
        indexed = not cfg.spec.reads_stored_chats or self.index.wait(INDEX_BEFORE_REPLY_S)
        yield ReplyStarted(len(prompt), reused, len(prompt) - reused, cfg.n_ctx, run.state,
                           stored_chats="" if indexed else STILL_INDEXING)
        text, finish = yield from run.run(prompt, max_tokens, should_stop, None if chat.private else recall, chat.id)
        measured = self._plain_again(finish)
        if measured is not None:
            yield measured
        yield ReplyFinished(text, finish, run.stats)

    def _start_run(self, prompt_tokens: int, top: int, started: float) -> ReplyRun:
        cfg = self.config
        state = self.speculation_state()
        stats = ReplyStats(method=cfg.spec.method, speculation_active=state.active,
                           speculation_reason=state.reason, draft_length=self.speculation.draft_length,
                           adaptive=cfg.spec.adaptive,
                           prompt_tokens=prompt_tokens, n_ctx=cfg.n_ctx)
        return ReplyRun(cfg, self.pair, self.chat, self.speculation, self._governor, self.index, stats,
                        replace(self.speculation.rules, top=top), started)


def check_request(user_text: str, max_tokens: int, top: int) -> None:
    """One line for a request no reply can answer."""
    if not user_text.strip():
        raise ConfigError("the message is empty — type something to send")
    if max_tokens < 1:
        raise ConfigError(f"max_tokens must be ≥ 1, got {max_tokens}")
    if top < 0:
        raise ConfigError(f"the number of candidates kept per token must be ≥ 0, got {top}")
