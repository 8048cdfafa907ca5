"""Conversations in SQLite, with each reply's token provenance, so an old reply re-renders coloured.

The schema is versioned with ``PRAGMA user_version`` and migrated forward on open. Every write is one transaction,
and a reply is written once it is finished: killing the app loses at most the reply in progress.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from .errors import SpecchatError

Segment = tuple[str, str]  # (text, kind) where kind is a TokenKind value


def default_path() -> Path:
    return Path(platformdirs.user_data_dir("specchat")) / "chats.sqlite3"


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
            finish_reason TEXT,
            telemetry TEXT,       -- JSON summary of the reply
            created REAL NOT NULL,
            UNIQUE (conversation_id, position)
        );
        CREATE INDEX messages_by_conversation ON messages(conversation_id, position);
        """.split(";")):
        db.execute(statement)


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1]
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(SpecchatError):
    """The chat database cannot be used; chatting continues in memory."""


@dataclass
class StoredMessage:
    role: str
    content: str
    tokens: list[int] | None = None
    segments: list[Segment] | None = None
    ghosts: list[tuple[int, str]] = field(default_factory=list)
    finish_reason: str | None = None
    telemetry: dict | None = None


@dataclass
class Conversation:
    id: int
    title: str
    profile: str
    system_prompt: str | None
    created: float
    updated: float


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, isolation_level=None)
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA journal_mode = WAL")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"cannot use the chat database {path} ({exc}) — chatting in memory, nothing is saved;"
                " move the file away or fix its permissions to save again"
            ) from None

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"schema version {version} is newer than this specchat ({SCHEMA_VERSION})")
        for number in range(version, SCHEMA_VERSION):
            with self._transaction():
                MIGRATIONS[number](self.db)
                self.db.execute(f"PRAGMA user_version = {number + 1}")

    def _transaction(self) -> sqlite3.Connection:
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    # -- conversations ---------------------------------------------------------------------------------------------

    def create(self, title: str, profile: str, system_prompt: str | None) -> int:
        now = time.time()
        with self._transaction():
            cursor = self.db.execute(
                "INSERT INTO conversations (title, profile, system_prompt, created, updated) VALUES (?, ?, ?, ?, ?)",
                (title, profile, system_prompt, now, now),
            )
        return int(cursor.lastrowid)

    def conversations(self) -> list[Conversation]:
        rows = self.db.execute(
            "SELECT id, title, profile, system_prompt, created, updated FROM conversations ORDER BY updated DESC, id DESC"
        ).fetchall()
        return [Conversation(*row) for row in rows]

    def get(self, conversation_id: int) -> Conversation:
        row = self.db.execute(
            "SELECT id, title, profile, system_prompt, created, updated FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"conversation {conversation_id} does not exist")
        return Conversation(*row)

    def rename(self, conversation_id: int, title: str) -> None:
        with self._transaction():
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str | None) -> None:
        with self._transaction():
            self.db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages ----------------------------------------------------------------------------------------------------

    def append(self, conversation_id: int, message: StoredMessage) -> None:
        with self._transaction():
            (position,) = self.db.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            self.db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, tokens, segments, ghosts,"
                " finish_reason, telemetry, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id, position, message.role, message.content,
                    _json(message.tokens), _json(message.segments), _json(message.ghosts or None),
                    message.finish_reason, _json(message.telemetry), time.time(),
                ),
            )
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

    def truncate(self, conversation_id: int, keep: int) -> None:
        """Drop every message from position ``keep`` on (regenerating a reply replaces it)."""
        with self._transaction():
            self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conversation_id, keep))

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self.db.execute(
            "SELECT role, content, tokens, segments, ghosts, finish_reason, telemetry FROM messages"
            " WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        ).fetchall()
        return [
            StoredMessage(
                role, content, _load(tokens),
                [tuple(s) for s in _load(segments)] if segments else None,
                [tuple(g) for g in _load(ghosts)] if ghosts else [],
                finish_reason, _load(telemetry),
            )
            for role, content, tokens, segments, ghosts, finish_reason, telemetry in rows
        ]


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error, on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value)


def _load(text: str | None):
    return None if text is None else json.loads(text)
