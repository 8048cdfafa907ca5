"""One question on its way to a backend (``Exchange``), what it changed in the chat before the backend saw it
(``Began``), and how it failed (``Failure``): the pieces of the chat flow that cross to the worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..backends import Backend
from ..engine import ReplyStarted
from ..engine.conversation import UNSTORED, ChatKey, Message
from ..engine.events import Event
from ..errors import one_line
from .records import INSPECTOR_TOP


@dataclass(frozen=True)
class Began:
    """What an exchange changed in the chat before the backend saw it: undone when the backend refuses it."""

    position: int  # its turns start here
    typed: str | None  # the message as typed (before its files were attached); None for a regeneration
    shown_before: int | None  # the version shown at ``position`` before it branched there; None: it did not


@dataclass(frozen=True)
class Failure:
    error: str
    started: bool  # whether the backend had accepted the message (a ReplyStarted came)


class Exchange:
    """One question on its way to the backend. ``run`` it on the worker thread; every event goes to ``sink``."""

    def __init__(self, backend: Backend, earlier: list[Message], text: str, max_tokens: int, cancel: threading.Event,
                 chat: ChatKey = UNSTORED) -> None:
        self.backend, self.earlier, self.text, self.max_tokens, self.cancel = backend, earlier, text, max_tokens, cancel
        self.chat = chat  # the stored chat it is asked in, and whether that is private

    def run(self, sink: Callable[[Event], None]) -> Failure | None:
        started = False
        try:
            for event in self.backend.answer(self.earlier, self.text, max_tokens=self.max_tokens,
                                             should_stop=self.cancel.is_set, top=INSPECTOR_TOP, chat=self.chat):
                started = started or isinstance(event, ReplyStarted)
                sink(event)
        except Exception as exc:  # any failure, specchat's or not, is one line and the chat goes on
            return Failure(one_line(exc), started)
        return None
