"""The chat flow every front end shares: which backend answers, the chat it answers in, and what the screen shows.

The app and the REPL keep only their presentation and their threading; everything between a typed message and a
saved, measured reply is here, once. Two kinds of method:
- *engine thread* (``switch_profile``, ``Exchange.run``, ``Comparison.run``, ``close``) call into the backend; a front
  end runs them on its one engine thread (llama.cpp keeps a team of compute threads per calling thread);
- the others run on the front end's own thread and never call the backend: they read and change the session (saved as
  it changes) and the live telemetry, from what the engine thread returned.
Data flows one way: the backend's events → ``absorb`` → the session's records and the telemetry → the front end.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..backends import Backend, switch_backend
from ..engine import ReplyFinished
from ..engine.conversation import ChatKey, Forgotten
from ..engine.drafters.history import StoredChats
from ..engine.events import DraftSource, Event, SpeculationState
from ..errors import Refused, SwitchFailed
from ..figures import DASH
from ..profiles import Profile, load_profile
from ..telemetry.live import LiveTelemetry
from ..telemetry.memory import peak_rss_bytes
from ..engine.reference import PlainReference
from .ab import ABResult, Comparison, conditions_of, refusal
from .advice import Advice, advice
from .attachments import expand
from .choice import Choice, one_step
from .exchange import Began, Exchange, Failure
from .export import export
from .recall import stored_replies
from .records import INTERRUPTED, ReplyRecord, UserTurn
from .session import ChatSession, Problem
from .store import Store, StoreError

# What a profile switch did that leaves the target as it was (its plain reference still holds).
SAME_TARGET = ("parameters", "draft reloaded", "server restarted")
# What a switch's action means for the user: what was loaded again, and what was kept.
RELOADS = {"parameters": "nothing reloaded, the target's cache kept",
           "server restarted": "the server restarted (its cache starts empty)"}


@dataclass(frozen=True)
class BackendFacts:
    """What the front ends show about the backend, read on the engine thread whenever it changes."""

    where: str
    pid: int | None
    method: str
    speculation: SpeculationState
    n_max: int
    adaptive: bool  # n_max is "auto"'s last choice
    notes: tuple[str, ...]
    rejected_tails: bool
    model_bytes: dict[str, int]
    sampled: bool  # the profile samples (a temperature above 0): a reference taken from its replies is sampled too
    cpu_only: str  # GPU layers asked for that a CPU-only build runs on the CPU (``Backend.cpu_only``), "" otherwise

    @staticmethod
    def of(backend: Backend) -> BackendFacts:
        spec = backend.config.spec  # "auto" is specchat's own loop: a llama-server drafts a fixed length
        adaptive = spec.adaptive and spec.method != "none" and backend.config.backend_kind.runs_engine
        return BackendFacts(backend.where, backend.pid, spec.method, backend.speculation_state(), backend.n_max,
                            adaptive, tuple(backend.notes), backend.rejected_tails,
                            {role: path.stat().st_size for role, path in backend.model_files().items()},
                            not backend.config.sampling.greedy, backend.cpu_only)


@dataclass(frozen=True)
class Switched:
    """A profile now in use, and what it took."""

    choice: Choice
    profile: Profile
    action: str  # "loaded", "parameters", "draft reloaded", "full reload", "server restarted", "backend switched", …
    facts: BackendFacts
    reference: PlainReference | None  # measured after the switch; None with ``keep_reference``
    no_reference: str  # why ``reference`` is None when it was measured for
    keep_reference: bool  # the same target with the same sampling: the reference there was still holds

    def announcement(self, before: Choice | None) -> str:
        """One line for the switch, naming what it changed and what that took."""
        took = RELOADS.get(self.action, self.action)
        choice = self.choice
        if before is not None and before.same_profile == choice.same_profile:
            if before.speculation_off != choice.speculation_off:
                return f"speculation {'off, by hand' if choice.speculation_off else 'on again'}: {took}"
            if before.n_max != choice.n_max:
                return f"draft length {choice.n_max}: {took}"
        return f"profile {self.profile.name}: {took}"


class ChatController:
    def __init__(self, store: Store | None, profile: str, on_problem: Problem, *, max_tokens: int) -> None:
        self.session = ChatSession(store, profile, None, on_problem)
        self.telemetry = LiveTelemetry()
        self.max_tokens = max_tokens
        self.backend: Backend | None = None
        self.profile: Profile | None = None
        self.facts: BackendFacts | None = None
        self.choice: Choice | None = None  # what runs now: a profile and the toggles on top of it
        self.previous: Choice | None = None  # the profile before the last switch to another (previous_profile)
        self.cancel = threading.Event()
        self.closed = False
        self._quit_record: ReplyRecord | None = None
        self._began: Began | None = None  # what the last exchange changed, to undo when it is refused
        self._shown_notes: set[str] = set()

    # -- profiles and backends -------------------------------------------------------------------------------------

    def switch_profile(self, name: str, draft: Path | None = None) -> Switched:
        """*Engine thread.* Load a profile (optionally with another draft model); see ``switch``."""
        return self.switch(Choice(name, draft))

    def switch(self, choice: Choice) -> Switched:
        """*Engine thread.* Run ``choice`` with the least reload: parameters, a draft, the target, a server restart,
        or another backend altogether. A failed switch keeps what there was."""
        profile = load_profile(choice.profile)
        config = choice.config(profile)
        system_prompt = self.session.system_prompt if self.profile is not None else config.system_prompt
        config = dataclasses.replace(config, system_prompt=system_prompt)
        before = self.backend.config if self.backend is not None else None
        try:  # a backend opened anew is given the stored chats to index before it times anything
            self.backend, action = switch_backend(self.backend, config, self._stored_chats())
        except SwitchFailed as exc:  # what runs now is the previous profile opened again, another pid, or nothing
            self.backend = exc.backend
            self.facts = BackendFacts.of(self.backend) if self.backend is not None else None
            raise
        keep = action in SAME_TARGET and before is not None and (before.target, before.kv_cache, before.sampling) == \
            (config.target, config.kv_cache, config.sampling)  # the same threads and GPU layers too
        # A server restarted for the same target (a toggle) is measured again when it decodes plainly, and keeps the
        # reference it had otherwise.
        reference = None if keep and action != "server restarted" else self.backend.plain_reference()
        no_reference = "" if keep or reference is not None else self.backend.no_reference
        return Switched(choice, profile, action, BackendFacts.of(self.backend), reference, no_reference, keep)

    def _stored_chats(self) -> StoredChats | None:
        """What a backend drafts from besides the chat, where its method does (read off the engine thread); None
        until the session has its store (a front end may give it after making the controller)."""
        store = self.session.store
        if store is None:
            return None
        if self._forget not in store.forgetting:
            store.forgetting.append(self._forget)
        return partial(stored_replies, store.path)

    def store_opened(self) -> None:
        """*Engine thread.* The session's store opened late (another process held it): the backend drafts from the
        stored chats too, where its method does."""
        stored = self._stored_chats()
        if self.backend is not None and stored is not None:
            self.backend.learn_history(stored)

    def _forget(self, what: Forgotten) -> None:
        """Told by the store (any thread): a chat deleted or made private, or messages of one deleted."""
        if what.messages is None and what.chat == self.session.id:
            self.session.private = True  # made private while open (by another process, say): its replies stay here
        if self.backend is not None:
            self.backend.forget(what)

    def profile_switched(self, switched: Switched) -> list[str]:
        """The switch's result on screen; returns the notes not shown before, one line each."""
        first = self.profile is None
        previous = self.choice
        if previous is not None and previous.same_profile != switched.choice.same_profile:
            self.previous = previous
        self.choice, self.profile, self.facts = switched.choice, switched.profile, switched.facts
        if first and self.session.id is None and not self.session.turns:
            # The first profile gives a new chat its system prompt; a switch (or a chat opened) keeps the chat's.
            self.session.system_prompt = switched.profile.system_prompt
        self.session.set_profile(switched.profile.name)
        if switched.reference is not None or not switched.keep_reference:
            # Measured on another target or sampling, a reference means nothing here.
            self.telemetry.reference = switched.reference
            self.telemetry.unmeasured = switched.no_reference
        if previous is None or previous.same_profile != switched.choice.same_profile:
            self.telemetry.reset_chat()  # the chat's counters are per profile; a toggle keeps them
        self.telemetry.speculation = switched.facts.speculation
        self.telemetry.n_max = switched.facts.n_max
        self.telemetry.adaptive = switched.facts.adaptive
        self.telemetry.sampled = switched.facts.sampled
        fresh = [note for note in switched.facts.notes if note not in self._shown_notes]
        self._shown_notes.update(fresh)
        return fresh

    # -- quick toggles: each a new choice made from the one in use (UI thread; ``switch`` it on the engine thread) --

    def _in_use(self) -> Choice:
        if self.choice is None or self.backend is None:
            raise Refused(self.why_not_send() or "")
        return self.choice

    def speculation_toggled(self) -> Choice:
        """Speculation off for the following messages (the same target decodes plainly, its cache kept), or on."""
        choice = self._in_use()
        if not self.backend.config.backend_kind.switches_speculation:
            raise Refused("speculation on a server specchat does not start cannot be switched off from here — start"
                          " it with [backend] kind = \"llama-server\", or pick a profile without speculation")
        if not choice.speculation_off and self.backend.config.spec.method == "none":
            raise Refused(f"profile {self.profile.name} does not speculate (method none) — pick one that does (F2)")
        return choice.toggled()

    def previous_profile(self) -> Choice:
        """The profile before the last switch to another one (as ``cd -``), with the toggles it had."""
        self._in_use()
        if self.previous is None:
            raise Refused("no earlier profile in this session yet — switch with F2 (or /profile NAME) first")
        return self.previous

    def draft_length(self, step: int) -> Choice:
        """The draft length one token longer (1) or shorter (-1) than the one in use, from the next step."""
        return self._in_use().with_draft_length(self.backend.config, one_step(self.backend.n_max, step))

    def draft_length_set(self, n_max: int | str) -> Choice:
        """The draft length set to ``n_max`` tokens, or back to "auto"."""
        wanted = self._in_use().with_draft_length(self.backend.config, n_max)
        wanted.config(self.profile)  # an impossible length is refused here, in one line
        return wanted

    def advice(self) -> Advice | None:
        """Why speculation is slower than plain here, and what to try instead; None while it is not."""
        t = self.telemetry
        sources = t.drafted_from  # (a server's steps name no source)
        guessed = DraftSource.MODEL in sources or t.reply.drafted > 0 and not sources
        return advice(t.speedup(), t.speculation is not None and t.speculation.active, t.reply.acceptance_rate,
                      self.profile, self.facts.model_bytes if self.facts else {}, guessed)

    def switch_failed(self) -> None:
        """A switch failed (its line is on screen). With nothing open now, nothing of the old backend stays shown."""
        if self.backend is None:
            self.telemetry.speculation, self.telemetry.reference, self.telemetry.unmeasured = None, None, ""

    def refresh_facts(self) -> None:
        """*Engine thread.* Read the backend's facts again (after a reply: a server may have restarted)."""
        if self.backend is not None:
            self.facts = BackendFacts.of(self.backend)

    @property
    def method(self) -> str:
        if self.facts is not None:
            return self.facts.method
        return self.profile.method if self.profile is not None else DASH

    def close(self) -> None:
        """*Engine thread.* Free the models, stop a managed server (the backend stays readable, closed)."""
        if self.backend is not None and not self.closed:
            self.backend.close()
        self.closed = True

    # -- an exchange -------------------------------------------------------------------------------------------------

    def why_not_send(self) -> str | None:
        return None if self.backend is not None else "no model is loaded — pick a profile (F2, /profile NAME)"

    def begin(self, text: str) -> Exchange:
        """The user's message (with the files it names as ``@path`` in it) and its empty reply join the chat; the
        exchange to run on the engine thread. A file that cannot be attached is refused before anything changes."""
        self._sendable()
        return self._ask(expand(text, Path.cwd()), text, None)

    def regenerate(self) -> Exchange:
        """The last question again; the reply it had is kept as a branch ("‹ 1/2 ›")."""
        exchange = self.session.last_exchange()
        if exchange is None:
            raise Refused("nothing to answer again yet — ask something first")
        self._sendable()  # before anything changes
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
        self._sendable()
        expanded = expand(text, Path.cwd())
        before = self.session.branch(index)
        return self._ask(expanded, text, before)

    def _sendable(self) -> None:
        if self.backend is None:
            raise Refused(self.why_not_send() or "")

    def _ask(self, text: str, typed: str, before: int | None) -> Exchange:
        index = len(self.session.turns)
        text = self.session.add_user(text).text
        self._began = Began(index, typed, before)
        return self._exchange(index, text)

    def _exchange(self, upto: int, text: str) -> Exchange:
        """The exchange for ``text`` after the first ``upto`` turns, its empty reply added to the chat."""
        backend, session = self.backend, self.session
        self.catch_up()
        history = session.engine_messages(backend.target_id, upto=upto)
        record = session.add_reply(backend.target_id)
        record.conditions = conditions_of(backend.config, session.system_prompt)
        record.profile = self.profile.name if self.profile is not None else ""
        self.cancel = threading.Event()
        return Exchange(backend, history, text, self.max_tokens, self.cancel, ChatKey(session.id, session.private))

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

    def show_alternative(self, index: int, step: int) -> tuple[int, int]:
        """The previous (-1) or next (1) alternative at turn ``index``; returns which is shown now, of how many."""
        where = self.session.alternatives(index)
        if where is None:
            raise Refused("this message has no other version — edit it, or regenerate its reply, to make one")
        shown, count = where
        wanted = shown - 1 + step
        if not 0 <= wanted < count:
            raise Refused(f"this is version {shown} of {count}: there is none {'before' if step < 0 else 'after'} it")
        return self.show_version(index, wanted)

    def show_version(self, index: int, version: int) -> tuple[int, int]:
        """Version ``version`` (from 0) of the message at turn ``index`` (a search found it there)."""
        where = self.session.alternatives(index)
        if where is None or not 0 <= version < where[1]:
            raise Refused(f"message {index + 1} has no version {version + 1}")
        self.session.show_alternative(index, version)
        return version + 1, where[1]

    def show_hit(self, index: int, version: int | None, words: str) -> int:
        """A search hit at turn ``index`` (in version ``version`` of it, None: the one shown) on screen: that version,
        then the versions inside it that hold ``words``; returns the turn that holds them (``index`` if none does)."""
        if version is not None:
            self.show_version(index, version)
        found = self.session.reveal(index, words)
        return index if found is None else found

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
        """Events the engine thread produced, into the telemetry and the reply's record (saved as it changes)."""
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
        """The last reply against the same prompt without speculation (``run`` it on the engine thread)."""
        if self.backend is None:
            raise Refused(self.why_not_send() or "")
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
        """The front end is closing: a reply in progress stops at its next step (a prefill, mid-batch)."""
        record = self.session.last_reply
        self._quit_record = record if record is not None and record.streaming else None
        self.cancel.set()

    def interrupt(self, late_events: list[Event]) -> None:
        """The front end is closing, after the engine thread finished what it was doing: the events it produced
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
