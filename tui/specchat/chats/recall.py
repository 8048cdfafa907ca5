"""The stored replies the "suffix" method drafts from (``engine.drafters.stored_chats``), read from the chats database.

Read on the stored chats index's own thread, through a read-only connection of its own (WAL lets it read while the app
writes), oldest first: the index keeps the most recent when it is full. Each assistant reply is paired with the user
message it answered; a reply still streaming (no finish reason) or empty, and every reply of a private chat
(``specchat chats private ID``), are left out.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.drafters.stored_chats import StoredReply
from .store import StoreError
from .store_opening import open_waiting

if TYPE_CHECKING:
    from ..backends import Backend

_REPLIES = """
    SELECT a.conversation_id, a.id, u.content, a.content, a.tokens, a.target_id
    FROM messages AS a JOIN messages AS u
      ON u.conversation_id = a.conversation_id AND u.position = a.position - 1 AND u.role = 'user'
    JOIN conversations AS c ON c.id = a.conversation_id
    WHERE a.role = 'assistant' AND a.finish_reason IS NOT NULL AND a.content != '' AND c.private = 0
    ORDER BY a.created, a.id
"""


def stored_replies(path: Path) -> Iterator[StoredReply]:
    """Every finished reply in the chats database at ``path`` with the question it answered, oldest first."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.text_factory = lambda data: data.decode("utf-8", "replace")
    try:
        for conversation_id, message_id, question, reply, tokens, target_id in db.execute(_REPLIES):
            yield StoredReply((conversation_id, message_id), question, reply, _tokens(tokens), target_id)
    finally:
        db.close()


def _tokens(text: str | None) -> tuple[int, ...] | None:
    try:
        tokens = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None  # a damaged column: the reply's text is tokenized instead
    return tuple(tokens) if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens) else None


def learn_stored_chats(backend: Backend, db: Path, on_wait: Callable[[str], None] = lambda _line: None) -> str:
    """The chats stored at ``db``, read as the app reads them, given to ``backend`` for a method that drafts from them
    ("suffix"), waiting until they are indexed: a script's reply is its one reply (``ask``), and a benchmark's are
    measured (``bench --stored-chats``) — about a second for a few hundred chats, 12 s for ten thousand messages once their
    tokens are cached (benchmarks/history_index.py). Returns why they are not drafted from, or "" when they are (or
    there are none)."""
    if not db.is_file():
        return ""
    try:
        open_waiting(db, on_wait).close()  # an older schema is migrated first, as the app would
    except (StoreError, sqlite3.DatabaseError) as exc:
        return f"earlier chats are not drafted from: {exc}"
    backend.learn_stored_chats(partial(stored_replies, db), wait=True)
    return ""
