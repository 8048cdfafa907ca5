"""Ctrl+C while a reply (or an A/B run) streams in the REPL: the first stops it, the second quits."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


class Interrupts:
    """While a reply streams: the first Ctrl+C stops it (kept, cancelled), the second — or the terminal closing —
    quits the REPL with the partial reply saved as interrupted."""

    def __init__(self, cancel: threading.Event, quit_now: Callable[[], None]) -> None:
        self.cancel, self.quit_now = cancel, quit_now

    def __enter__(self) -> Interrupts:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if signum != signal.SIGINT or self.cancel.is_set():
            self.quit_now()
        self.cancel.set()
