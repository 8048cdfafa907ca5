"""One conformance suite: every backend kind that runs here keeps the same promises, through the chat controller both
front ends use. Greedy output with speculation equals in-process plain decoding token for token — over several turns,
multi-byte text, a cancelled reply, a regenerated one, A/B and a trimmed context — and the kinds of the tokens add up
to the server's own counters. (The front ends over the same kinds: test_conformance_front_ends.py.)"""

from __future__ import annotations

import os
import signal

import pytest

from backend_kinds import KINDS, MULTIBYTE, SYSTEM, TURNS, Servers, ask, controller_for, kind_id, write_profile
from specchat.chats.ab import FRESH_CACHE_TITLE, SAME_CACHE_TITLE
from specchat.chats.controller import Refused
from specchat.engine import Message
from specchat.engine.events import ContextTrimmed, ReplyFinished, TokenEmitted
from specchat.engine.reference import PlainReference
from specchat.errors import BackendError
from helpers import LIMIT, LOOPS, loop_cut

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")


@pytest.fixture(params=KINDS, ids=kind_id)
def kind(request) -> str:
    return request.param


@pytest.fixture
def profile(kind, tmp_path, llama_server, servers):
    def make(n_ctx: int = 2048):
        return write_profile(tmp_path, kind, binary=llama_server, servers=servers, n_ctx=n_ctx)
    return make


def same(kind: str, record, expected: tuple[list[int], str], plain=None) -> None:
    """Greedy equality: token for token where the backend sends ids; the text where it sends only text (there a loop
    is cut where tiktoken's count of the text says: one text runs on from the other, and one of them looped)."""
    ids, text = expected
    if kind == "remote-openai":
        looped = record.finish_reason == "loop" or plain is not None and text in plain.looped
        assert record.text == text or looped and (record.text.startswith(text) or text.startswith(record.text))
    else:
        assert record.tokens == ids, (record.text, text)
        assert record.text == text


def test_three_greedy_turns_equal_plain_decoding(kind, profile, plain):
    controller = controller_for(profile())
    try:
        # "vs plain" is measured where plain decoding can be run, and says why not elsewhere (never a guess).
        telemetry = controller.telemetry
        if kind == "in-process":
            assert telemetry.reference is not None and telemetry.reference.per_token_s is not None
        else:
            assert telemetry.reference is None and telemetry.plain_source.startswith("not measured — ")
            assert ("A/B" in telemetry.plain_source) == (kind == "managed")
        expected = plain.chat(TURNS)
        for text, reference in zip(TURNS, expected):
            record = ask(controller, text)
            same(kind, record, reference)
        if kind != "remote-openai":  # speculation ran: the promise was kept with drafts judged, not without
            replies = controller.session.turns[1::2]
            assert len(replies) == len(TURNS) and all(reply.stats["drafted"] > 0 for reply in replies)
            assert "accepted" in {k for reply in replies for _, k in reply.segments}
    finally:
        controller.close()


@pytest.mark.parametrize("kind", [k for k in KINDS if k in ("in-process", "managed")], ids=kind_id)
def test_a_busy_starts_reference_gives_way_to_the_replies_own_plain_steps(kind, tmp_path, llama_server, servers):
    """A start beside a compile measured plain decoding at 3 tok/s, and every reply after read 13× to 25× "vs plain"
    (issue #47). A reply that drafted nothing is 1.00×, and its undrafted steps replace the reference they contradict.
    On the kinds whose speculation the profile can switch off (a remote server drafts as it was started)."""
    path = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    path.write_text(path.read_text().replace('method = "draft"', 'method = "none"'))
    controller = controller_for(path, max_tokens=48)
    try:
        telemetry = controller.telemetry
        telemetry.reference = PlainReference.measured(3.0, 40, None, False, "a plain run beside a compile")
        record = ask(controller, "Write a short story about a robot.")
        assert record.stats["drafted"] == 0 and record.stats["steps"] >= 40
        assert telemetry.nothing_drafted and telemetry.speedup() == 1.0
        assert "undrafted steps (the reference read 3 tok/s there)" in telemetry.plain_source
        assert telemetry.plain_tps > 5 * 3.0  # the embedded target decodes at 50-150 tok/s here, busy or quiet
    finally:
        controller.close()


