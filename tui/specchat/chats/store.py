"""Conversations in SQLite, with each reply's token provenance, so an old reply re-renders coloured.

The schema is versioned with ``PRAGMA user_version`` and migrated forward on open. The database runs in WAL mode with
a busy timeout, so a second specchat on the same file waits instead of failing. Every write is one transaction; a
reply is rewritten as it streams (see ``session``), so killing the app loses at most the last second of it. The
folder and the files are readable by their owner only, like a shell's history.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ..engine.conversation import Forgotten
from ..errors import SpecchatError
from .migrations import COLUMNS, MIGRATIONS, SCHEMA_VERSION
from .search import Hit, fts_query, indexed_text
from .store_rows import BranchRow, ChatRow, StoredMessage, columns_of, message_of

BUSY_TIMEOUT_S = 5.0
DIR_MODE, FILE_MODE = 0o700, 0o600
T = TypeVar("T")


class StoreError(SpecchatError):
    """The chat database cannot be used; chatting continues in memory. ``reason``: what SQLite or the system said."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class StoreBusy(StoreError):
    """Another process holds the database's write lock (another specchat saving, a sqlite3 shell in a transaction):
    nothing is wrong with the file, and opening it waits (``store_opening.open_store``)."""


def _busy(exc: BaseException) -> bool:
    """Whether SQLite failed only because another connection holds a lock (SQLITE_BUSY, SQLITE_LOCKED and their
    extended codes): something to wait for, never damage."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def private(path: Path, mode: int) -> None:
    """Make ``path`` readable by its owner only (a shared machine's other users must not read someone's chats)."""
    try:
        if path.exists() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:
        pass  # not ours to change (e.g. a read-only mount): the open that follows says what is wrong, if anything


def _one_line_errors(method: Callable[..., T]) -> Callable[..., T]:
    """A query that fails (a damaged page met late, a full disk, a lock held too long) raises a StoreError naming the
    file, which every caller shows as one line, instead of sqlite3's own exception."""

    @functools.wraps(method)
    def wrapped(self: Store, *args, **kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreError(f"the chat database {self.path}: {exc}") from exc

    return wrapped


class DamagedDatabase(sqlite3.DatabaseError):
    """The file is not a SQLite database, or one whose pages are damaged."""


class Store:
    def __init__(self, path: Path, busy_timeout: float | None = None) -> None:
        """``busy_timeout``: how long opening waits for another process's write lock before ``StoreBusy`` (default,
        and for every later query, ``BUSY_TIMEOUT_S``)."""
        self.path = path
        # Told of each chat deleted or made private and each message deleted, here or by another process (``catch_up``):
        # what drafts from earlier chats forgets them (``ChatController``).
        self.forgetting: list[Callable[[Forgotten], None]] = []
        self._seen: tuple[int, set[int], set[int]] | None = None  # data_version, chat ids, private ones: ``catch_up``
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
            private(path.parent, DIR_MODE)
            old_umask = os.umask(0o077)  # the database and its WAL files are created for their owner only
            try:
                self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                          timeout=BUSY_TIMEOUT_S if busy_timeout is None else busy_timeout)
                # Text with bytes that are not UTF-8 (a damaged page) reads with U+FFFD in their place, not an exception.
                self.db.text_factory = lambda data: data.decode("utf-8", "replace")
                try:
                    self._prepare()
                except sqlite3.DatabaseError:
                    self.db.close()
                    raise
            finally:
                os.umask(old_umask)
            for suffix in ("", "-wal", "-shm"):
                private(Path(f"{path}{suffix}"), FILE_MODE)
        except DamagedDatabase:
            raise
        except sqlite3.Error as exc:
            if _busy(exc):
                raise StoreBusy(f"another specchat is writing to {path}") from None
            raise StoreError(
                f"cannot use the chat database {path} ({exc}) — chatting in memory, nothing is saved;"
                " move the file away or fix its permissions to save again", str(exc)
            ) from None
        except OSError as exc:
            raise StoreError(
                f"cannot use the chat database {path} ({exc}) — chatting in memory, nothing is saved;"
                " move the file away or fix its permissions to save again", str(exc)
            ) from None

    def _prepare(self) -> None:
        try:
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA journal_mode = WAL")
            # A damaged file opens and fails only on the page it damaged: check every page and index now, not
            # mid-chat (60 ms for 120 MB of chats on this 2-core machine).
            problems = [row[0] for row in self.db.execute("PRAGMA integrity_check").fetchall()]
        except UnicodeDecodeError as exc:  # sqlite3's message quotes a damaged schema's bytes
            raise DamagedDatabase(f"its schema is not text: {exc.reason}") from None
        except sqlite3.DatabaseError as exc:
            if not _busy(exc) and getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_CORRUPT,
                                                                              sqlite3.SQLITE_NOTADB):
                raise DamagedDatabase(str(exc)) from None
            raise
        if problems != ["ok"]:
            raise DamagedDatabase(problems[0])
        # In WAL mode NORMAL keeps the database intact through a crash of the app (only an OS crash or power loss can
        # drop the last commits), without an fsync on the UI thread at every save.
        self.db.execute("PRAGMA synchronous = NORMAL")
        self._migrate()
        self._check_columns()
        self._check_search_index()
        self.db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        self.catch_up()  # what is deleted or private now was never drafted from: only later changes are news

    def _check_columns(self) -> None:
        """Every column the store reads is there: damage in the schema's own text (a column's name) passes the
        integrity check, and would otherwise fail only at the first query, mid-chat."""
        for table, columns in COLUMNS.items():
            try:
                self.db.execute(f"SELECT {', '.join(columns)} FROM {table} LIMIT 0")
            except (sqlite3.OperationalError, UnicodeDecodeError) as exc:  # (the schema's text holds the damage)
                raise DamagedDatabase(f"its schema is damaged: {exc}") from None

    def _check_search_index(self) -> None:
        """The FTS5 indexes are whole: SQLite's integrity_check does not look inside them (before 3.44), and a damaged
        one would fail every later save."""
        for table in ("messages_fts", "branches_fts"):
            try:
                self.db.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                if _busy(exc):  # the check writes: another process's write lock is no damage
                    raise
                raise DamagedDatabase(f"its search index {table} is damaged: {exc}") from None

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"schema version {version} is newer than this specchat ({SCHEMA_VERSION})")
        for number in range(version, SCHEMA_VERSION):
            with self._transaction():
                MIGRATIONS[number](self.db)
                self.db.execute(f"PRAGMA user_version = {number + 1}")

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    # -- conversations ---------------------------------------------------------------------------------------------

    @_one_line_errors
    def create(self, title: str, profile: str, system_prompt: str | None, *, private: bool = False) -> int:
        now = time.time()
        with self._transaction():
            cursor = self.db.execute(
                "INSERT INTO conversations (title, profile, system_prompt, created, updated, private)"
                " VALUES (?, ?, ?, ?, ?, ?)", (title, profile, system_prompt, now, now, int(private)))
        return int(cursor.lastrowid)

    @_one_line_errors
    def conversations(self) -> list[ChatRow]:
        rows = self.db.execute(
            "SELECT id, title, profile, system_prompt, created, updated, private != 0 FROM conversations"
            " ORDER BY updated DESC, id DESC"
        ).fetchall()
        return [ChatRow(*row[:-1], bool(row[-1])) for row in rows]

    @_one_line_errors
    def message_counts(self) -> dict[int, int]:
        """Chat id → how many messages it shows."""
        return dict(self.db.execute("SELECT conversation_id, count(*) FROM messages GROUP BY conversation_id"))

    @_one_line_errors
    def get(self, conversation_id: int) -> ChatRow:
        row = self.db.execute(
            "SELECT id, title, profile, system_prompt, created, updated, private != 0 FROM conversations WHERE id = ?",
            (conversation_id,)).fetchone()
        if row is None:
            raise StoreError(f"conversation {conversation_id} does not exist")
        return ChatRow(*row[:-1], bool(row[-1]))

    @_one_line_errors
    def update(self, conversation_id: int, *, title: str, profile: str, system_prompt: str | None) -> None:
        with self._transaction():
            self.db.execute("UPDATE conversations SET title = ?, profile = ?, system_prompt = ?, updated = ? WHERE id = ?",
                            (title, profile, system_prompt, time.time(), conversation_id))

    @_one_line_errors
    def rename(self, conversation_id: int, title: str) -> None:
        with self._transaction():
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    @_one_line_errors
    def delete(self, conversation_id: int) -> None:
        with self._transaction():
            self._unindex("messages", "conversation_id = ?", (conversation_id,))
            self._unindex("branches", "conversation_id = ?", (conversation_id,))
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self._tell(Forgotten(conversation_id))

    @_one_line_errors
    def set_private(self, conversation_id: int, private: bool) -> None:
        """A private chat is not drafted from in other chats (``chats.recall``); one made private now is forgotten by
        what drafts from the stored chats at once."""
        self.get(conversation_id)  # one that does not exist is one line
        with self._transaction():
            self.db.execute("UPDATE conversations SET private = ? WHERE id = ?", (int(private), conversation_id))
        if private:
            self._tell(Forgotten(conversation_id))

    @_one_line_errors
    def private_chats(self) -> set[int]:
        return {row[0] for row in self.db.execute("SELECT id FROM conversations WHERE private != 0")}

    def _tell(self, what: Forgotten) -> None:
        for forget in self.forgetting:
            forget(what)

    @_one_line_errors
    def catch_up(self) -> list[Forgotten]:
        """What another process changed since the last call (SQLite's ``data_version`` moves with its commits): the
        chats it deleted or made private, told to ``forgetting`` as this process's own changes are, and returned.
        The first call only takes note (what was already deleted or private at open is not drafted from anyway)."""
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if self._seen is not None and self._seen[0] == version:
            return []
        rows = self.db.execute("SELECT id, private != 0 FROM conversations").fetchall()
        chats, private = {chat for chat, _ in rows}, {chat for chat, hidden in rows if hidden}
        forgotten = []
        if self._seen is not None:
            _, seen_chats, seen_private = self._seen
            forgotten = [Forgotten(chat) for chat in sorted((seen_chats - chats) | (private - seen_private))]
        self._seen = (version, chats, private)
        for what in forgotten:
            self._tell(what)
        return forgotten

    def _unindex(self, table: str, where: str, args: tuple) -> None:
        """Take ``table``'s rows that match ``where`` out of its search index (``{table}_fts``, keyed by their ids),
        before they go: FTS5 rows are not deleted with the rows they index."""
        self.db.execute(f"DELETE FROM {table}_fts WHERE rowid IN (SELECT id FROM {table} WHERE {where})", args)

    # -- messages ----------------------------------------------------------------------------------------------------

    @_one_line_errors
    def replace_tail(self, conversation_id: int, start: int, messages: Sequence[StoredMessage],
                     branches: Sequence[BranchRow] | None = None, *, deleting: bool = False) -> None:
        """Make the messages from position ``start`` on exactly ``messages`` (and, when given, the chat's branches
        exactly ``branches``), in one transaction. ``deleting``: the user deleted messages there — those rewritten
        are told to ``forgetting`` as deleted (a reply rewritten as it streams, or kept as a version, is not).

        Writing a chat this way is idempotent: a write that failed (a full disk, a locked file) is simply repeated,
        with whatever changed since, once the database accepts writes again.
        """
        now = time.time()
        with self._transaction():
            gone = frozenset(row[0] for row in self.db.execute(
                "SELECT id FROM messages WHERE conversation_id = ? AND position >= ?", (conversation_id, start)))
            self._unindex("messages", "conversation_id = ? AND position >= ?", (conversation_id, start))
            self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conversation_id, start))
            for i, m in enumerate(messages):
                cursor = self.db.execute(
                    "INSERT INTO messages (conversation_id, position, role, content, tokens, segments, ghosts,"
                    " finish_reason, telemetry, target_id, trace, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, start + i, *columns_of(m), now))
                self.db.execute("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)",
                                (cursor.lastrowid, indexed_text(m.content)))
            if branches is not None:
                self._unindex("branches", "conversation_id = ?", (conversation_id,))
                self.db.execute("DELETE FROM branches WHERE conversation_id = ?", (conversation_id,))
                for row in branches:
                    cursor = self.db.execute("INSERT INTO branches (conversation_id, position, ordinal, tail) VALUES"
                                             " (?, ?, ?, ?)", (conversation_id, row.position, row.ordinal, row.tail))
                    self.db.execute("INSERT INTO branches_fts (rowid, text, original) VALUES (?, ?, ?)",
                                    (cursor.lastrowid, indexed_text(row.text), row.text))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        if deleting and gone:
            self._tell(Forgotten(conversation_id, gone))

    @_one_line_errors
    def branches(self, conversation_id: int) -> list[BranchRow]:
        """The chat's branches not shown, as ``replace_tail`` wrote them."""
        return [BranchRow(position, ordinal, bytes(tail)) for position, ordinal, tail in self.db.execute(
            "SELECT position, ordinal, tail FROM branches WHERE conversation_id = ? ORDER BY position, ordinal",
            (conversation_id,))]

    @_one_line_errors
    def search(self, words: str, limit: int = 100) -> list[Hit]:
        """Messages of every chat holding all of ``words`` (chats/search.py), the most recently used chats first; a
        chat's messages shown before the versions it keeps unshown."""
        query = fts_query(words)
        if query is None:
            return []
        rows = self.db.execute(
            "SELECT * FROM (SELECT m.conversation_id, c.title, m.position, m.role, m.content, NULL AS ordinal,"
            " c.updated AS updated FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
            " JOIN conversations c ON c.id = m.conversation_id WHERE messages_fts MATCH ?1"
            " UNION ALL SELECT b.conversation_id, c.title, b.position, 'version', branches_fts.original, b.ordinal,"
            " c.updated FROM branches_fts JOIN branches b ON b.id = branches_fts.rowid"
            " JOIN conversations c ON c.id = b.conversation_id WHERE branches_fts MATCH ?1)"
            " ORDER BY updated DESC, conversation_id DESC, ordinal IS NOT NULL, position, ordinal LIMIT ?2",
            (query, limit))
        return [Hit(chat, title, position, role, content, ordinal) for chat, title, position, role, content, ordinal, _
                in rows]


    @_one_line_errors
    def append(self, conversation_id: int, message: StoredMessage) -> None:
        (position,) = self.db.execute(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        self.replace_tail(conversation_id, position, [message])

    @_one_line_errors
    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self.db.execute(
            "SELECT role, content, tokens, segments, ghosts, finish_reason, telemetry, target_id, trace FROM messages"
            " WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        ).fetchall()
        return [message_of(row) for row in rows]


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error, on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error:
                self._rollback()  # a COMMIT that failed (a full disk) leaves the transaction open otherwise
                raise
        self._rollback()

    def _rollback(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # nothing left to roll back
