"""What the chat store holds, row by row: a message (with its tokens, coloured segments, ghosts, telemetry and
trace), a version of a chat's tail not shown, a chat as the chats table lists it — and a message's JSON columns
written and read back, a damaged one read as missing (the message then shows as plain text)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from .records import Segment
from .trace import packed, unpacked


@dataclass
class StoredMessage:
    role: str
    content: str
    tokens: list[int] | None = None
    segments: list[Segment] | None = None
    ghosts: list[tuple[int, str]] = field(default_factory=list)
    finish_reason: str | None = None
    telemetry: dict | None = None
    target_id: str | None = None
    trace: list[str] = field(default_factory=list)  # a reply's events, as JSON lines (chats/trace.py)


@dataclass(frozen=True)
class BranchRow:
    """A version of a chat's tail not shown (chats/branches.py), as stored."""

    position: int  # where it leaves the chat shown
    ordinal: int  # its place among the versions there
    tail: bytes  # its messages and the branches inside them, compressed JSON
    text: str = ""  # the text of every message in it, for search (not read back)


@dataclass
class ChatRow:
    """A chat as the chats table lists it (its messages are read apart)."""

    id: int
    title: str
    profile: str
    system_prompt: str | None
    created: float
    updated: float
    private: bool = False  # never drafted from in another chat (``chats.recall``)


def columns_of(m: StoredMessage) -> tuple[object, ...]:
    """The message as its columns: role, content, tokens, segments, ghosts, finish_reason, telemetry, target_id,
    trace."""
    return (m.role, m.content, _json(m.tokens), _json(m.segments), _json(m.ghosts or None), m.finish_reason,
            _json(m.telemetry), m.target_id, packed(m.trace) if m.trace else None)


def message_of(row: tuple) -> StoredMessage:
    """A message from its columns (as ``columns_of`` writes them), whatever of them is damaged."""
    role, content, tokens, segments, ghosts, finish_reason, telemetry, target_id, trace = row
    segments = _load(segments, _SEGMENTS)
    ghosts = _load(ghosts, _GHOSTS)
    return StoredMessage(role, content, _load(tokens, _TOKENS), [tuple(s) for s in segments] if segments else None,
                         [tuple(g) for g in ghosts] if ghosts else [], finish_reason, _load(telemetry, _TELEMETRY),
                         target_id, _trace(trace))


def _trace(blob: object) -> list[str]:
    """A stored trace; a damaged one is none (the reply still shows, it cannot be inspected or replayed)."""
    if not isinstance(blob, bytes):
        return []
    try:
        return unpacked(blob)
    except ValueError:
        return []


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value)


def _load(text: str | None, shape: Callable[[object], bool]):
    """A JSON column's value, or None when it is missing or damaged (then the message shows as plain text)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if shape(value) else None


def _pairs_of(first: type, second: type) -> Callable[[object], bool]:
    return lambda value: isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], first) and isinstance(v[1], second) for v in value)


def _TOKENS(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _TELEMETRY(value: object) -> bool:
    return isinstance(value, dict)


_SEGMENTS, _GHOSTS = _pairs_of(str, str), _pairs_of(int, str)
