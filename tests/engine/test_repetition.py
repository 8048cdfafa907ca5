"""A reply stuck in a loop stops (engine/repetition.py): the rule on worked examples, in the engine with every drafter
(greedy output with speculation stays plain decoding's, cut at the same token, the counters adding up), in profiles
and in ``specchat bench``. Every backend kind and both front ends: test_conformance.py and
test_conformance_front_ends.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import llama_cpp as lc
import pytest
from helpers import THREADS, cli, first_loop, LIMIT, loop_cut, LOOPS, run
from specchat.engine.events import TokenKind
from specchat.engine.repetition import LoopRule, LoopWatch
from specchat.errors import ConfigError
from specchat.profiles import parse_profile, run_config


def watched(ids: list, rule: LoopRule = LoopRule()) -> tuple[int, int] | None:
    watch = LoopWatch(rule)
    for n, token in enumerate(ids, start=1):
        if watch.add(token):
            return n, watch.span
    return None


def test_the_rule_on_worked_examples():
    assert LoopRule().longest_span == 170  # 3 copies, 48 tokens at least, spans up to 512 // 3 tokens
    assert watched([7, 8, 9] * 30) == (48, 3)  # "código de " — 16 copies make the 48 tokens
    assert watched(list(range(100)) * 3) == (300, 100)  # a 100-token paragraph a third time
    assert watched(list(range(171)) * 3) is None  # a span longer than window // repeats is not looked for
    assert watched([1, 2] * 23) is None  # a 46-token refrain is short of 48
    assert watched(list(range(60)) * 2 + list(range(59))) is None  # two copies and most of a third
    numbers = [t for i in range(100) for t in (i, 11)]  # "1, 2, 3, …": alike in shape, not verbatim
    assert watched(numbers) is None
    rng = random.Random(0)
    cycles = [rng.randrange(3) for _ in range(40)] + [5, 6, 7, 8, 9, 10, 11] * 20
    assert watched(cycles) == first_loop(cycles) == (40 + 48, 7)
    assert watched(["a", "b"] * 30, LoopRule(repeats=2, min_tokens=4, window=8)) == (4, 2)  # any hashable token
    watch = LoopWatch(LoopRule(repeats=2, min_tokens=4, window=8))
    ended = [watch.add(t, whole) for t, whole in zip("abababab", (True,) * 3 + (False, False, True, True, True))]
    assert ended == [False, False, False, False, False, True, True, True]  # seen at the 4th, ended at a whole one


def test_the_rule_agrees_with_its_words_on_generated_replies():
    """Replies made of random spans, each repeated one to five times back to back (loops, near-loops, refrains):
    LoopWatch stops where the rule's words, read literally, say — and for loose rules too."""
    rng = random.Random(7)
    loops = 0
    for case in range(300):
        rule = LoopRule(rng.choice((2, 3, 4)), rng.choice((4, 12, 48)), rng.choice((48, 120, 512)))
        reply: list[int] = []
        while len(reply) < 160:
            span = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]  # a small alphabet: chance repeats too
            reply += span * rng.choice((1, 1, 2, 3, 5))
        expected = first_loop(reply, rule)
        assert watched(reply, rule) == expected, (case, rule)
        loops += expected is not None
    assert 30 < loops < 290  # both kinds of reply were met


