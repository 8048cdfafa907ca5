"""Sampled speculation must follow the target's distribution, and a seeded run must reproduce exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from helpers import run
from specchat.engine.sampling import Dist, SamplingParams, accept_or_resample, distribution

N_VOCAB = 6
DRAWS = 40_000


def _dist(probs: list[float]) -> Dist:
    p = np.asarray(probs, dtype=float)
    ids = np.flatnonzero(p)
    return Dist(ids, p[ids] / p.sum())


P = _dist([0.05, 0.40, 0.10, 0.25, 0.20, 0.0])
Q_CASES = {
    "overlapping": _dist([0.30, 0.10, 0.30, 0.10, 0.10, 0.10]),  # q has mass where p has none
    "disjoint-ish": _dist([0.0, 0.02, 0.0, 0.0, 0.08, 0.90]),
    "identical": P,
}


def _empirical(outcomes: list[int]) -> np.ndarray:
    return np.bincount(outcomes, minlength=N_VOCAB)


def _assert_follows_p(counts: np.ndarray) -> None:
    support = P.ids
    assert counts[np.setdiff1d(np.arange(N_VOCAB), support)].sum() == 0, "emitted a token p gives zero probability"
    expected = P.probs * counts.sum()
    assert chisquare(counts[support], expected).pvalue > 1e-3


@pytest.mark.parametrize("case", list(Q_CASES))
def test_rejection_rule_reproduces_target_distribution(case):
    """Draft x ~ q, then accept with min(1, p/q) or resample from norm(max(0, p − q)): the result is ~ p."""
    q = Q_CASES[case]
    rng = np.random.default_rng(1234)
    outcomes, accepted = [], 0
    for _ in range(DRAWS):
        draft = q.sample(rng)
        ok, token = accept_or_resample(P, q, draft, rng)
        accepted += ok
        assert not ok or token == draft
        outcomes.append(token)
    _assert_follows_p(_empirical(outcomes))
    # The acceptance probability of the rule is Σ min(p, q).
    expected_rate = np.minimum(P.dense(N_VOCAB), q.dense(N_VOCAB)).sum()
    assert accepted / DRAWS == pytest.approx(expected_rate, abs=0.01)


def test_one_hot_drafts_are_judged_by_sampling_the_target():
    """Greedy and n-gram drafts carry no q: sampling y ~ p and accepting iff y == draft is exact too."""
    rng = np.random.default_rng(99)
    outcomes = []
    accepted = 0
    for _ in range(DRAWS):
        ok, token = accept_or_resample(P, None, 3, rng)
        accepted += ok
        outcomes.append(token)
    _assert_follows_p(_empirical(outcomes))
    assert accepted / DRAWS == pytest.approx(P.prob(3), abs=0.01)


def test_transform_chain_matches_definitions():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.04, 0.01], dtype=np.float32))
    plain = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    assert plain.dense(6) == pytest.approx([0.5, 0.2, 0.15, 0.1, 0.04, 0.01], rel=1e-5)
    top2 = distribution(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert top2.dense(6) == pytest.approx([5 / 7, 2 / 7, 0, 0, 0, 0], rel=1e-5)
    nucleus = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    assert sorted(nucleus.ids.tolist()) == [0, 1, 2]  # 0.5 + 0.2 < 0.8 ≤ 0.5 + 0.2 + 0.15
    minp = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert sorted(minp.ids.tolist()) == [0, 1, 2]  # kept: p ≥ 0.25 · 0.5
    hot = distribution(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    expected = np.sqrt([0.5, 0.2, 0.15, 0.1, 0.04, 0.01])
    assert hot.dense(6) == pytest.approx(expected / expected.sum(), rel=1e-5)


def test_impossible_sampling_parameters_are_refused():
    from specchat.errors import ConfigError

    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": 1.0}, {"top_k": -1}):
        with pytest.raises(ConfigError):
            SamplingParams(**bad)


@pytest.mark.parametrize("method", ["draft", "ngram", "ngram+draft"])
def test_seeded_sampled_run_reproduces_exactly(method, make_engine):
    sampling = SamplingParams(temperature=0.9, seed=7)
    prompt = "Tell me a short story about a robot who learns to paint."
    first = run(make_engine(method, sampling=sampling), prompt, max_tokens=48)
    second = run(make_engine(method, sampling=sampling), prompt, max_tokens=48)
    assert first.ids == second.ids
    assert [t.kind for t in first.tokens] == [t.kind for t in second.tokens]
    assert first.finished.stats.drafted > 0
    other = run(make_engine(method, sampling=SamplingParams(temperature=0.9, seed=8)), prompt, max_tokens=48)
    assert other.ids != first.ids, "a different seed should give a different sample"


@pytest.mark.parametrize("method, prompt", [
    ("draft", "Say one word about the weather."),
    # Copies where the prompt has a match (one-hot drafts judged by sampling the target), the draft model elsewhere.
    ("ngram+draft", "Repeat after me: red green blue, red green blue, red green blue."),
])
def test_sampled_draft_tokens_follow_the_target_end_to_end(method, prompt, make_engine):
    """On the real pair: the tokens after a fixed prefix have the same distribution with and without a draft.

    Each reply is 5 tokens; token 1 comes from the prefill (no draft), tokens 2–5 from steps whose drafts of up to
    three tokens pass through the acceptance rule — the first step judges a whole 3-token draft, so every draft
    position is judged, not only the first. At each of positions 2, 3 and 4 the draft engine's token frequencies must
    match the plain engine's (two-sample chi-square).
    """
    from scipy.stats import chi2_contingency

    sampling = SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, seed=0)
    replies: dict[str, list[list[int]]] = {}
    longest = copied = 0
    for name in ("none", method):
        engine = make_engine(name, sampling=sampling, n_max=3)
        replies[name] = []
        for _ in range(150):
            engine.new_chat()
            r = run(engine, prompt, max_tokens=5)
            replies[name].append(r.ids)
            longest = max([longest, *(s.drafted for s in r.steps)])
            copied += r.finished.stats.copied_steps
    assert longest == 3  # drafts as long as n_max were judged
    assert (copied > 20) == (method == "ngram+draft")
    for position in (1, 2, 3):
        counts = {m: {} for m in replies}
        for name, runs in replies.items():
            for ids in runs:
                key = ids[position] if len(ids) > position else -1  # -1: the reply had ended
                counts[name][key] = counts[name].get(key, 0) + 1
        keys = sorted(set(counts["none"]) | set(counts[method]),
                      key=lambda k: -(counts["none"].get(k, 0) + counts[method].get(k, 0)))
        # Pool rare outcomes so every cell has a reasonable expectation.
        common, rest = keys[:6], keys[6:]
        table = [[counts[m].get(k, 0) for k in common] + [sum(counts[m].get(k, 0) for k in rest)]
                 for m in ("none", method)]
        table = [list(col) for col in zip(*table) if sum(col) > 0]
        assert chi2_contingency(np.array(table).T).pvalue > 1e-3, (position, table)
