"""The recorded backend (tests/cassettes.py) the front ends' flow tests play: what it plays is what the real in-process
backend did, row for row of the trace's encoding (its floats rounded as stored), a held reply is cut on the same token both times, and what it was not recorded for is a
failure that names the command recording it — never a made-up answer."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import pytest
from specchat.backends import open_backend
from specchat.chats import trace
from specchat.engine import Message
from specchat.engine.events import ReplyFinished, TokenEmitted
from specchat.profiles import load_profile, run_config

import cassettes
from helpers import LONG_STORY as LONG



def real_open(config, stored=None):
    return open_backend(config, stored)


def rows(events) -> list[dict]:
    return [trace.row_of(e) for e in events]


def cut_late(events_of) -> list:
    """The reply, stopped half a second after its 8th token was seen: long enough for an unheld one to go on."""
    seen, stop = threading.Event(), threading.Event()

    def stopper() -> None:
        seen.wait(60)
        time.sleep(0.5)
        stop.set()

    threading.Thread(target=stopper, daemon=True).start()
    events = []
    for event in events_of(stop.is_set):
        events.append(event)
        if sum(isinstance(e, TokenEmitted) for e in events) >= 8:
            seen.set()
    return events


def test_a_played_reply_is_the_recorded_one_and_a_cut_falls_on_the_same_token(tmp_path: Path, user_cache):
    config = run_config(load_profile("tiny"))
    path = tmp_path / "cassette.json.gz"
    recording = cassettes.Cassette(path, "record", holds={LONG: 8})
    backend = recording.opener(real_open)(config)
    try:
        first = list(backend.answer([], "Hello! Who are you?", max_tokens=24, top=5))
        earlier = [Message("user", "Hello! Who are you?"),
                   Message("assistant", first[-1].text, [e.token for e in first if isinstance(e, TokenEmitted)],
                           first[-1].finish_reason)]
        cut = cut_late(lambda stop: backend.answer(earlier, LONG, max_tokens=200, should_stop=stop, top=5))
        reference = backend.plain_reference()
    finally:
        backend.close()
    recording.save()
    finished = cut[-1]
    assert isinstance(finished, ReplyFinished) and finished.finish_reason == "cancelled"
    assert 8 <= sum(isinstance(e, TokenEmitted) for e in cut) < 8 + 5  # held after the step that reached 8 tokens

    playing = cassettes.Cassette(path, "play", holds={LONG: 8})
    played = playing.opener(real_open)(config)
    assert type(played) is cassettes.RecordedBackend
    assert rows(played.answer([], "Hello! Who are you?", max_tokens=24, top=5)) == rows(first)
    assert rows(cut_late(lambda stop: played.answer(earlier, LONG, max_tokens=200, should_stop=stop, top=5))) == rows(cut)
    assert played.plain_reference() == reference
    assert played.speculation_state() == backend.speculation_state() and played.draft_length == backend.draft_length
    assert not playing.misses
    with pytest.raises(cassettes.NotRecorded, match="call 2 of answer"):  # asked once more than the real one was
        played.answer([], "Hello! Who are you?", max_tokens=24, top=5)


def test_a_held_reply_nobody_stops_and_a_close_under_a_playing_reply_fail(tmp_path: Path, user_cache, monkeypatch):
    config = run_config(load_profile("tiny"))
    path = tmp_path / "cassette.json.gz"
    recording = cassettes.Cassette(path, "record", holds={LONG: 8})
    backend = recording.opener(real_open)(config)
    try:
        cut_late(lambda stop: backend.answer([], LONG, max_tokens=200, should_stop=stop, top=5))
    finally:
        backend.close()
    recording.save()

    monkeypatch.setattr(cassettes, "HOLD_S", 0.2)
    unstopped = cassettes.Cassette(path, "play", holds={LONG: 8})
    events = list(unstopped.opener(real_open)(config).answer([], LONG, max_tokens=200, top=5))
    assert events[-1].finish_reason == "cancelled"  # what was recorded is played …
    assert any("never stopped" in miss for miss in unstopped.misses)  # … and the test fails: nobody cut it here

    closing = cassettes.Cassette(path, "play", holds={LONG: 8})
    played = closing.opener(real_open)(config)
    reply = played.answer([], LONG, max_tokens=200, should_stop=lambda: True, top=5)
    next(reply)
    played.close()
    assert any("still playing" in miss for miss in closing.misses)


def test_what_was_not_recorded_fails_and_names_the_command(tmp_path: Path, user_cache):
    config = run_config(load_profile("tiny"))
    empty = cassettes.Cassette(tmp_path / "none.json.gz", "play")
    with pytest.raises(cassettes.NotRecorded, match="python tests/recorded.py"):
        empty.opener(real_open)(config)
    assert empty.misses


def test_a_cassette_recorded_under_another_engine_is_not_played(tmp_path: Path):
    path = tmp_path / "old.json.gz"
    header = cassettes.Cassette.header() | {"engine": "an earlier engine"}
    path.write_bytes(gzip.compress(json.dumps({"header": header, "calls": {"open x": [{"facts": {}}]}}).encode()))
    stale = cassettes.Cassette(path, "play")
    assert stale.misses and "an earlier engine" in stale.misses[0] and not stale.calls