def test_multibyte_replies_are_whole_with_every_token_id(kind, profile, plain):
    """CJK, emoji and accented Latin: characters a vocabulary spells over byte tokens came through llama-server as
    U+FFFD, their ids lost (the server holds a chunk back while its text ends inside a UTF-8 sequence)."""
    controller = controller_for(profile(), max_tokens=40)
    backend = controller.backend
    try:
        expected = plain.chat(MULTIBYTE)
        split_characters = 0
        for text, reference in zip(MULTIBYTE, expected):
            before = backend.spec_counters() if kind in ("managed", "remote-llama") else None
            record = ask(controller, text)
            same(kind, record, reference)
            split_characters += sum(1 for piece, _ in record.segments if piece == "")
            if before is not None:  # the kinds add up to the server's own counters
                after = backend.spec_counters()
                accepted = after["accepted_tokens"] - before["accepted_tokens"]
                drafted = after["draft_tokens"] - before["draft_tokens"]
                shown = sum(k == "accepted" for _, k in record.segments)
                assert record.stats["drafted"] == record.stats["accepted"] + record.stats["rejected"]
                if record.finish_reason == "stop":
                    assert shown == accepted == record.stats["accepted"] and record.stats["drafted"] == drafted
                else:  # at the limit the server judged up to three tokens beyond it: the reply counts what it shows
                    assert shown == record.stats["accepted"] <= accepted and record.stats["drafted"] <= drafted
        assert all("\ufffd" not in reply for _, reply in expected)
        if kind != "remote-openai":
            assert split_characters >= 10  # the prompts did make characters that span tokens
    finally:
        controller.close()


def cut_inside_a_character(plain, text: str) -> int:
    """A token limit at which plain decoding's reply to ``text`` ends inside a UTF-8 character."""
    ids, _ = plain.answer([Message("system", SYSTEM)], text, max_tokens=40)
    for limit in range(1, len(ids) + 1):
        try:
            b"".join(plain.piece(t) for t in ids[:limit]).decode("utf-8")
        except UnicodeDecodeError:
            return limit
    raise AssertionError("no character of the reply spans tokens")


def test_a_reply_cut_inside_a_character_ends_at_the_last_whole_one(kind, profile, plain):
    """At the token limit inside a CJK character the engine's text ended in U+FFFD while the reply shown (and stored)
    left the unfinished bytes out: the two disagreed, and the next turn's history carried the U+FFFD."""
    limit = cut_inside_a_character(plain, MULTIBYTE[0])
    ids, text = plain.answer([Message("system", SYSTEM)], MULTIBYTE[0], max_tokens=limit)
    whole = b"".join(plain.piece(t) for t in ids).decode("utf-8", "ignore")
    assert len(ids) == limit and text == whole and "\ufffd" not in text  # an independent decode of the same ids
    controller = controller_for(profile(), max_tokens=limit)
    try:
        finished = []
        record = ask(controller, MULTIBYTE[0], on_event=lambda e: finished.append(e) if isinstance(e, ReplyFinished) else None)
        same(kind, record, (ids, text))
        assert [e.text for e in finished] == [text]  # the text the backend's own conversation goes on from
    finally:
        controller.close()


def test_a_cancelled_reply_then_the_next_turn(kind, profile, plain):
    controller = controller_for(profile(), max_tokens=200)
    try:
        partial = ask(controller, "Write a very long story about a dragon and a knight.", stop_after=10)
        assert partial.finish_reason == "cancelled" and 10 <= len(partial.segments) < 200
        follow = ask(controller, "Shorter, please.")  # a next turn that runs to its 200 tokens, on every kind
        ids = None if kind == "remote-openai" else list(partial.tokens)
        history = [Message("system", SYSTEM), Message("user", "Write a very long story about a dragon and a knight."),
                   Message("assistant", partial.text, ids, "cancelled")]
        same(kind, follow, plain.answer(history, "Shorter, please.", max_tokens=200), plain)
    finally:
        controller.close()


def test_regenerate_answers_the_same_prompt_again(kind, profile, plain):
    controller = controller_for(profile())
    try:
        first = ask(controller, TURNS[0])
        exchange = controller.regenerate()
        events = []
        assert exchange.run(events.append) is None
        controller.absorb(events)
        again = controller.session.last_reply
        assert len(controller.session.turns) == 2 and again is not first
        same(kind, again, plain.chat(TURNS[:1])[0])
        assert again.text == first.text
    finally:
        controller.close()


def test_a_reply_in_a_loop_stops_where_plain_decoding_repeats_itself(kind, profile, plain):
    """Three prompts the target answers in a loop, in one chat: each reply is plain decoding's (run to the limit
    without the rule) cut where the rule's words say, the next turn continues from the reply as cut, and A/B of a cut
    reply compares alike (both arms stop by the same rule)."""
    controller = controller_for(profile(), max_tokens=LIMIT)
    history = [Message("system", SYSTEM)]
    try:
        cut = 0
        for text in LOOPS:
            ids, full = plain.answer(history, text, max_tokens=LIMIT, loop=False)
            record = ask(controller, text)
            if kind == "remote-openai":  # the rule counts tiktoken's tokens of the text there: cut elsewhere
                assert full.startswith(record.text) and record.finish_reason in ("loop", "stop", "length")
                assert record.finish_reason == "loop" or record.text == full
            else:
                loop = loop_cut(ids, plain.piece)
                n = loop[0] if loop else len(ids)
                assert record.tokens == ids[:n] and record.finish_reason == ("loop" if loop else "length")
                assert record.stats["loop_span"] == (loop[1] if loop else 0)
            cut += record.finish_reason == "loop"
            history += [Message("user", text), Message("assistant", record.text,
                                                        None if kind == "remote-openai" else list(record.tokens))]
        assert cut >= 2
        if kind in ("in-process", "managed"):
            result = controller.compare().run()
            assert result is not None and result.identical is True
            assert result.plain["finish_reason"] == controller.session.last_reply.finish_reason == "loop"
    finally:
        controller.close()


