"""The chat flow every front end shares: the chat a backend answers in, its replies, and what the screen shows.

The app and the REPL keep only their presentation; everything between a typed message and a saved, measured reply is
here, once — with what runs and its switches in ``switcher`` and a reply's thread and frames in ``replies``. Two kinds
of method:
- *worker thread* (``Exchange.run``, ``Comparison.run``, ``close``, the switcher's ``switch``) call into the backend;
  a front end runs them on its one worker thread (``replies.Replies``: llama.cpp keeps a team of compute threads per
  calling thread);
- the others run on the front end's own thread and never call the backend: they read and change the session (saved as
  it changes) and the live telemetry, from what the worker returned.
Data flows one way: the backend's events → ``absorb`` → the session's records and the telemetry → the front end.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..backends import Backend
from ..engine import ReplyFinished
from ..engine.conversation import ChatKey
from ..engine.events import DraftSource, Event
from ..errors import Refused
from ..profiles import Profile
from ..telemetry.live import LiveTelemetry
from ..telemetry.memory import peak_rss_bytes
from .ab import ABResult, Comparison, conditions_of, refusal
from .advice import Advice, advice
from .attachments import expand
from .choice import Choice
from .exchange import Began, Exchange, Failure
from .export import export
from .records import INTERRUPTED, ReplyRecord, UserTurn
from .session import ChatSession, Problem
from .store import Store, StoreError
from .switcher import BackendFacts, Switcher


class ChatController:
    def __init__(self, store: Store | None, profile: str, on_problem: Problem, *, max_tokens: int) -> None:
        self.session = ChatSession(store, profile, None, on_problem)
        self.telemetry = LiveTelemetry()
        self.switcher = Switcher(self.session, self.telemetry)  # what runs, and its switches
        self.max_tokens = max_tokens
        self.cancel = threading.Event()
        self._quit_record: ReplyRecord | None = None
        self._began: Began | None = None  # what the last exchange changed, to undo when it is refused

    # -- what runs (the switcher's) ----------------------------------------------------------------------------------

    @property
    def backend(self) -> Backend | None:
        return self.switcher.backend

    @property
    def profile(self) -> Profile | None:
        return self.switcher.profile

    @property
    def facts(self) -> BackendFacts | None:
        return self.switcher.facts

    @property
    def choice(self) -> Choice | None:
        return self.switcher.choice

    def close(self) -> None:
        """*Worker thread.* Free the models, stop a managed server (the backend stays readable, closed)."""
        self.switcher.close()

    def advice(self) -> Advice | None:
        """Why speculation is slower than plain here, and what to try instead; None while it is not."""
        t = self.telemetry
        sources = t.drafted_from  # (a server's steps name no source)
        guessed = DraftSource.MODEL in sources or t.reply.drafted > 0 and not sources
        return advice(t.speedup(), t.speculation is not None and t.speculation.active, t.reply.acceptance_rate,
                      self.profile, self.facts.model_bytes if self.facts else {}, guessed)

    # -- an exchange -------------------------------------------------------------------------------------------------

    def begin(self, text: str) -> Exchange:
        """The user's message (with the files it names as ``@path`` in it) and its empty reply join the chat; the
        exchange to run on the worker thread. A file that cannot be attached is refused before anything changes."""
        self.switcher.sendable()
        return self._ask(expand(text, Path.cwd()), text, None)

    def regenerate(self) -> Exchange:
        """The last question again; the reply it had is kept as a branch ("‹ 1/2 ›")."""
        exchange = self.session.last_exchange()
        if exchange is None:
            raise Refused("nothing to answer again yet — ask something first")
        self.switcher.sendable()  # before anything changes
        index, text = exchange
        before = self.session.branch(index + 1)  # (a question without its reply yet keeps no empty version)
        self._began = Began(index + 1, None, before)
        return self._exchange(index, text)

    def edit(self, index: int, text: str) -> Exchange:
        """``text`` sent in place of the user's message at turn ``index``: the chat from there on is kept as a
        branch. The backend's caches are reused up to the edited message (only what follows is decoded)."""
        turns = self.session.turns
        if not (0 <= index < len(turns) and isinstance(turns[index], UserTurn)):
            raise Refused("only a message you wrote can be edited — pick one of yours")
        if not text.strip():
            raise Refused("the edited message is empty — type something to send, or delete the message instead")
        self.switcher.sendable()
        expanded = expand(text, Path.cwd())
        before = self.session.branch(index)
        return self._ask(expanded, text, before)

    def _ask(self, text: str, typed: str, before: int | None) -> Exchange:
        index = len(self.session.turns)
        text = self.session.add_user(text).text
        self._began = Began(index, typed, before)
        return self._exchange(index, text)

    def _exchange(self, upto: int, text: str) -> Exchange:
        """The exchange for ``text`` after the first ``upto`` turns, its empty reply added to the chat."""
        backend, session = self.backend, self.session
        self.catch_up()
        earlier = session.engine_messages(backend.target_id, upto=upto)
        record = session.add_reply(backend.target_id)
        record.conditions = conditions_of(backend.config, session.system_prompt)
        record.profile = self.profile.name if self.profile is not None else ""
        self.cancel = threading.Event()
        return Exchange(backend, earlier, text, self.max_tokens, self.cancel, ChatKey(session.id, session.private))

    def catch_up(self) -> None:
        """What another specchat (``specchat chats private``, another window) deleted or made private since the last
        look is forgotten here too, before the next reply."""
        store = self.session.store
        if store is None:
            return
        try:
            store.catch_up()
        except StoreError:
            pass  # a store that cannot be read now says so at its next save

    # -- branches, forks, deletion, titles (never while a reply streams: the front ends are idle then) -------------

    def delete_from(self, index: int) -> None:
        self.session.delete_from(self._turn(index))

    def fork(self, index: int) -> None:
        """A new chat holding this one up to turn ``index`` (this one stays as it is)."""
        self.session.fork(self._turn(index))
        self.telemetry.reset_chat()

    def _turn(self, index: int) -> int:
        """``index``, refused in one line when the chat has no such turn."""
        if not 0 <= index < len(self.session.turns):
            raise Refused(f"no message {index + 1} in this chat — it has {len(self.session.turns)}")
        return index

    def rename(self, title: str) -> None:
        if not title.strip():
            raise Refused("a chat's title cannot be empty — type one")
        self.session.rename(title)

    def absorb(self, events: list[Event]) -> ReplyFinished | None:
        """Events the worker thread produced, into the telemetry and the reply's record (saved as it changes)."""
        self.telemetry.consume(events)
        record = self.session.last_reply
        if record is None or not record.streaming:
            return None
        record.add(events)
        finished = next((e for e in events if isinstance(e, ReplyFinished)), None)
        if finished is not None and record.stats is not None:
            record.stats["peak_rss"] = peak_rss_bytes(self.facts.pid if self.facts else None)
        self.session.reply_changed(record)
        return finished

    def failed(self, failure: Failure) -> str | None:
        """A reply that stopped with an error. Refused before it began (e.g. larger than the context), the exchange
        leaves no trace — an edit or a regeneration shows what was there before — and the text typed for it is
        returned, to go back into the prompt; else the partial reply stays, marked."""
        record = self.session.last_reply
        began = self._began
        if not failure.started and began is not None:
            self.session.delete_from(began.position, began.shown_before)  # the version shown before, if any
            self.session.forget_if_empty()
            return began.typed
        if record is not None and record.streaming:
            record.finish_reason = "error"
            self.session.changed(record)
        return None

    def cancel_reply(self) -> None:
        self.cancel.set()

    # -- A/B --------------------------------------------------------------------------------------------------------

    def compare(self) -> Comparison:
        """The last reply against the same prompt without speculation (``run`` it on the worker thread)."""
        self.switcher.sendable()
        record = self.session.last_reply
        exchange = self.session.last_exchange()
        why = refusal(record, self.backend.config, self.backend.target_id, self.session.system_prompt)
        if why is not None or record is None or exchange is None:
            raise Refused(why or "A/B needs a reply to compare — ask something first")
        index, text = exchange
        self.cancel = threading.Event()
        return Comparison(self.backend, record, self.session.engine_messages(self.backend.target_id, upto=index),
                          text, self.max_tokens, self.cancel)

    def compared(self, result: ABResult) -> None:
        """A finished A/B: its plain arm is the reference for this prompt, at its depth and with its sampling."""
        if result.plain_reference is not None:
            slope = self.telemetry.reference.per_token_s if self.telemetry.reference is not None else None
            self.telemetry.reference = result.plain_reference(slope)

    # -- the chat ---------------------------------------------------------------------------------------------------

    def new_chat(self) -> None:
        self.session.new(self.profile.system_prompt if self.profile is not None else None)
        self.telemetry.reset_chat()

    def open_chat(self, chat_id: int) -> None:
        self.session.open(chat_id)
        self.telemetry.reset_chat()

    def set_system_prompt(self, text: str | None) -> None:
        self.session.set_system_prompt(text.strip() or None if text is not None else None)

    def export(self, directory: Path, chat_id: int | None = None) -> list[Path]:
        """This chat (or a stored one) as Markdown and JSON in ``directory``."""
        session = self.session
        if chat_id is None and not session.turns:
            raise Refused("nothing to export yet")
        if chat_id is not None:
            session = ChatSession(self.session.store, self.session.profile, None, self.session.on_problem)
            session.open(chat_id)
        try:
            return export(session, directory)
        except OSError as exc:
            raise Refused(f"cannot export to {directory}: {exc.strerror or exc} — name a folder you can write to")

    def quitting(self) -> None:
        """The front end is closing: a reply in progress stops at its next step (a prefill, mid-batch). (Told again
        as it closes, it keeps the reply the first telling stopped.)"""
        record = self.session.last_reply
        if record is not None and record.streaming:
            self._quit_record = record
        self.cancel.set()

    def interrupt(self, late_events: list[Event]) -> None:
        """The front end is closing, after the worker thread finished what it was doing: the events it produced
        meanwhile join the reply, which is kept, marked interrupted (it stopped because the front end closed)."""
        if late_events:
            self.absorb(late_events)
        record = self._quit_record
        if record is not None and record.finish_reason == "cancelled":  # stopped by the closing, not before it
            record.finish_reason = INTERRUPTED
            self.session.changed(record)
        self.session.interrupt()


class ControllerViews:
    """What a front end reads through its controller, under the names its widgets and tests use."""

    controller: ChatController

    @property
    def session(self) -> ChatSession:
        return self.controller.session

    @property
    def telemetry(self) -> LiveTelemetry:
        return self.controller.telemetry

    @property
    def backend(self) -> Backend | None:
        return self.controller.backend

    @property
    def profile(self) -> Profile | None:
        return self.controller.profile
