"""Multi-turn chats reuse the KV cache, cancelling keeps the state consistent, a full context drops old turns."""

from __future__ import annotations

import pytest

from helpers import run
from specchat.engine.conversation import Message
from specchat.engine.events import ContextTrimmed
from specchat.errors import ContextError


@pytest.mark.parametrize("method", ["none", "draft", "ngram"])
def test_second_turn_prefills_only_new_tokens_and_matches_a_fresh_run(method, make_engine):
    engine = make_engine(method, n_max=4)
    first = run(engine, "Name three primary colours.", max_tokens=40)
    cached_after_first = len(engine.ctx.cached)
    assert cached_after_first >= len(engine.tokens) - 1  # everything but at most the last (pending) token
    second = run(engine, "Now name three secondary colours.", max_tokens=40)
    started = second.started
    # Only what the first turn did not leave in the cache is decoded: the new user turn (and a pending token).
    assert started.reused_tokens == cached_after_first
    assert started.prefill_tokens == started.prompt_tokens - cached_after_first
    assert started.prefill_tokens <= started.prompt_tokens - len(first.ids)
    assert second.finished.stats.prefill_tokens == started.prefill_tokens

    fresh = make_engine("none")
    fresh.restore(engine.messages[:-2])  # the history up to the second question
    again = run(fresh, "Now name three secondary colours.", max_tokens=40)
    assert again.started.reused_tokens == 0
    assert again.ids == second.ids


def test_cancel_keeps_partial_reply_and_next_turn_matches_fresh_run(make_engine):
    engine = make_engine("draft", n_max=4)
    emitted = []

    def stop_after_ten() -> bool:
        return len(emitted) >= 10

    events = engine.reply("Write a long poem about the sea.", max_tokens=200, should_stop=stop_after_ten)
    for event in events:
        if hasattr(event, "kind"):
            emitted.append(event)
    finished = event
    assert finished.finish_reason == "cancelled"
    assert 10 <= finished.stats.generated < 16  # stops between steps: at most one step (n_max + 1) past the request
    partial = engine.messages[-1]
    assert partial.role == "assistant" and partial.finish_reason == "cancelled"
    assert partial.content == finished.text and partial.tokens == [e.token for e in emitted]
    assert engine.ctx.cached == engine.tokens[: len(engine.ctx.cached)]

    follow = run(engine, "Make it shorter.", max_tokens=32)
    fresh = make_engine("none")
    fresh.restore(engine.messages[:-2])
    assert run(fresh, "Make it shorter.", max_tokens=32).ids == follow.ids


def test_abandoned_reply_counts_as_cancelled(make_engine):
    engine = make_engine("ngram")
    events = engine.reply("Count from one to twenty.", max_tokens=64)
    for _ in range(5):
        next(events)
    events.close()
    assert engine.messages[-1].finish_reason == "cancelled"
    assert run(engine, "Continue.", max_tokens=8).finished.stats.generated > 0


@pytest.mark.parametrize("front_end_history", [False, True], ids=["engine-alone", "whole-chat-each-turn"])
def test_a_trim_frees_room_for_the_turns_after_it(make_engine, front_end_history):
    """Dropping only what the next reply needs made every later turn trim again and decode the whole prompt anew; so
    did a front end passing the whole chat with each question (as the app, the REPL and the store's session do)."""
    engine = make_engine("none", n_ctx=256, system_prompt="You are terse.")
    chat = list(engine.messages)
    trims, prefills = [], []
    for n in range(16):
        question = f"Say the number {n} in words."
        if front_end_history:
            engine.restore(chat)
        r = run(engine, question, max_tokens=16)
        chat += [Message("user", question), engine.messages[-1]]
        trims.append(bool(r.trimmed))
        prefills.append(r.finished.stats.prefill_tokens)
    first = trims.index(True)
    after = range(first + 1, len(trims))
    assert len(after) >= 6, "the context must fill early enough to watch several turns after it"
    assert sum(trims[i] for i in after) <= len(after) // 2
    # A turn that does not trim decodes only its own message: the cache holds the rest.
    assert all(prefills[i] < 64 for i in after if not trims[i])


def test_regenerating_in_a_trimmed_chat_answers_the_same_prompt(make_engine):
    """Regenerating, or an A/B rerun, passes the chat up to the last question: it must get the window the reply was
    answered in, not a window trimmed afresh (a different prompt: A/B would compare answers to different prompts)."""
    engine = make_engine("none", n_ctx=256, system_prompt="You are terse.")
    chat = list(engine.messages)
    for n in range(12):
        question = f"Say the number {n} in words."
        engine.restore(chat)
        r = run(engine, question, max_tokens=16)
        chat += [Message("user", question), engine.messages[-1]]
    assert len(engine.messages) < len(chat), "the chat must have been trimmed before its last turn"
    window = list(engine.messages)
    engine.restore(chat[:-2])
    again = run(engine, chat[-2].content, max_tokens=16)
    assert again.trimmed == []
    assert again.finished.stats.prompt_tokens == r.finished.stats.prompt_tokens
    assert engine.messages == window  # greedy: the same answer to the same prompt


def test_another_chat_ending_like_this_one_is_restored_whole(make_engine):
    """Only a chat this conversation was trimmed from gets a window: another chat that merely ends with the same
    exchange (a greeting answered alike) keeps all of its earlier turns."""
    engine = make_engine("none", n_ctx=512, system_prompt="You are terse.")
    run(engine, "Hi", max_tokens=8)
    greeting = engine.messages[-2:]
    other = [engine.messages[0], Message("user", "My name is Ada."), Message("assistant", "Nice to meet you, Ada."),
             *greeting]
    engine.restore(other)
    assert engine.messages == other


def test_full_context_drops_oldest_turns_but_keeps_system_prompt(make_engine):
    engine = make_engine("ngram", n_ctx=256, system_prompt="You are terse.")
    trimmed = []
    for question in ("Describe a cat in detail.", "Describe a dog in detail.", "Describe a horse in detail.",
                     "Describe a bird in detail."):
        r = run(engine, question, max_tokens=60)
        trimmed += r.trimmed
        assert r.finished.finish_reason in {"stop", "length", "context_full"}
        assert len(engine.tokens) <= 256
    assert trimmed, "four long turns cannot fit in 256 tokens"
    assert all(isinstance(t, ContextTrimmed) and t.dropped_messages >= 2 for t in trimmed)
    assert engine.messages[0] == Message("system", "You are terse.")
    assert engine.messages[-2].content == "Describe a bird in detail."


def test_prompt_larger_than_context_is_a_clear_error(make_engine):
    engine = make_engine("none", n_ctx=64)
    with pytest.raises(ContextError, match=r"needs \d+ tokens but the context holds 64"):
        list(engine.reply("word " * 100))
    # The failed message did not enter the conversation.
    assert [m.role for m in engine.messages] == ["system"]


def test_empty_message_is_refused(make_engine):
    from specchat.errors import ConfigError

    engine = make_engine("none")
    with pytest.raises(ConfigError, match="empty"):
        list(engine.reply("   "))
