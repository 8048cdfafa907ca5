"""The chat a front end shows, owned in one place: its turns, saved to the store as they change.

Views draw from these records, the engine is restored from them and A/B compares with them; nothing is read back
from a widget or from the database. Saving is incremental and idempotent (``Store.replace_tail``): a streaming reply
is rewritten at most once a second, a write that fails (a full disk, a read-only folder) is repeated with the next
change, and the chat goes on in memory meanwhile.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from ..engine.conversation import Message
from ..errors import Refused
from ..text import valid_text
from .branches import Branches
from .records import INTERRUPTED, ReplyRecord, Turn, UserTurn
from .search import holds
from .store import Store, StoreError
from .store_rows import StoredMessage
from .trace import renamed, rows_of

SAVE_EVERY_S = 1.0  # a streaming reply is written at most this often: a crash loses at most this much of it
TITLE_CHARS = 48

Problem = Callable[[str, bool], None]  # (one line, whether it is an error) → shown to the user


class ChatSession:
    def __init__(self, store: Store | None, profile: str, system_prompt: str | None, on_problem: Problem) -> None:
        self.store, self.on_problem = store, on_problem
        self.id: int | None = None
        self.title = ""
        self.profile = profile
        self.system_prompt = system_prompt
        self.private = False  # never drafted from in another chat, and neither is a fork of it
        self.turns: list[Turn] = []
        self.branches = Branches(self.turns)  # the answers and edits kept but not shown
        self._saved = 0  # turns[:_saved] are stored as they are now
        self._meta_saved = True
        self._branches_saved = True
        self._last_save = 0.0
        self._failing = False
        self._deleted = False  # messages were deleted since the last save: the store tells what drafts to forget them

    # -- what the engine and the views read ----------------------------------------------------------------------

    def engine_messages(self, target_id: str, upto: int | None = None) -> list[Message]:
        return engine_messages(self.turns[:upto], self.system_prompt, target_id)

    @property
    def last_reply(self) -> ReplyRecord | None:
        return self.turns[-1] if self.turns and isinstance(self.turns[-1], ReplyRecord) else None

    def last_exchange(self) -> tuple[int, str] | None:
        """Where the last user message is, and its text."""
        for i in range(len(self.turns) - 1, -1, -1):
            turn = self.turns[i]
            if isinstance(turn, UserTurn):
                return i, turn.text
        return None

    # -- changes -------------------------------------------------------------------------------------------------

    def add_user(self, text: str) -> UserTurn:
        if not self.turns and not self.title:
            self.title = " ".join(text.split())[:TITLE_CHARS]
            self._meta_saved = False
        turn = UserTurn(valid_text(text))  # what the backend answers is this turn's text
        self.turns.append(turn)
        self.save()
        return turn

    def add_reply(self, target_id: str) -> ReplyRecord:
        record = ReplyRecord(target_id=target_id)
        self.turns.append(record)
        return record

    def changed(self, turn: Turn) -> None:
        """``turn`` changed in memory: it is written again with the next save, wherever it is in the chat."""
        index = next((i for i, t in enumerate(self.turns) if t is turn), None)
        if index is not None:
            self._saved = min(self._saved, index)

    def reply_changed(self, record: ReplyRecord) -> None:
        """A reply got new events: save it when it finished, or when the last save is a second old."""
        self.changed(record)
        if not record.streaming or time.monotonic() - self._last_save >= SAVE_EVERY_S:
            self.save()

    def alternatives(self, index: int) -> tuple[int, int] | None:
        """Which of the alternatives at turn ``index`` is shown (from 1) and how many there are; None: only one."""
        return self.branches.at(index)

    def branch(self, index: int) -> int | None:
        """Keep the chat from turn ``index`` on as a branch; what is added next is the alternative shown there.
        (Saved with that addition: nothing of it is lost meanwhile, the turns shown are still stored.) Returns the
        version that was shown, for ``delete_from``'s ``instead``; None when nothing followed to keep."""
        before = self.branches.branch(index)
        self._saved = min(self._saved, index)
        self._branches_saved = False
        return before

    def show_alternative(self, index: int, alternative: int) -> None:
        """Show alternative ``alternative`` (from 0) of the fork at turn ``index``."""
        self.branches.show(index, alternative)
        self._save_shown_from(index)

    def _save_shown_from(self, index: int) -> None:
        """Another version is shown from turn ``index`` on: that path and the versions kept are saved."""
        self._saved = min(self._saved, index)
        self._branches_saved = False
        self.save()

    def step_alternative(self, index: int, step: int) -> tuple[int, int]:
        """The previous (-1) or next (1) alternative at turn ``index``; returns which is shown now, of how many."""
        where = self.alternatives(index)
        if where is None:
            raise Refused("this message has no other version — edit it, or regenerate its reply, to make one")
        shown, count = where
        wanted = shown - 1 + step
        if not 0 <= wanted < count:
            raise Refused(f"this is version {shown} of {count}: there is none {'before' if step < 0 else 'after'} it")
        return self.show_version(index, wanted)

    def show_version(self, index: int, version: int) -> tuple[int, int]:
        """Version ``version`` (from 0) of the message at turn ``index`` (a search found it there)."""
        where = self.alternatives(index)
        if where is None or not 0 <= version < where[1]:
            raise Refused(f"message {index + 1} has no version {version + 1}")
        self.show_alternative(index, version)
        return version + 1, where[1]

    def show_hit(self, index: int, version: int | None, words: str) -> int:
        """A search hit at turn ``index`` (in version ``version`` of it, None: the one shown) on screen: that version,
        then the versions inside it that hold ``words``; returns the turn that holds them (``index`` if none does)."""
        if version is not None:
            self.show_version(index, version)
        found = self.reveal(index, words)
        return index if found is None else found

    def reveal(self, index: int, words: str) -> int | None:
        """Bring the turn at or after ``index`` that holds ``words`` on screen, showing the versions (nested ones too)
        it is in; returns its index, None when no turn holds them."""
        found, moved = self.branches.reveal(index, lambda text: holds(text, words))
        if moved:
            self._save_shown_from(index)
        return found

    def delete_from(self, index: int, instead: int | None = None) -> None:
        """Delete turn ``index`` and what follows; where the chat forks there, another alternative is shown (version
        ``instead`` of those left, by default the nearest)."""
        forked = self.alternatives(index) is not None or any(p > index for p in self.branches.forks)
        self.branches.delete_from(index, instead)
        self._saved = min(self._saved, index)
        self._branches_saved = self._branches_saved and not forked
        self._deleted = True
        self.save()

    def forget_if_empty(self) -> None:
        """A chat whose only exchange was refused before it began leaves no trace: neither the title its message gave
        (a pasted secret, say) nor an empty chat in the store."""
        if self.turns:
            return
        self.title, self._meta_saved = "", False
        if self.id is None or self.store is None:
            return
        try:
            self.store.delete(self.id)
        except (sqlite3.Error, StoreError, OSError) as exc:
            self.on_problem(f"cannot remove the empty chat from {self.store.path} ({exc}) — delete it from the chat"
                            " list (ctrl+l) later", True)
            return
        self.id = None

    def rename(self, title: str) -> None:
        self.title = " ".join(title.split())
        self._meta_saved = False
        self.save()

    def fork(self, index: int) -> None:
        """Continue in a new chat holding copies of turns 0 … ``index`` (this chat is saved and left as it is). A fork
        of a private chat is private: its copies are never drafted from in another chat either."""
        self.save()
        self._refuse_leaving_unsaved("fork")
        copies = [turn_of(_stored(t)) for t in self.turns[: index + 1]]
        self.id, self.title = None, f"{self.title} (fork)".strip()
        self._start(copies)
        self.save()  # created private when this chat is (``Store.create``)

    def interrupt(self) -> None:
        """The front end is closing while a reply streams: keep what arrived, marked as interrupted."""
        record = self.last_reply
        if record is not None and record.streaming:
            record.finish_reason = INTERRUPTED
            self.changed(record)
        self.save()

    def set_system_prompt(self, text: str | None) -> None:
        self.system_prompt = valid_text(text) if text is not None else None
        self._meta_saved = False
        self.save()

    def set_profile(self, profile: str) -> None:
        if profile != self.profile:
            self.profile = profile
            self._meta_saved = False

    def _refuse_leaving_unsaved(self, doing: str) -> None:
        """Refused while the store fails: what is not saved of this chat lives only here, and is not left behind."""
        if self._failing:
            raise Refused(f"{self.store.path} does not accept writes now — {doing} once saving works again (this"
                          " chat would be left unsaved)")

    def new(self, system_prompt: str | None) -> None:
        self.interrupt()
        self._refuse_leaving_unsaved("start a new chat")
        self.id, self.title, self.system_prompt, self.private = None, "", system_prompt, False
        self._start([])
        self._meta_saved = True

    def _start(self, turns: list[Turn]) -> None:
        """Show ``turns``, none of them saved yet, with no branches."""
        self.turns = turns
        self.branches = Branches(turns)
        self._saved, self._branches_saved = 0, True

    def open(self, conversation_id: int) -> None:
        """Load a stored chat (a reply stored while streaming is shown as interrupted)."""
        assert self.store is not None
        self.interrupt()  # saved first: the chat opened may be this one
        self._refuse_leaving_unsaved("open another chat")
        conversation = self.store.get(conversation_id)
        stored = self.store.messages(conversation_id)
        rows = self.store.branches(conversation_id)
        self.id, self.title, self.profile = conversation.id, conversation.title, conversation.profile
        self.private = conversation.private
        self.system_prompt = conversation.system_prompt
        self._start([turn_of(m) for m in stored])
        self.branches.load(rows, turn_of)
        self._saved, self._meta_saved = len(self.turns), True
        if self.branches.damaged:
            count = len(self.branches.damaged)
            self.on_problem(f"chat {conversation.id}: {count} version{'s' * (count != 1)} of its messages could not be"
                            " read (damaged) — kept in the database as they are; the chat shows without them", True)

    # -- saving ----------------------------------------------------------------------------------------------------

    def save(self) -> None:
        if self.store is None or (self.id is None and not self.turns):
            return
        self._last_save = time.monotonic()
        try:
            if self.id is None:
                self.id = self.store.create(self.title, self.profile, self.system_prompt, private=self.private)
                self._meta_saved = True
            elif not self._meta_saved:
                self.store.update(self.id, title=self.title, profile=self.profile, system_prompt=self.system_prompt)
                self._meta_saved = True
            start = self._saved
            self.store.replace_tail(self.id, start, [_stored(t) for t in self.turns[start:]],
                                    None if self._branches_saved else self.branches.rows(_stored),
                                    deleting=self._deleted)
            streaming = self.last_reply is not None and self.last_reply.streaming
            self._saved = len(self.turns) - streaming
            self._branches_saved = True
            self._deleted = False
        except (sqlite3.Error, StoreError, OSError) as exc:
            if not self._failing:
                self._failing = True
                self.on_problem(f"cannot save to {self.store.path} ({exc}) — the chat goes on in memory, and"
                                " saving resumes by itself once the database accepts writes", True)
            return
        if self._failing:
            self._failing = False
            self.on_problem(f"saving to {self.store.path} works again — nothing of this chat was lost", False)


