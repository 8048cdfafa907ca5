"""Opening the chat store as a user's machine has it: another specchat holding the write lock (waited for, said
once), a damaged file (set aside for recovery, never written to, a new one started), or one that cannot be used (the
chat runs in memory, one line says why)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import one_line
from .store import DamagedDatabase, Store, StoreBusy, StoreError


def open_store(path: Path, on_wait: Callable[[str], None] = lambda _line: None,
               first_wait: float | None = None) -> tuple[Store | None, str | None]:
    """The chat store at ``path`` and, when something was wrong, the one line to tell the user.

    While another process holds the write lock (another specchat saving) opening waits, and ``on_wait`` is told so
    once, in one line. A damaged file is never written to nor deleted: it is renamed aside (its WAL files with it)
    for recovery and a new database is started in its place. A file that cannot be used for another reason
    (permissions, a newer specchat's schema) is left as it is and the chat runs in memory.
    """
    try:
        return open_waiting(path, on_wait, first_wait), None
    except StoreError as exc:
        return None, str(exc)
    except DamagedDatabase as exc:
        damage, aside = str(exc), _set_aside(path)
    try:
        store = Store(path)
    except (StoreError, DamagedDatabase) as again:
        return None, f"{one_line(again)} (the damaged database was kept as {aside})"
    return store, (f"the chat database {path} is damaged ({damage}) — it was kept as {aside} (`sqlite3 {aside} .recover`"
                   " may save its chats) and a new, empty one was started")


def open_waiting(path: Path, on_wait: Callable[[str], None], first_wait: float | None = None) -> Store:
    """``Store(path)``, waiting while another process holds the write lock: ``first_wait`` seconds (default
    ``BUSY_TIMEOUT_S``), then as long as it takes, ``on_wait`` told so once (it may raise to stop waiting here)."""
    wait, told = first_wait, False
    while True:
        try:
            return Store(path, wait)
        except StoreBusy as exc:
            if not told:
                on_wait(f"{exc} — waiting")
                told = True
            wait = None


def _set_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while any(Path(f"{aside}{suffix}").exists() for suffix in ("", "-wal", "-shm")):
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("-wal", "-shm", ""):  # the WAL may hold the newest commits: it goes with the file
        if Path(f"{path}{suffix}").exists():
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside
