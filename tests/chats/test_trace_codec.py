"""The stored trace is generic over the event dataclasses: a row is the event's type and its fields. Rows written by
the code before it was (tests/fixtures/trace_rows.jsonl, every event kind with its optional fields set and unset,
multi-byte text included) still read back to the same events, and today's code writes them unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specchat.chats.trace import EVENTS, TYPES, events_of, line_of, row_of, stats_of
from specchat.engine import events as engine_events
from specchat.engine.events import (Candidate, ContextTrimmed, DraftRejected, DraftSource, Judgement, ReplyFinished,
                                    ReplyStarted, SpeculationChanged, SpeculationState, StepVerified,
                                    ThreadsAdjusted, TokenEmitted, TokenKind, PlainMeasured)
from specchat.engine.stats import ReplyStats

WRITTEN_BEFORE = Path(__file__).parents[1] / "fixtures" / "trace_rows.jsonl"


def sample_events() -> list:
    """The events the fixture's rows were written from."""
    stats = ReplyStats(method="ngram", speculation_active=True, prompt_tokens=21, generated=5, drafted=4,
                       accepted=3, rejected=1)
    judged = Judgement(1, (Candidate(7, "¡", 0.5), Candidate(9, "猫", 0.25)), (Candidate(7, "¡", 0.75),),
                       Candidate(9, "猫", 0.25), 0.5, 0.25, 0.5, 1.0, 3, "el gato 🙂", True, (4, 17), "")
    copied = Judgement(0, (Candidate(3, "é", 0.125),), match=2, copied="été", origin=(2, 5))
    unknown = Judgement(2, (), unknown="llama-server does not say which draft tokens it rejected, only how many")
    return [
        ReplyStarted(21, 8, 13, 2048, SpeculationState("ngram", True)),
        ReplyStarted(21, 0, 21, 2048, SpeculationState("none", False, "switched off by hand"), True),
        SpeculationChanged(SpeculationState("ngram", False, "the context is full")),
        ContextTrimmed(2, 300, 120, 256),
        ThreadsAdjusted(1, 2, 1.23456789, 2),
        TokenEmitted(7, "¡", TokenKind.TARGET, 0, 0.125),
        TokenEmitted(9, "猫", TokenKind.ACCEPTED, 1, 0.25, judged),
        TokenEmitted(3, "é", TokenKind.CORRECTED, 1, 0.375, copied),
        TokenEmitted(5, "🙂", TokenKind.BONUS, 2, 0.5, unknown),
        DraftRejected((11, 12), "ab", 1, ("a", "b")),
        DraftRejected((13,), "c", 2),
        StepVerified(1, 4, 3, 0, 0, 4, 30),
        StepVerified(2, 3, 3, 1, 2, 4, 34, DraftSource.STORED_CHAT, (2, 5)),
        StepVerified(3, 2, 1, 0, 0, 4, 36, DraftSource.CONVERSATION),
        PlainMeasured(131.25, 40, 1.5e-05, False),
        ReplyFinished("¡猫é🙂", "stop", stats),
    ]


def written_before() -> list[dict]:
    return [json.loads(line) for line in WRITTEN_BEFORE.read_text(encoding="utf-8").splitlines()]


def test_rows_written_before_read_back_to_the_same_events():
    """The same events, but for what the row rounds: the others' cores to a thousandth."""
    expected = [dataclasses.replace(e, others_cores=1.235) if isinstance(e, ThreadsAdjusted) else e
                for e in sample_events()]
    assert list(events_of(written_before())) == expected


def test_todays_rows_are_the_lines_written_before():
    """Byte for byte, key order and rounding included: what ``ask --json`` prints and the store keeps is unchanged."""
    lines = WRITTEN_BEFORE.read_text(encoding="utf-8").splitlines()
    assert [line_of(row_of(event)) for event in sample_events()] == lines


def test_every_event_of_the_engine_has_a_type_and_every_kind_is_in_the_fixture():
    declared = {cls for cls in vars(engine_events).values()
                if dataclasses.is_dataclass(cls) and cls.__module__ == engine_events.__name__
                and cls in engine_events.Event.__args__}
    assert declared == set(TYPES) and set(EVENTS) == set(TYPES.values())
    assert {row["type"] for row in written_before()} == set(EVENTS)


def test_a_row_without_a_later_field_reads_as_its_default():
    """A step row from before drafts had a source, a token row from before judgements had an origin."""
    step = {"type": "step", "step": 1, "drafted": 2, "accepted": 1, "ignored": 0, "withheld": 0, "draft_length": 4,
            "context_used": 9}
    token = {"type": "token", "text": "ñ", "token": 5, "kind": "accepted", "step": 1, "elapsed": 0.5,
             "position": 0, "top": [["ñ", 0.5]], "top_ids": [5], "match": 2, "copied": "ñandú", "remembered": False}
    started = {"type": "started", "prompt_tokens": 3, "reused_tokens": 0, "prefill_tokens": 3, "n_ctx": 64,
               "method": "none", "active": False}
    empty_origin = step | {"origin": []}
    step_event, token_event, started_event, emptied = events_of([step, token, started, {"type": "a later kind"},
                                                                 empty_origin])
    assert step_event.source is None and step_event.origin is None and emptied.origin is None
    assert token_event.judgement.origin is None and token_event.judgement.copied == "ñandú"
    assert started_event.estimated_tokens is False and started_event.speculation.reason == ""


def test_rows_stored_before_the_draft_length_was_named_apart_read_as_today():
    """Until issue #49 the length in use was written as "n_max", the profile's cap's name: a stored reply keeps it, and
    reads as today's ``draft_length`` (steps and the summary alike)."""
    step = {"type": "step", "step": 1, "drafted": 2, "accepted": 1, "ignored": 0, "withheld": 0, "n_max": 4,
            "context_used": 9}
    summary = {"type": "summary", "text": "", "finish_reason": "stop", "method": "ngram", "n_max": 7, "drafted": 2}
    step_event, finished = events_of([step, summary])
    assert step_event.draft_length == 4 and finished.stats.draft_length == 7
    assert stats_of({"n_max": 3}).draft_length == 3 and stats_of({"n_max": 3, "draft_length": 5}).draft_length == 5