def engine_messages(turns: list[Turn], system_prompt: str | None, target_id: str) -> list[Message]:
    """The conversation for the engine; generated token ids only for the model that generated them."""
    messages = [Message("system", system_prompt)] if system_prompt else []
    for turn in turns:
        if isinstance(turn, UserTurn):
            messages.append(Message(turn.role, turn.text))
        else:
            same_model = bool(turn.target_id) and turn.target_id == target_id and turn.tokens is not None
            messages.append(Message("assistant", turn.text, list(turn.tokens) if same_model else None,
                                    turn.finish_reason))
    return messages


def _stored(turn: Turn) -> StoredMessage:
    if isinstance(turn, UserTurn):
        return StoredMessage("user", turn.text)
    return StoredMessage("assistant", turn.text, None if turn.tokens is None else list(turn.tokens),
                         list(turn.segments), sorted(turn.ghosts.items()), turn.finish_reason, turn.stats,
                         turn.target_id or None, turn.trace_lines())


def turn_of(message: StoredMessage) -> Turn:
    if message.role != "assistant":
        return UserTurn(message.content, message.role)
    # An empty reply (the prefill chose the end, Esc during the prefill) has no segments, as it had live.
    segments = list(message.segments) if message.segments else [(message.content, "target")] if message.content else []
    tokens = message.tokens
    if tokens is not None and (len(tokens) != len(segments) or "".join(p for p, _ in segments) != message.content):
        tokens = None  # ids that do not match the text they came with are no ids of it: the text is tokenized again
    telemetry = message.telemetry or {}
    try:
        trace = rows_of(message.trace)
    except ValueError:
        trace = []  # the reply still shows; it cannot be inspected or replayed
    if not _traces(trace, segments):
        trace = []
    return ReplyRecord(
        segments=segments, tokens=None if tokens is None else list(tokens), ghosts=dict(message.ghosts),
        finish_reason=message.finish_reason or INTERRUPTED,
        stats=renamed(message.telemetry) if message.telemetry else message.telemetry, target_id=message.target_id or "",
        conditions=telemetry.get("conditions") if isinstance(telemetry.get("conditions"), dict) else None,
        profile=telemetry["profile"] if isinstance(telemetry.get("profile"), str) else "", trace=trace, trace_encoded=list(message.trace) if trace else [],
    )


def _traces(trace: list, segments: list) -> bool:
    """Whether a stored trace is the trace of these segments (a damaged or foreign one is no trace of them)."""
    shown = [row.get("text") for row in trace if row.get("type") == "token"]
    return shown == [text for text, _ in segments]
