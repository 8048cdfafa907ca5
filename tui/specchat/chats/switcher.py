"""What runs — the backend, the profile it was opened for and the toggles on top of it — and every switch of it: a
profile, another draft, speculation off or on, the draft cap, the profile before. The chat flow's other owner beside
``ChatController`` (the chat and its replies), which reads what runs from here.

Methods marked *worker thread* call into the backend: a front end runs them on its one worker thread
(``replies.Replies``); the others make a choice, or show a switch's result, on the front end's own thread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..backends import Backend, switch_backend
from ..engine.conversation import Forgotten
from ..engine.drafters.stored_chats import StoredChats
from ..engine.events import SpeculationState
from ..engine.reference import PlainReference
from ..errors import Refused, SwitchFailed
from ..figures import DASH
from ..profiles import Profile, load_profile
from ..telemetry.live import LiveTelemetry
from .choice import Choice, one_step
from .recall import stored_replies
from .session import ChatSession

# What a profile switch did that leaves the target as it was (its plain reference still holds).
SAME_TARGET = ("parameters", "draft reloaded", "server restarted")
# What a switch's action means for the user: what was loaded again, and what was kept.
RELOADS = {"parameters": "nothing reloaded, the target's cache kept",
           "server restarted": "the server restarted (its cache starts empty)"}


@dataclass(frozen=True)
class BackendFacts:
    """What the front ends show about the backend, read on the worker thread whenever it changes."""

    where: str
    pid: int | None
    method: str
    speculation: SpeculationState
    draft_length: int  # in use
    adaptive: bool  # the draft length is "auto"'s latest choice
    notes: tuple[str, ...]
    rejected_tails: bool
    model_bytes: dict[str, int]
    sampled: bool  # the profile samples (a temperature above 0): a reference taken from its replies is sampled too
    cpu_only: str  # GPU layers asked for that a CPU-only build runs on the CPU (``Backend.cpu_only``), "" otherwise

    @staticmethod
    def of(backend: Backend) -> BackendFacts:
        spec = backend.config.spec  # "auto" is specchat's own loop: a llama-server drafts a fixed length
        adaptive = spec.adaptive and spec.method != "none" and backend.config.backend_kind.runs_engine
        return BackendFacts(backend.where, backend.pid, spec.method, backend.speculation_state(), backend.draft_length,
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


class Switcher:
    """What runs, and every switch of it (one at a time, each keeping what it can)."""

    def __init__(self, session: ChatSession, telemetry: LiveTelemetry) -> None:
        self.session, self.telemetry = session, telemetry
        self.backend: Backend | None = None
        self.profile: Profile | None = None
        self.facts: BackendFacts | None = None
        self.choice: Choice | None = None  # what runs now: a profile and the toggles on top of it
        self.previous: Choice | None = None  # the profile before the last switch to another (previous_profile)
        self.closed = False
        self._shown_notes: set[str] = set()

    def switch_profile(self, name: str, draft: Path | None = None) -> Switched:
        """*Worker thread.* Load a profile (optionally with another draft model); see ``switch``."""
        return self.switch(Choice(name, draft))

    def switch(self, choice: Choice) -> Switched:
        """*Worker thread.* Run ``choice`` with the least reload: parameters, a draft, the target, a server restart,
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
        """What a backend drafts from besides the chat, where its method does (read off the worker thread); None
        until the session has its store (a front end may give it after making the controller)."""
        store = self.session.store
        if store is None:
            return None
        if self._forget not in store.forgetting:
            store.forgetting.append(self._forget)
        return partial(stored_replies, store.path)

    def store_opened(self) -> None:
        """*Worker thread.* The session's store opened late (another process held it): the backend drafts from the
        stored chats too, where its method does."""
        stored = self._stored_chats()
        if self.backend is not None and stored is not None:
            self.backend.learn_stored_chats(stored)

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
        self.telemetry.draft_length = switched.facts.draft_length
        self.telemetry.adaptive = switched.facts.adaptive
        self.telemetry.sampled = switched.facts.sampled
        fresh = [note for note in switched.facts.notes if note not in self._shown_notes]
        self._shown_notes.update(fresh)
        return fresh

    # -- quick toggles: each a new choice made from the one in use (UI thread; ``switch`` it on the worker thread) --

    def in_use(self) -> Choice:
        if self.choice is None or self.backend is None:
            raise Refused(self.why_not_send() or "")
        return self.choice

    def speculation_toggled(self) -> Choice:
        """Speculation off for the following messages (the same target decodes plainly, its cache kept), or on."""
        choice = self.in_use()
        if not self.backend.config.backend_kind.switches_speculation:
            raise Refused("speculation on a server specchat does not start cannot be switched off from here — start"
                          " it with [backend] kind = \"llama-server\", or pick a profile without speculation")
        if not choice.speculation_off and self.backend.config.spec.method == "none":
            raise Refused(f"profile {self.profile.name} does not speculate (method none) — pick one that does (F2)")
        return choice.toggled()

    def previous_profile(self) -> Choice:
        """The profile before the last switch to another one (as ``cd -``), with the toggles it had."""
        self.in_use()
        if self.previous is None:
            raise Refused("no earlier profile in this session yet — switch with F2 (or /profile NAME) first")
        return self.previous

    def draft_cap(self, step: int) -> Choice:
        """The draft cap one token longer (1) or shorter (-1) than the one set, from the next step (from "auto": the
        profiles' default fixed cap)."""
        cap = self.backend.config.spec.n_max
        if cap == "auto" and not self.backend.config.backend_kind.runs_engine:
            cap = self.backend.draft_length  # a server's "auto" is its own fixed default: a cap like any number
        return self.in_use().with_draft_cap(self.backend.config, one_step(cap, step))

    def draft_cap_set(self, n_max: int | str) -> Choice:
        """The draft cap set to ``n_max`` tokens, or back to "auto"."""
        wanted = self.in_use().with_draft_cap(self.backend.config, n_max)
        wanted.config(self.profile)  # an impossible length is refused here, in one line
        return wanted

    def switch_failed(self) -> None:
        """A switch failed (its line is on screen). With nothing open now, nothing of the old backend stays shown."""
        if self.backend is None:
            self.telemetry.speculation, self.telemetry.reference, self.telemetry.unmeasured = None, None, ""

    def refresh_facts(self) -> None:
        """*Worker thread.* Read the backend's facts again (after a reply: a server may have restarted)."""
        if self.backend is not None:
            self.facts = BackendFacts.of(self.backend)

    @property
    def method(self) -> str:
        if self.facts is not None:
            return self.facts.method
        return self.profile.method if self.profile is not None else DASH

    def close(self) -> None:
        """*Worker thread.* Free the models, stop a managed server (the backend stays readable, closed)."""
        if self.backend is not None and not self.closed:
            self.backend.close()
        self.closed = True

    def why_not_send(self) -> str | None:
        return None if self.backend is not None else "no model is loaded — pick a profile (F2, /profile NAME)"

    def sendable(self) -> None:
        """Refused, in one line, while no backend can answer."""
        if self.backend is None:
            raise Refused(self.why_not_send() or "")
