"""Ctrl+C while a reply (or an A/B run) streams in the REPL: the first stops it, the second quits; while a load runs,
it is noted, not raised; and keys pressed meanwhile are not echoed into the reply."""

from __future__ import annotations

import signal
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prompt_toolkit.input import Input


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


@contextmanager
def unechoed(keyboard: Input | None) -> Iterator[None]:
    """While a reply streams, keys pressed are not echoed into it (``^C`` included); Ctrl+C still interrupts and
    what was typed waits for the next prompt."""
    try:
        fd = keyboard.fileno() if keyboard is not None else None
        saved = termios.tcgetattr(fd) if fd is not None else None
    except (termios.error, OSError, NotImplementedError):
        saved = None  # not a terminal (a pipe)
    if saved is None:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class Patience:
    """While the REPL waits on the worker thread for something that cannot stop half-way (a load): Ctrl+C is noted,
    not raised — raised, it would end the REPL with the worker thread still working."""

    def __enter__(self) -> Patience:
        self.interrupted = False
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, _signum: int, _frame: object) -> None:
        self.interrupted = True