@pytest.mark.parametrize("args, message", [
    ((1, 48, 512), "loop_repeats must be ≥ 2"),
    ((3, 1, 512), "loop_min_tokens must be ≥ 2"),
    ((3, 48, 40), "loop_window (40) must be at least loop_min_tokens (48)"),
])
def test_impossible_rules_are_one_line(args, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LoopRule(*args)


PROFILE = """[target]
model = "embedded:target"
[draft]
method = "none"
[chat]
"""


def test_profiles_turn_the_rule_on_by_default_and_off_by_hand(tmp_path):
    assert run_config(parse_profile(PROFILE, name="p")).loop == LoopRule()
    tuned = parse_profile(PROFILE + "loop_repeats = 4\nloop_min_tokens = 64\nloop_window = 400\n", name="p")
    assert run_config(tuned).loop == LoopRule(4, 64, 400)
    assert run_config(parse_profile(PROFILE + "stop_on_loop = false\n", name="p")).loop is None
    with pytest.raises(ConfigError, match=r"profile p: loop_window \(30\) must be at least loop_min_tokens \(48\)"):
        run_config(parse_profile(PROFILE + "loop_window = 30\n", name="p"))
    with pytest.raises(ConfigError, match=r"<profile>:6: \[chat\] stop_on_loop.*true"):
        parse_profile(PROFILE + 'stop_on_loop = "yes"\n', name="p")


@pytest.fixture(scope="module")
def plain_replies(target_path) -> dict[str, list[int]]:
    """Plain decoding without the rule, to the limit: what every reply, cut, must be a prefix of."""
    from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
    from specchat.engine.core import Engine

    engine = Engine(EngineConfig(ModelSettings(target_path, threads=THREADS), spec=SpecConfig("none"), n_ctx=2048,
                                 system_prompt="You are a helpful assistant."))
    try:
        replies = {}
        for prompt in LOOPS:
            engine.new_chat()
            replies[prompt] = run(engine, prompt, max_tokens=LIMIT).ids
        return replies
    finally:
        engine.close()


@pytest.mark.parametrize("method, spec", [("none", {}), ("draft", {"n_max": 4}), ("draft", {"n_max": 8}),
                                          ("ngram", {"n_max": 6}), ("ngram", {"n_max": "auto"}),
                                          ("draft", {"n_max": "auto"})])
def test_every_drafter_stops_at_plain_decodings_loop(make_engine, plain_replies, method, spec):
    """A step that completes the loop midway ends the reply there; the step still counts as verified."""
    from dataclasses import replace

    engine = make_engine(method, **spec)
    engine.apply(replace(engine.config, loop=LoopRule()))
    cut_midway = 0
    for prompt in LOOPS:
        engine.new_chat()
        reply = run(engine, prompt, max_tokens=LIMIT)
        plain = plain_replies[prompt]
        n, span = loop_cut(plain, engine.target.piece)
        stats = reply.finished.stats
        assert reply.ids == plain[:n] and reply.finished.finish_reason == "loop"
        assert (stats.loop_span, stats.loop_tokens) == (span, max(3 * span, 48))
        assert stats.accepted + stats.rejected == stats.drafted == sum(s.drafted for s in reply.steps)
        # The step counts as far as it was shown: every accepted draft token is on screen, every rejected one in a
        # tail, and the kinds add up to what was shown.
        assert stats.accepted == sum(s.accepted for s in reply.steps) == sum(
            t.kind == TokenKind.ACCEPTED for t in reply.tokens)
        assert stats.rejected == sum(len(r.tokens) for r in reply.rejected)
        assert sum(stats.by_kind.values()) == stats.generated == len(reply.tokens)
        last = reply.steps[-1]
        if reply.tokens[-1].kind == TokenKind.ACCEPTED:  # cut inside the step's accepted tokens
            assert last.drafted == last.accepted and all(r.step != last.step for r in reply.rejected)
            cut_midway += 1
        assert reply.finished.text == engine.target.detokenize(plain[:n])
        # The conversation holds the reply as shown, not what its last step verified beyond it (the next turn's
        # exactness on every backend: test_conformance.py).
        assert engine.messages[-1].tokens == plain[:n]
        # The KV cache holds that conversation and nothing of the step beyond the cut, as llama.cpp itself says.
        cached = engine.ctx.cached
        assert cached == engine.tokens[:len(cached)] and len(cached) >= len(engine.tokens) - 1
        assert lc.llama_memory_seq_pos_max(lc.llama_get_memory(engine.ctx.ptr), 0) == len(cached) - 1
    if method != "none" and spec["n_max"] != "auto":  # ("auto" drafts as short as pays: not always past the loop)
        assert cut_midway  # the case the rule's placement exists for was met at least once


def test_a_reply_without_the_rule_runs_to_the_limit(make_engine, plain_replies):
    engine = make_engine("draft", n_max=4)  # EngineConfig's own default: no rule
    reply = run(engine, LOOPS[0], max_tokens=LIMIT)
    assert reply.ids == plain_replies[LOOPS[0]] and reply.finished.finish_reason == "length"


LOOP_TASKS = "".join(f'[[task]]\nname = "loop{i}"\nmax_tokens = {LIMIT}\nprompt = "{p}"\n\n' for i, p in enumerate(LOOPS))


def test_bench_applies_the_rule_to_every_runner(tmp_path: Path):
    """The profile's rule cuts specchat's arms and the llama-cpp-python peer at the same token, so "same output" still
    compares like with like."""
    tasks = tmp_path / "tasks.toml"
    tasks.write_text(LOOP_TASKS)
    out = tmp_path / "report.json"
    result = cli("bench", "--profile", "tiny", "--repeat", "1", "--json", str(out), "--tasks", str(tasks),
                 "--peers", "llama-cpp-python")
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    measured = [r for r in report["runs"] if r["rep"] == 0]
    loops = 0
    for task in ("loop0", "loop1", "loop2"):
        runs = {r["runner"]: r for r in measured if r["task"] == task}
        spec, plain, peer = runs["specchat draft"], runs["specchat none"], runs["llama-cpp-python"]
        assert spec["extra"]["finish_reason"] == plain["extra"]["finish_reason"]
        assert spec["tokens"] == plain["tokens"]
        looped = plain["extra"]["finish_reason"] == "loop"
        loops += looped and peer["extra"]["finish_reason"] == "loop" and len(plain["tokens"]) < LIMIT
        # llama-cpp-python decodes its own way (its own prompt path): its text differs, and its loop is cut too.
        assert peer["extra"]["finish_reason"] != "loop" or peer["generated"] < LIMIT
    assert loops >= 2  # (the default profile's system prompt talks the first one out of its loop)
    assert report["output_changed"] == []
