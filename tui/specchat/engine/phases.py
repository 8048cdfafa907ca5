"""What a load is doing, said while it does it: loading a model, deriving the demo draft, timing verify batches,
measuring plain decoding, indexing the stored chats. A busy start spends a minute in these (issue #47), and a status
that names only the first of them reads as a hang. Said on the thread doing the work, to whoever listens (``told``);
the engine names its phases and knows nothing of screens."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_listeners: list[Callable[[str], None]] = []
_lock = threading.Lock()


@contextmanager
def told(say: Callable[[str], None]) -> Iterator[None]:
    """``say`` hears each phase begun meanwhile, one line each (a long one again with its progress)."""
    with _lock:
        _listeners.append(say)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(say)


def announce(line: str) -> None:
    with _lock:
        listeners = list(_listeners)
    for say in listeners:
        say(line)
