"""A reference taken at one moment must not divide every later figure (issue #47): a reply's undrafted steps are plain
decoding at a known depth, so "vs plain" checks the reference against them, and a reply that drafted nothing is 1.00×.
Worked examples: events written by hand with the step times a busy start and a quiet reply give."""

from __future__ import annotations

import pytest

from specchat.engine.events import ReplyFinished, ReplyStarted, SpeculationState, StepVerified, TokenEmitted, TokenKind
from specchat.engine.reference import PlainReference
from specchat.engine.stats import ReplyStats
from specchat.telemetry.live import LiveTelemetry

PROMPT = 100


def reply(steps: list[tuple[int, int, float]], prompt: int = PROMPT) -> list:
    """The events of a reply: its prefill token at 0.2 s, then ``steps`` of (drafted, accepted, seconds)."""
    state = SpeculationState("suffix", True)
    stats = ReplyStats(ttft=0.2)
    events: list = [ReplyStarted(prompt, 0, prompt, 4096, state), TokenEmitted(1, "a", TokenKind.TARGET, 0, 0.2)]
    now, used = 0.2, prompt + 1
    stats.token_emitted("target", 0, now)
    for step, (drafted, accepted, seconds) in enumerate(steps, start=1):
        now += seconds
        for i in range(accepted + 1):
            kind = TokenKind.TARGET if not drafted else TokenKind.ACCEPTED if i < accepted else TokenKind.CORRECTED
            events.append(TokenEmitted(1, "a", kind, step, now))
            stats.token_emitted(kind.value, step, now)
        used += accepted + 1
        stats.record_step(drafted, accepted)
        events.append(StepVerified(step, drafted, accepted, 0, 0, 4, used))
    events.append(ReplyFinished("", "stop", stats))
    return events


def test_a_reply_that_drafted_nothing_is_as_fast_as_plain_decoding():
    """A busy start measured plain decoding at 3 tok/s; the reply ran plainly at 100: it was 1.00×, not 33×."""
    live = LiveTelemetry()
    live.reference = PlainReference.measured(3.0, 0, 0.0, False, "a plain run of 32 tokens")
    live.consume(reply([(0, 0, 0.01)] * 40))
    assert live.speedup() == 1.0
    assert live.nothing_drafted


def test_undrafted_steps_replace_a_reference_they_contradict():
    live = LiveTelemetry()
    live.reference = PlainReference.measured(3.0, 0, 0.0, False, "a plain run of 32 tokens")
    live.consume(reply([(0, 0, 0.01)] * 40))
    assert live.plain_tps == pytest.approx(100.0, rel=0.01)
    assert "40 undrafted steps" in live.plain_source and "3 tok/s" in live.plain_source
    # The next reply drafts: its figure is against the rate its own machine showed, not the busy start's.
    live.consume(reply([(4, 4, 0.02)] * 10 + [(0, 0, 0.01)] * 20))
    assert live.speedup() == pytest.approx(live.reply_rate() / live.plain_tps)
    assert 1.5 < live.speedup() < 2.5


def test_the_slope_over_depth_is_kept_and_the_depth_is_the_undrafted_steps_own():
    live = LiveTelemetry()
    slope = 1e-5  # seconds a token of context adds to a step
    live.reference = PlainReference.measured(3.0, 0, slope, False, "a plain run of 32 tokens")
    live.consume(reply([(0, 0, 0.01)] * 40))
    depth = PROMPT + 1 + 20.5  # the mean context the 40 steps decoded at (each sees the tokens before it)
    assert live.reference.per_token_s == slope
    assert live.reference.tps_at(depth) == pytest.approx(100.0, rel=0.02)


def test_a_reference_that_agrees_within_the_noise_is_kept():
    live = LiveTelemetry()
    before = PlainReference.measured(90.0, 0, 0.0, False, "a plain run of 32 tokens")
    live.reference = before
    live.consume(reply([(0, 0, 0.01)] * 40))  # 100 tok/s: within the noise of 90
    assert live.reference is before


def test_too_few_undrafted_steps_say_nothing_about_the_reference():
    live = LiveTelemetry()
    before = PlainReference.measured(3.0, 0, 0.0, False, "a plain run of 32 tokens")
    live.reference = before
    live.consume(reply([(4, 4, 0.02)] * 20 + [(0, 0, 0.01)] * 5))
    assert live.reference is before and not live.nothing_drafted


def test_without_a_reference_undrafted_steps_give_one():
    """A speculating llama-server cannot run plainly without a restart: its undrafted steps are the plain rate."""
    live = LiveTelemetry()
    live.unmeasured = "not measured — the server speculates; A/B (Ctrl+B) measures it"
    live.consume(reply([(4, 3, 0.02)] * 10 + [(0, 0, 0.01)] * 20))
    assert live.plain_tps == pytest.approx(100.0, rel=0.01)
    assert live.speedup() is not None and "20 undrafted steps" in live.plain_source


def test_steps_that_withheld_a_draft_are_not_plain_steps():
    live = LiveTelemetry()
    before = PlainReference.measured(3.0, 0, 0.0, False, "a plain run of 32 tokens")
    live.reference = before
    events = reply([(0, 0, 0.01)] * 40)
    events = [StepVerified(e.step, 0, 0, 0, 2, 4, e.context_used) if isinstance(e, StepVerified) else e
              for e in events]
    live.consume(events)
    assert live.reference is before


def test_a_server_that_streams_text_without_ids_is_never_said_to_have_drafted_nothing():
    live = LiveTelemetry()
    live.reference = PlainReference.measured(50.0, 0, 0.0, False, "a plain run of 32 tokens")
    events = [e for e in reply([(0, 0, 0.01)] * 40) if not isinstance(e, StepVerified)]
    live.consume(events)
    assert not live.nothing_drafted and live.speedup() == pytest.approx(2.0, rel=0.01)
