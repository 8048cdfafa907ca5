"""Opening the chat database when the app starts: at once, or — while another process holds its write lock — on a
thread of its own, the chat going on in memory meanwhile and saved once it opens; then the last chat reopened."""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.app import App

from ..chats.controller import ChatController
from ..chats.replies import Replies
from ..chats.store import Store, StoreError
from ..chats.store_opening import open_store
from .settings import Settings

STORE_FIRST_WAIT_S = 0.3  # how long the UI thread waits for another process's write lock before waiting elsewhere


class ChatDatabase:
    def __init__(self, app: App, settings: Settings, controller: ChatController, replies: Replies,
                 chat_opened: Callable[[], None]) -> None:
        """``chat_opened``: told when the last chat was reopened, to draw it."""
        self.app, self.settings, self.controller, self.replies = app, settings, controller, replies
        self.chat_opened = chat_opened

    def open(self) -> None:
        """The session's store (None for now while another process holds its lock)."""
        self.controller.session.store = self._open_now()

    def _open_now(self) -> Store | None:
        """The chat database; while another process holds its write lock, None for now: it opens on a thread of its
        own (``_opened``)."""
        if self.settings.db_path is None:
            return None
        try:
            store, problem = open_store(self.settings.db_path, _wait_elsewhere, first_wait=STORE_FIRST_WAIT_S)
        except _WaitElsewhere as busy:
            self.app.notify(f"{busy} — the chat is saved once it is done", timeout=20)
            threading.Thread(target=self._wait, name="chat database", daemon=True).start()
            return None
        if problem:
            self.app.notify(problem, severity="error", timeout=20)
        return store

    def _wait(self) -> None:
        store, problem = open_store(self.settings.db_path)
        self.app.call_from_thread(self._opened, store, problem)

    def _opened(self, store: Store | None, problem: str | None) -> None:
        """The database another process held opened: what was said meanwhile is saved, the last chat reopened if
        nothing was, and the stored chats drafted from."""
        session = self.controller.session
        session.store = store
        if problem:
            self.app.notify(problem, severity="error", timeout=20)
            return
        self.app.notify("the chat database is open — saving")
        if session.turns:
            session.save()
        else:
            self.resume()
        self.replies.submit(self.controller.switcher.store_opened)

    def resume(self) -> None:
        """The last chat reopened, when the settings say so."""
        store = self.controller.session.store
        if not self.settings.resume or store is None:
            return
        try:
            chats = store.conversations()
            if chats:
                self.controller.open_chat(chats[0].id)
                self.chat_opened()
        except StoreError as exc:  # the last chat cannot be read: start a new one, say why
            self.app.notify(str(exc), severity="error", timeout=20)


class _WaitElsewhere(Exception):
    """Opening the database waits for another process: not on the UI thread."""


def _wait_elsewhere(line: str) -> None:
    raise _WaitElsewhere(line)
