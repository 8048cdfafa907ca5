"""Greedy speculation must reproduce plain decoding token for token, with counters that add up."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import THREADS, Run, run

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "List five countries in Europe and their capitals.",
    "Write a short paragraph about the ocean.",
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "Fix the spelling in this text: 'Teh cat sat on teh mat and lookd at teh door.'",
    "Convert this list to uppercase: apple, banana, cherry, grape, lemon.",
    "Explain what a hash map is in two sentences.",
    "Rewrite this code with clearer names: def f(a, b): return [x for x in a if x in b]",
    "Write a haiku about autumn leaves.",
]
MAX_TOKENS = 64

VARIANTS = {
    "draft": {"method": "draft", "n_max": 4},
    "draft-pmin-nmin": {"method": "draft", "n_max": 6, "n_min": 2, "p_min": 0.3},
    "ngram": {"method": "ngram", "n_max": 4},
    "ngram+draft": {"method": "ngram+draft", "n_max": 4},
    "ngram+draft-auto": {"method": "ngram+draft", "n_max": "auto"},
    "suffix+draft": {"method": "suffix+draft", "n_max": 4},  # (no stored chats here: test_suffix.py has them)
    "suffix+draft-auto": {"method": "suffix+draft", "n_max": "auto"},  # the default profile's
}


@pytest.fixture(scope="module")
def baseline(target_path, draft_path) -> dict[str, Run]:
    from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
    from specchat.engine.core import Engine

    engine = Engine(EngineConfig(ModelSettings(target_path, threads=THREADS), spec=SpecConfig("none"), n_ctx=2048,
                                 system_prompt="You are a helpful assistant."))
    try:
        runs = {}
        for prompt in PROMPTS:
            engine.new_chat()
            runs[prompt] = run(engine, prompt, max_tokens=MAX_TOKENS)
        return runs
    finally:
        engine.close()


def check_accounting(r: Run) -> None:
    stats = r.finished.stats
    # Per step: every drafted token is either accepted or rejected, and the rejected tail is reported.
    rejected_by_step = {e.step: len(e.tokens) for e in r.rejected}
    for step in r.steps:
        assert 0 <= step.accepted <= step.drafted
        assert rejected_by_step.get(step.step, 0) == step.drafted - step.accepted
    assert stats.accepted + stats.rejected == stats.drafted
    assert stats.drafted == sum(s.drafted for s in r.steps)
    assert stats.accepted == sum(s.accepted for s in r.steps)
    assert stats.ignored == sum(s.ignored for s in r.steps)
    assert stats.steps == len(r.steps)
    # Emitted kinds agree with the summary.
    kinds = {k: sum(1 for t in r.tokens if t.kind == k) for k in ("accepted", "corrected", "bonus", "target")}
    assert kinds == stats.by_kind
    # An end-of-generation token accepted from the draft is counted, not shown.
    assert kinds["accepted"] == stats.accepted - stats.end_from_draft
    assert stats.generated == len(r.tokens)
    assert kinds["corrected"] + kinds["bonus"] <= stats.drafting_steps
    assert sum(stats.position_accepted) == stats.accepted
    assert all(a <= stats.drafting_steps for a in stats.position_accepted)
    assert stats.withheld == sum(s.withheld for s in r.steps)
    # The reply is exactly the concatenation of its token texts.
    assert r.finished.text == "".join(t.text for t in r.tokens)
    if stats.drafted:
        assert stats.acceptance_rate == pytest.approx(stats.accepted / stats.drafted)
        assert stats.mean_acceptance_length == pytest.approx(1 + stats.accepted / stats.drafting_steps)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_speculation_equals_plain_decoding(variant, baseline, make_engine, request):
    auto = variant.endswith("-auto")
    if auto:
        request.getfixturevalue("cheap_verify")
    engine = make_engine(**VARIANTS[variant])
    total_drafted = total_accepted = copied = by_model = 0
    for prompt in PROMPTS:
        engine.new_chat()
        r = run(engine, prompt, max_tokens=MAX_TOKENS)
        assert r.ids == baseline[prompt].ids, f"{variant} diverged from plain decoding on {prompt!r}"
        assert r.finished.text == baseline[prompt].finished.text
        check_accounting(r)
        total_drafted += r.finished.stats.drafted
        total_accepted += r.finished.stats.accepted
        copied += r.finished.stats.copied_steps
        by_model += r.finished.stats.drafting_steps - r.finished.stats.copied_steps
    # The comparison only means something if drafts were really verified, some accepted and some rejected.
    assert total_drafted > 50 or auto  # "auto" drafts only what it prices as paying (fewer tokens, all judged below)
    assert 0 < total_accepted < total_drafted
    if "+draft" in variant:  # copies where the chat had a match; otherwise (fixed n_max) the model
        assert copied > 2 and (by_model > 20 or auto)


def test_baseline_accounting(baseline):
    for r in baseline.values():
        check_accounting(r)
        stats = r.finished.stats
        assert stats.drafted == 0 and not stats.speculation_active
        assert "none" in stats.speculation_reason
        assert {t.kind for t in r.tokens} == {"target"}


@pytest.fixture(scope="module")
def bench_tasks():
    from specchat.bench.tasks import load_tasks

    tasks, problems = load_tasks()
    assert not problems
    return tasks


def test_long_ngram_drafts_equal_plain_decoding_on_every_bench_task(bench_tasks, make_engine):
    """Drafts of up to 64 tokens, fixed and chosen by "auto", and the combined method (copies, else the draft model),
    on the bundled benchmark's prompts (their histories included): the greedy output is plain decoding's, token for
    token."""
    engines = {name: make_engine(method, n_ctx=2048, **spec) for name, method, spec in (
        ("plain", "none", {}), ("ngram-64", "ngram", {"n_max": 64}), ("auto", "ngram", {"n_max": "auto"}),
        ("ngram+draft-8", "ngram+draft", {"n_max": 8}), ("ngram+draft-auto", "ngram+draft", {"n_max": "auto"}))}
    longest = 0
    for task in bench_tasks:
        outputs = {}
        for name, engine in engines.items():
            engine.restore(engine.messages[:1] + list(task.earlier))
            r = run(engine, task.prompt, max_tokens=task.max_tokens)
            check_accounting(r)
            outputs[name] = r.ids
            longest = max([longest] + [s.drafted for s in r.steps])
        assert outputs["ngram-64"] == outputs["plain"], f"ngram n_max 64 changed the output of {task.name}"
        for name in ("auto", "ngram+draft-8", "ngram+draft-auto"):
            assert outputs[name] == outputs["plain"], f"{name} changed the output of {task.name}"
    assert longest >= 32, "copy-heavy tasks draft long"


@pytest.mark.alone  # the split needs two threads, on two cores
def test_a_verify_batch_judges_as_plain_decoding_would_beyond_256_tokens_of_context(make_engine):
    """Speculation's exactness rests on a verify batch's rows equalling what one-at-a-time decoding computes. With
    llama.cpp's f16 KV cache the CPU computes a lone token's attention split across threads once the cache holds more
    than 256 tokens, and a batch's rows unsplit: their logits differed by up to 2.5 and the greedy token changed at 24
    rows. The engine's default cache type keeps the two identical, bit for bit, at any context length."""
    engine = make_engine("none", threads=2)
    ctx = engine.ctx
    text = engine.target.tokenize(" ".join(PROMPTS * 12), add_special=False)
    for context in (0, 100, 300, 700):
        ctx.truncate(0)
        if context:
            ctx.decode(text[:context])
        batch = text[context : context + 24]
        one_by_one = []
        for token in batch:
            ctx.decode([token])
            one_by_one.append(ctx.logits()[-1].copy())
        ctx.truncate(context)
        ctx.decode(batch, all_logits=True)
        assert np.array_equal(ctx.logits(), np.stack(one_by_one)), f"after {context} tokens of context"
