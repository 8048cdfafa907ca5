"""A reply's events as JSON objects: what ``specchat ask --json`` prints, what the store keeps with each reply, and
what ``specchat replay`` and the app's replay read back — one encoding, so a replayed reply and the live one compare
line by line.

A row is an event's ``type`` (``TYPES``: ``started``, ``context_trimmed``, ``speculation``, ``token``, ``rejected``,
``step``, ``threads`` and ``summary``, the reply's telemetry) and the event's own fields, nested records flattened into
it (a reply's speculation state, a token's judgement, a summary's counters). A token's ``top`` is the target's best
candidates at its position as ``[text, probability]`` pairs, most likely first (``top_ids`` their ids), when the reply
kept them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from ..engine.events import (
    Candidate,
    ContextTrimmed,
    DraftRejected,
    Event,
    Judgement,
    PlainMeasured,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
)
from ..engine.stats import ReplyStats

Row = dict[str, Any]
DIGITS = 6  # probabilities and seconds: a millionth is below anything shown


# An event's ``type`` in its row; the fields are the dataclass's own (``_encoded``/``_decoded`` say how each type of
# field is written), so a field added to an event is stored, printed by ``ask --json`` and replayed with nothing here
# edited. A field a row lacks (written before the field existed) reads as its default.
TYPES: dict[type, str] = {ReplyStarted: "started", ContextTrimmed: "context_trimmed", SpeculationChanged: "speculation",
                          TokenEmitted: "token", DraftRejected: "rejected", StepVerified: "step",
                          ThreadsAdjusted: "threads", PlainMeasured: "plain", ReplyFinished: "summary"}
EVENTS: dict[str, type] = {tag: cls for cls, tag in TYPES.items()}
REBUILT = {(ReplyFinished, "text")}  # not stored: the tokens before it spell it
ROUNDED = {(ThreadsAdjusted, "others_cores"): 3}  # digits, where not DIGITS
# A field's name before it was renamed → today's: rows stored then read as today's (issue #49: the draft length in use
# was written as "n_max", the name of the profile's cap).
RENAMED = {"n_max": "draft_length"}
NESTED = (SpeculationState, Judgement, ReplyStats)  # records whose fields are written into the row, after the event's


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def row_of(event: Event) -> Row:
    """One event as a JSON-ready object: its type, its text first where it has one (a reader's eye finds it), its
    own fields, then its nested records' (a field at its empty default left out)."""
    cls = type(event)
    if cls not in TYPES:
        raise TypeError(f"not an engine event: {event!r}")
    fields = sorted(dataclasses.fields(event),
                    key=lambda f: (f.name != "text", isinstance(getattr(event, f.name), NESTED)))
    row: Row = {"type": TYPES[cls]}
    for field in fields:
        value = getattr(event, field.name)
        if (cls, field.name) in REBUILT or value == field.default and field.default in (None, (), ""):
            continue
        row |= _encoded(field.name, value, ROUNDED.get((cls, field.name), DIGITS))
    return row


def events_of(rows: Iterable[Row]) -> Iterator[Event]:
    """The events the rows were made from (a summary's reply text is rebuilt from the tokens before it); rows of a
    type this version does not know are passed over."""
    text: list[str] = []
    for row in map(renamed, rows):
        cls = EVENTS.get(row.get("type", ""))
        if cls is None:
            continue
        hints = _hints(cls)
        values = {}
        for field in dataclasses.fields(cls):
            if (cls, field.name) in REBUILT:
                values[field.name] = "".join(text)
                continue
            value = _decoded(field.name, hints[field.name], row)
            if value is not _ABSENT:
                values[field.name] = value
        event = cls(**values)
        if isinstance(event, TokenEmitted):
            text.append(event.text)
        yield event


def _encoded(name: str, value: Any, digits: int) -> Row:
    """A field as row keys: nested records flattened into the row, the rest by the type of its value."""
    if isinstance(value, SpeculationState):
        return _speculation_row(value)
    if isinstance(value, Judgement):
        return _judgement_row(value)
    if isinstance(value, ReplyStats):
        return value.summary()
    if isinstance(value, enum.Enum):
        return {name: value.value}
    if isinstance(value, tuple):
        return {name: list(value)}
    if isinstance(value, float):
        return {name: round(value, digits)}
    return {name: value}


_ABSENT = object()  # a field the row does not hold: the dataclass's default stands


def _decoded(name: str, hint: Any, row: Row) -> Any:
    """A field back from a row, by its declared type."""
    if hint is SpeculationState:
        return _speculation_of(row)
    if hint is ReplyStats:
        return stats_of(row)
    if _optional(hint) is Judgement:
        return _judgement_of(row) if "top" in row else None
    if name not in row:
        return _ABSENT
    value, kind = row[name], _optional(hint)
    if value is None:
        return None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if typing.get_origin(kind) is tuple:
        if not value and kind is not hint:  # an empty tuple where None may stand: nothing
            return None
        return tuple(int(v) if int in typing.get_args(kind) else v for v in value)
    return value


def _optional(hint: Any) -> Any:
    """``X`` of ``X | None``; any other hint as it is."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (types.UnionType, typing.Union) and len(args) == 1 else hint


def stats_of(summary: Row) -> ReplyStats:
    """A reply's telemetry from its summary (the derived figures are recomputed from the counters)."""
    names = ReplyStats.__dataclass_fields__
    return ReplyStats(**{k: v for k, v in renamed(summary).items() if k in names})


def renamed(row: Row) -> Row:
    """A row stored before a field was renamed, under today's names (``RENAMED``; today's wins where both are)."""
    old = RENAMED.keys() & row.keys()
    if not old:
        return row
    return {RENAMED.get(k, k): v for k, v in row.items() if k not in old or RENAMED[k] not in row}


def line_of(row: Row) -> str:
    """One row as the store keeps it, a JSON line."""
    return json.dumps(row, ensure_ascii=False)


def packed(lines: list[str]) -> bytes:
    """JSON lines as the store keeps them, compressed (level 1: a streaming reply is saved every second)."""
    return zlib.compress("\n".join(lines).encode(), 1)


def unpacked(blob: bytes) -> list[str]:
    """The lines of ``packed``; raises ValueError when the blob is damaged."""
    try:
        text = zlib.decompress(blob).decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged trace: {exc}") from exc
    # split at "\n" only: a JSON line may hold U+2028 and the like, which splitlines() would also split at
    return text.split("\n") if text else []


def rows_of(lines: list[str]) -> list[Row]:
    """The rows of stored lines; raises ValueError when one is not an event's."""
    try:
        rows = [json.loads(line) for line in lines]
    except json.JSONDecodeError as exc:
        raise ValueError(f"damaged trace: {exc}") from exc
    if not all(isinstance(r, dict) and isinstance(r.get("type"), str) for r in rows):
        raise ValueError("damaged trace: a row is not an event")
    return rows


def _speculation_row(state: SpeculationState) -> Row:
    return {"method": state.method, "active": state.active, "reason": state.reason}


def _speculation_of(row: Row) -> SpeculationState:
    return SpeculationState(row["method"], row["active"], row.get("reason", ""))


def _pairs(candidates: tuple[Candidate, ...]) -> list[list[Any]]:
    return [[c.text, round(c.p, DIGITS)] for c in candidates]


def _candidates(pairs: list[list[Any]], ids: list[int]) -> tuple[Candidate, ...]:
    return tuple(Candidate(token, text, p) for (text, p), token in zip(pairs, ids or [-1] * len(pairs)))


def _judgement_row(j: Judgement) -> Row:
    row: Row = {"position": j.position, "top": _pairs(j.top), "top_ids": [c.token for c in j.top]}
    if j.draft_top:
        row |= {"draft_top": _pairs(j.draft_top), "draft_top_ids": [c.token for c in j.draft_top]}
    if j.drafted is not None:
        row["drafted"] = [j.drafted.text, round(j.drafted.p, DIGITS), j.drafted.token]
    for name in ("draft_p", "p_sampled", "q", "accept"):
        value = getattr(j, name)
        if value is not None:
            row[name] = round(value, DIGITS)
    if j.match:
        row["match"] = j.match
    if j.copied:
        row |= {"copied": j.copied, "remembered": j.remembered}
    if j.origin is not None:
        row["origin"] = list(j.origin)
    if j.unknown:
        row["unknown"] = j.unknown
    return row


def _judgement_of(row: Row) -> Judgement:
    drafted = row.get("drafted")
    return Judgement(
        row.get("position", 0), _candidates(row["top"], row.get("top_ids", [])),
        _candidates(row.get("draft_top", []), row.get("draft_top_ids", [])),
        Candidate(drafted[2], drafted[0], drafted[1]) if drafted else None,
        row.get("draft_p"), row.get("p_sampled"), row.get("q"), row.get("accept"), row.get("match", 0),
        row.get("copied", ""), row.get("remembered", False), _origin_of(row), row.get("unknown", ""),
    )


def _origin_of(row: Row) -> tuple[int, int] | None:
    origin = row.get("origin")
    return (int(origin[0]), int(origin[1])) if origin else None
