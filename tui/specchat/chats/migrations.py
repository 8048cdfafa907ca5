"""The chats database's schema: one migration per version (``PRAGMA user_version``), and the columns each table must
have once migrated (``store`` checks them on open)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from .search import TOKENIZER, indexed_text


def _v1(db: sqlite3.Connection) -> None:
    # One statement at a time: executescript() would commit the migration's transaction half-way.
    for statement in filter(str.strip, """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            profile TEXT NOT NULL,
            system_prompt TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            tokens TEXT,          -- JSON list of token ids (assistant replies)
            segments TEXT,        -- JSON list of [text, kind], one per emitted token
            ghosts TEXT,          -- JSON list of [segment index, rejected draft text]
            finish_reason TEXT,   -- NULL while the reply streams (or if the app died meanwhile)
            telemetry TEXT,       -- JSON summary of the reply
            created REAL NOT NULL,
            UNIQUE (conversation_id, position)
        );
        CREATE INDEX messages_by_conversation ON messages(conversation_id, position);
        """.split(";")):
        db.execute(statement)


def _v2(db: sqlite3.Connection) -> None:
    # Which model generated a reply's token ids: they are fed back only to that model (v1 went by profile name).
    db.execute("ALTER TABLE messages ADD COLUMN target_id TEXT")


def _v3(db: sqlite3.Connection) -> None:
    # Every event of a reply (chats/trace.py, compressed): what the token inspector and the replay read.
    db.execute("ALTER TABLE messages ADD COLUMN trace BLOB")


def _v4(db: sqlite3.Connection) -> None:
    # Search (chats/search.py): every message's text in an FTS5 index whose rowid is the message's id, written by
    # ``replace_tail`` in the transaction that writes the message (an index over older chats is built here).
    db.execute(f"CREATE VIRTUAL TABLE messages_fts USING fts5(text, tokenize='{TOKENIZER}')")
    db.executemany("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)",
                   [(row_id, indexed_text(content)) for row_id, content in db.execute("SELECT id, content FROM messages")])
    # Branches (chats/branches.py): the answers and edits not shown, each the tail of the chat from the position where
    # it differs from the one shown, with the branches inside it (JSON, compressed); their text is searched too.
    db.execute(f"CREATE VIRTUAL TABLE branches_fts USING fts5(text, original UNINDEXED, tokenize='{TOKENIZER}')")
    db.execute("""CREATE TABLE branches (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,  -- where the branch leaves the chat shown
            ordinal INTEGER NOT NULL,   -- its place among the alternatives there (the one shown has the one left out)
            tail BLOB NOT NULL,
            UNIQUE (conversation_id, position, ordinal)
        )""")


def _v5(db: sqlite3.Connection) -> None:
    # A private chat is never drafted from in another chat (the "suffix" method: chats/recall.py).
    db.execute("ALTER TABLE conversations ADD COLUMN private INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5]
COLUMNS = {"conversations": ("id", "title", "profile", "system_prompt", "created", "updated", "private"),
           "messages": ("id", "conversation_id", "position", "role", "content", "tokens", "segments", "ghosts",
                        "finish_reason", "telemetry", "target_id", "trace", "created"),
           "messages_fts": ("rowid", "text"),
           "branches": ("id", "conversation_id", "position", "ordinal", "tail"),
           "branches_fts": ("rowid", "text", "original")}
SCHEMA_VERSION = len(MIGRATIONS)
