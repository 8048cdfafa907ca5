"""A reply's events as JSON objects: what ``specchat ask --json`` prints, what the store keeps with each reply, and
what ``specchat replay`` and the app's replay read back — one encoding, so a replayed reply and the live one compare
line by line.

Rows, by ``type``: ``started``, ``context_trimmed``, ``speculation``, ``token``, ``rejected``, ``step``, ``threads``
and ``summary`` (the reply's telemetry). A token's ``top`` is the target's best candidates at its position as
``[text, probability]`` pairs, most likely first (``top_ids`` their ids), when the reply kept them.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from ..engine.events import (
    Candidate,
    ContextTrimmed,
    DraftRejected,
    DraftSource,
    Event,
    Judgement,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
    TokenKind,
)
from ..engine.stats import ReplyStats

Row = dict[str, Any]
DIGITS = 6  # probabilities and seconds: a millionth is below anything shown


def row_of(event: Event) -> Row:
    """One event as a JSON-ready object."""
    if isinstance(event, TokenEmitted):
        row: Row = {"type": "token", "text": event.text, "token": event.token, "kind": event.kind.value,
                    "step": event.step, "elapsed": round(event.elapsed, DIGITS)}
        if event.judgement is not None:
            row |= _judgement_row(event.judgement)
        return row
    if isinstance(event, DraftRejected):
        row = {"type": "rejected", "text": event.text, "tokens": list(event.tokens), "step": event.step}
        if event.pieces:
            row["pieces"] = list(event.pieces)
        return row
    if isinstance(event, StepVerified):
        row = {"type": "step", "step": event.step, "drafted": event.drafted, "accepted": event.accepted,
               "ignored": event.ignored, "withheld": event.withheld, "n_max": event.n_max,
               "context_used": event.context_used}
        if event.source is not None:
            row["source"] = event.source.value
        if event.origin is not None:
            row["origin"] = list(event.origin)
        return row
    if isinstance(event, ReplyStarted):
        return {"type": "started", "prompt_tokens": event.prompt_tokens, "reused_tokens": event.reused_tokens,
                "prefill_tokens": event.prefill_tokens, "n_ctx": event.n_ctx,
                "estimated_tokens": event.estimated_tokens, **_speculation_row(event.speculation)}
    if isinstance(event, SpeculationChanged):
        return {"type": "speculation", **_speculation_row(event.speculation)}
    if isinstance(event, ContextTrimmed):
        return {"type": "context_trimmed", "dropped_messages": event.dropped_messages,
                "tokens_before": event.tokens_before, "tokens_after": event.tokens_after, "n_ctx": event.n_ctx}
    if isinstance(event, ThreadsAdjusted):
        return {"type": "threads", "threads": event.threads, "allowed": event.allowed,
                "others_cores": round(event.others_cores, 3), "n_cores": event.n_cores}
    if isinstance(event, ReplyFinished):
        return {"type": "summary", "finish_reason": event.finish_reason, **event.stats.summary()}
    raise TypeError(f"not an engine event: {event!r}")


def events_of(rows: Iterable[Row]) -> Iterator[Event]:
    """The events the rows were made from (a summary's reply text is rebuilt from the tokens before it)."""
    text: list[str] = []
    for row in rows:
        kind = row.get("type")
        if kind == "token":
            text.append(row["text"])
            yield TokenEmitted(row["token"], row["text"], TokenKind(row["kind"]), row["step"], row["elapsed"],
                               _judgement_of(row) if "top" in row else None)
        elif kind == "rejected":
            yield DraftRejected(tuple(row["tokens"]), row["text"], row["step"], tuple(row.get("pieces", ())))
        elif kind == "step":
            yield StepVerified(row["step"], row["drafted"], row["accepted"], row["ignored"], row["withheld"],
                               row["n_max"], row["context_used"],
                               DraftSource(row["source"]) if "source" in row else None, _origin_of(row))
        elif kind == "started":
            yield ReplyStarted(row["prompt_tokens"], row["reused_tokens"], row["prefill_tokens"], row["n_ctx"],
                               _speculation_of(row), row.get("estimated_tokens", False))
        elif kind == "speculation":
            yield SpeculationChanged(_speculation_of(row))
        elif kind == "context_trimmed":
            yield ContextTrimmed(row["dropped_messages"], row["tokens_before"], row["tokens_after"], row["n_ctx"])
        elif kind == "threads":
            yield ThreadsAdjusted(row["threads"], row["allowed"], row["others_cores"], row["n_cores"])
        elif kind == "summary":
            yield ReplyFinished("".join(text), row["finish_reason"], stats_of(row))


def stats_of(summary: Row) -> ReplyStats:
    """A reply's telemetry from its summary (the derived figures are recomputed from the counters)."""
    names = ReplyStats.__dataclass_fields__
    return ReplyStats(**{k: v for k, v in summary.items() if k in names})


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