def test_ab_compares_the_same_prompt_without_speculation(kind, profile, plain):
    """A/B of the second turn, whose reply met a cache holding the first."""
    controller = controller_for(profile())
    try:
        ask(controller, TURNS[0])
        record = ask(controller, TURNS[1])
        comparison = controller.compare()
        if kind.startswith("remote"):  # speculation on someone else's server cannot be switched off from here
            with pytest.raises(BackendError, match="A/B needs a server specchat starts"):
                comparison.run()
            return
        result = comparison.run()
        assert result is not None and result.identical is True and not result.sampled
        assert result.plain["method"] == "none" and result.plain["drafted"] == 0
        assert result.plain["generated"] == len(record.tokens) and result.spec["drafted"] > 0
        assert controller.backend.speculation_state().active  # the profile is back as it was
        # The title claims only what held: a managed server restarted for the plain arm lost the reply's cache.
        assert result.title == (SAME_CACHE_TITLE if kind == "in-process" else
                                FRESH_CACHE_TITLE.format(plain=result.plain["prefill_tokens"],
                                                         spec=result.spec["prefill_tokens"]))
        controller.compared(result)
        assert "A/B plain run" in controller.telemetry.plain_source
        same(kind, ask(controller, TURNS[2]), plain.chat(TURNS)[2])  # the chat goes on as if nothing happened
    finally:
        controller.close()


def test_ab_refuses_a_reply_that_did_not_finish_by_itself(profile):
    controller = controller_for(profile(), max_tokens=200)
    try:
        ask(controller, "Write a very long story about a dragon and a knight.", stop_after=6)
        with pytest.raises(Refused, match="finished by itself, and this one was cancelled"):
            controller.compare()
    finally:
        controller.close()


def test_a_trimmed_context_keeps_its_window(kind, profile, plain):
    """n_ctx 256: old turns are dropped; every reply is still plain decoding's in the same window, and after a trim
    the next turn decodes only what is new (a server's prompt_n says so too)."""
    if kind == "remote-openai":
        pytest.skip("an OpenAI-compatible server renders and trims the prompt itself")
    controller = controller_for(profile(n_ctx=256), max_tokens=48)
    texts = ["Tell me about the sea.", "And about mountains?", "What about rivers?", "And deserts?", "Forests?",
             "And the sky?"]
    try:
        expected = plain.chat(tuple(texts), n_ctx=256, max_tokens=48)
        trims, prefills = 0, []
        for text, reference in zip(texts, expected):
            seen = []
            record = ask(controller, text, on_event=seen.append)
            trimmed = any(isinstance(e, ContextTrimmed) for e in seen)
            trims += trimmed
            same(kind, record, reference)
            if trims and not trimmed:  # a turn after a trim that fitted the window: it extended the cache
                prefills.append((record.stats["prefill_tokens"], record.stats["prompt_tokens"]))
        assert trims >= 1 and prefills
        assert all(prefill < prompt // 2 for prefill, prompt in prefills), prefills
    finally:
        controller.close()


def test_a_server_killed_mid_reply(kind, profile, llama_server, target_path, draft_path, tmp_path):
    """Managed: the partial reply is kept, marked, and the next message starts the server again. Remote: the same
    partial reply, and then one line saying the server cannot be reached."""
    if kind == "in-process":
        pytest.skip("no server to kill")
    own = Servers(llama_server, target_path, draft_path)  # a remote server of this test's own, to kill
    path = write_profile(tmp_path, kind, binary=llama_server, servers=own) if kind != "managed" else profile()
    controller = controller_for(path, max_tokens=300)
    try:
        pid = controller.backend.pid if kind == "managed" else next(iter(own.pids()))
        exchange = controller.begin("Write a very long story about the sea.")
        events = []

        def sink(event):
            events.append(event)
            if sum(isinstance(e, TokenEmitted) for e in events) == 12:
                os.kill(pid, signal.SIGKILL)

        failure = exchange.run(sink)
        controller.absorb(events)
        assert failure is not None and failure.started and "\n" not in failure.error
        assert controller.failed(failure) is None  # kept, not dropped
        record = controller.session.last_reply
        assert record.finish_reason == "error" and len(record.segments) >= 12
        if kind == "managed":
            again = ask(controller, "Hello again.")
            assert again.finish_reason in ("stop", "length", "loop") and controller.backend.pid != pid
        else:
            exchange = controller.begin("Hello again.")
            failure = exchange.run(lambda _e: None)
            assert failure is not None and "cannot reach" in failure.error and "\n" not in failure.error
    finally:
        controller.close()
        own.close()
