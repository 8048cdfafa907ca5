"""The index over the user's stored chats, built on a thread of its own while no reply runs and no timing is taken.

The engine owns one ``StoredChatsIndexer`` for its whole life: it starts a build for each target (token ids are the
target's), pauses it while a reply decodes or a cost is measured, and stops it when the engine closes. What the index
drafts is ``drafters.stored_chats``'s; this module only says when it is built.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .. import paths
from .chat_template import ChatTemplate
from .drafters.stored_chats import StoredChatsDrafter, StoredChatsIndexBuilder, StoredChats
from .llama import Model
from .phases import announce

# The stored chats' index comes before the start's timings and the first reply (issue #47: a question asked the moment
# a start ended drafted from its own chat only): a timing waits this long for it — a few hundred stored replies index
# within it here, their tokens cached — and a reply this much more; beyond, the reply says so.
INDEX_BEFORE_TIMING_S = 1.0
INDEX_BEFORE_REPLY_S = 0.1
STILL_INDEXING = "the stored chats are still being indexed: this reply drafts from this chat only"


class StoredChatsIndexer:
    """When the index over the stored chats is built: for each target, between replies and timings."""

    def __init__(self, read: StoredChats | None) -> None:
        """``read``: the stored replies to draft from too (None: only the chat at hand)."""
        self._read = read
        self._builder: StoredChatsIndexBuilder | None = None
        self._idle = threading.Event()  # no reply running and nothing timed: the index builds only then
        self._idle.set()

    def start(self, drafter: StoredChatsDrafter, target: Model, template: ChatTemplate) -> None:
        """Build the index for ``target`` unless one is built or building (or nothing is read)."""
        if self._read is None or self._builder is not None:
            return
        cache = paths.cache_dir() / "history" / f"{target.identity}.npz"  # (the folder kept its name from before)
        self._builder = StoredChatsIndexBuilder(drafter, self._read, target.path, target.identity, template, cache,
                                                self._idle)

    def read_from(self, read: StoredChats) -> None:
        """Read the stored chats from ``read`` from now on; the next ``start`` builds anew."""
        self.stop()
        self._read = read

    def stop(self) -> None:
        """Stop a build under way; the next ``start`` builds anew (a new target: the old index held its token ids)."""
        if self._builder is not None:
            self._builder.stop()
        self._builder = None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the index is built; False if it is still building after ``timeout``."""
        return self._builder is None or self._builder.wait(timeout)

    def before_timing(self) -> None:
        """A timing pauses the index: it waits up to INDEX_BEFORE_TIMING_S for it first, saying so, so that the first
        reply drafts from the stored chats (under a second for some 800 stored messages here)."""
        if not self.wait(0):
            announce("indexing the stored chats (the first reply drafts from them)")
            self.wait(INDEX_BEFORE_TIMING_S)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """A reply decodes or a cost is timed: the build waits (it would slow them, and a measured cost with it)."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()
