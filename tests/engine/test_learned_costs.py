"""Verify costs learned from the steps the engine times (engine/draft_length/learned_costs.py), on synthetic costs: a machine that
changes mid-reply, a sweep taken during a busy minute, steps preempted by another process, a deep context."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specchat.engine.draft_length.auto_length import CALIBRATE_EVERY, lengthened
from specchat.engine.draft_length.policies import AutoDraftLength, MatchHazards, VerifyCost
from specchat.engine.draft_length.learned_costs import CLIP, LEARN_STEPS, LearnedDraftCost, LearnedVerifyCost

SIZES = (1, 2, 4, 8, 16, 32, 48, 64)


def curve(per_row: float, overhead: float = 1.0) -> VerifyCost:
    """A verify of b rows costs ``overhead + per_row · (b - 1)`` plain steps of 10 ms."""
    return VerifyCost(SIZES, tuple(0.01 * (overhead + per_row * (b - 1)) for b in SIZES), exact=64)


CHEAP, DEAR = curve(0.1), curve(0.8)  # batched rows nearly free (a GPU), or nearly a step each (a busy CPU)


def ratio(cost: VerifyCost, b: int) -> float:
    return cost(b) / cost(1)


def run_hazards(truth: list[VerifyCost], sweep: VerifyCost, noise: float, rng: np.random.Generator,
                hazard: float = 0.05) -> tuple[LearnedVerifyCost, list[int], list[bool]]:
    """Copy text whose tokens are each wrong with ``hazard``, the true cost curve at step i being ``truth[i]``, with
    timing noise, and every fourth step without a match (a plain step); returns the learned costs and, per step, the
    draft length chosen and whether drafting was on."""
    learned = LearnedVerifyCost(sweep)
    policy = MatchHazards(learned.at(0), k_max=63)
    lengths, active = [], []
    for i, cost in enumerate(truth):
        k = lengthened(policy.plan(MATCH), i, policy.k_max) if i % 4 else 0  # as the engine does
        right = 0
        while right < k and rng.random() > hazard:
            right += 1
        judged = [True] * right + ([False] if right < k else [])
        policy.observe(MATCH, judged)
        learned.observe(k + 1, 0, cost(k + 1) * math.exp(rng.normal(0, noise)))
        policy.reprice(learned.at(0))
        lengths.append(k)
        active.append(policy.active)
    return learned, lengths, active


MATCH = 32


def true_gain(cost: VerifyCost, k: int, hazard: float = 0.05) -> float:
    """What a k-token copy really gains over plain decoding on ``cost`` (the expected tokens over the batch's cost)."""
    return sum((1 - hazard) ** j for j in range(k + 1)) * cost(1) / cost(k + 1)


def best_gain(cost: VerifyCost) -> float:
    return max(true_gain(cost, k) for k in range(64))


def test_the_policy_follows_costs_that_shift_mid_reply_within_a_few_steps():
    """Batched rows become four times as dear at step 60 (a neighbour takes the cores' caches, a GPU is shared): a
    few drafting steps later "auto" drafts shorter, and from then on gains at least 90 % of what the best length for
    the new costs would; the curve the sweep measured alone would have kept drafting long (and gained less)."""
    cheap, dear = curve(0.15), curve(0.6)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        learned, lengths, active = run_hazards([cheap] * 60 + [dear] * 60, cheap, noise=0.1, rng=rng)
        before = [true_gain(cheap, k) for k in lengths[30:60] if k]
        after = [true_gain(dear, k) for k in lengths[72:] if k]  # from the ninth drafting step after the change
        assert np.mean(before) >= 0.9 * best_gain(cheap)
        assert np.mean(after) >= 0.9 * best_gain(dear)
        stuck = MatchHazards(cheap, 63).best(MATCH)[0]  # the length the sweep alone keeps choosing
        assert true_gain(dear, stuck) < 0.85 * best_gain(dear)
        assert all(active)  # no flapping: copying at 5 % hazard wins on either curve, and drafting stayed on


def test_drafting_that_stops_paying_switches_off_once_and_stays_off():
    """A model draft at 60 % acceptance wins while extra rows are cheap and loses once they cost a step each: "auto"
    switches off soon after the change and does not flap back while the costs stay."""
    rng = np.random.default_rng(1)
    sweep = curve(0.1)
    learned = LearnedVerifyCost(sweep)
    policy = AutoDraftLength(learned.at(0), draft_cost=0.0005, k_max=16, prior=(60, 40))
    truth = [sweep] * 40 + [curve(1.0)] * 120
    switches, off_at = 0, None
    for i, cost in enumerate(truth):
        k = policy.plan() if i % CALIBRATE_EVERY != CALIBRATE_EVERY - 1 else 0  # as the engine does
        k = lengthened(k, i, policy.k_max)
        accepted = 0
        while accepted < k and rng.random() < 0.6:
            accepted += 1
        switches += policy.observe(k, accepted)
        learned.observe(k + 1, 0, cost(k + 1) * math.exp(rng.normal(0, 0.1)))
        switches += policy.reprice(learned.at(0), 0.0005)
        if i >= 40 and off_at is None and not policy.active:
            off_at = i
    # Within one calibration period: while it always drafts, only a plain step shows that plain steps did not slow
    # down with the rest.
    assert off_at is not None and off_at - 40 <= CALIBRATE_EVERY
    assert switches <= 3  # off once; at most one probe that turned it on and off again


def test_a_sweep_taken_under_load_is_corrected_by_the_steps_timed_after():
    """The sweep saw big batches up to twice as dear as they are (a busy minute): "auto" drafts too short at first;
    after 100 steps the learned costs are within 5 % of the truth where it drafts, and it gains more."""
    truth = curve(0.3)
    busy = VerifyCost(SIZES, tuple(truth(b) * (1 + min(b, 16) / 16) for b in SIZES), exact=64)
    assert true_gain(truth, MatchHazards(busy, 63).best(MATCH)[0]) < 0.92 * best_gain(truth)
    for seed in range(3):
        learned, lengths, _ = run_hazards([truth] * 100, busy, noise=0.08, rng=np.random.default_rng(seed))
        at = learned.at(0)
        for b in (1, lengths[-1] + 1):
            assert at(b) == pytest.approx(truth(b), rel=0.05)
        # It drafts longer than the busy sweep told it to, and gains more: how much more depends on how far the
        # untimed sizes' line reaches (benchmarks/learned_costs.py measures it on the real model).
        busy_k = MatchHazards(busy, 63).best(MATCH)[0]
        assert np.mean([true_gain(truth, k) for k in lengths[80:] if k]) > true_gain(truth, busy_k)


def test_a_preempted_step_moves_the_estimate_a_little():
    learned = LearnedVerifyCost(CHEAP)
    for _ in range(LEARN_STEPS):
        learned.observe(9, 0, CHEAP(9))
    learned.observe(9, 0, CHEAP(9) * 20)  # another process had the core for a while
    assert learned.at(0)(9) / CHEAP(9) <= math.exp(CLIP / LEARN_STEPS) * 1.05  # (the line moves a little too)
    assert learned.at(0)(9) > CHEAP(9)


def test_costs_deepen_with_the_context_by_the_measured_slope():
    slope = 1e-5  # seconds per context token per row
    learned = LearnedVerifyCost(CHEAP, depth_slope=slope)
    for _ in range(20):  # timed at a depth of 1,000 tokens: base cost plus the attention to the context
        for b in (1, 9):
            learned.observe(b, 1000, CHEAP(b) + slope * b * 1000)
    assert learned.at(0)(9) == pytest.approx(CHEAP(9), rel=0.01)  # what depth explains is not learned as base cost
    assert learned.at(2000)(9) == pytest.approx(CHEAP(9) + slope * 9 * 2000, rel=0.01)
    assert learned.at(2000).exact == CHEAP.exact  # the exactness cap is measured, never learned


def test_what_is_kept_comes_back_and_nonsense_is_refused():
    learned = LearnedVerifyCost(CHEAP)
    for _ in range(5):
        learned.observe(5, 0, CHEAP(5) * 1.5)
    again = LearnedVerifyCost(CHEAP)
    assert again.restore(learned.state()) and again.at(0) == learned.at(0)
    for bad in (None, {}, {"sizes": [1, 2], "correction": [0, 0], "weight": [1, 1]},
                {**learned.state(), "correction": [float("nan")] * len(SIZES)},
                {**learned.state(), "weight": [-1.0] * len(SIZES)}, {**learned.state(), "correction": "x"}):
        assert not LearnedVerifyCost(CHEAP).restore(bad)
    draft = LearnedDraftCost(0.002)
    for _ in range(10):
        draft.observe(4, 4 * 0.003)
    assert draft.seconds == pytest.approx(0.003, rel=0.02)
    assert LearnedDraftCost(0.002).restore(draft.state())
    assert not LearnedDraftCost(0.002).restore({"correction": 99, "weight": 1})


def test_costs_are_kept_for_this_machine_and_build_and_a_model_is_known_by_its_weights(make_engine, target_path,
                                                                                     tmp_path):
    """A verify sweep (and its exactness cap) is trusted only on the machine and llama.cpp build that measured it;
    a model file is known by its tensor data, not by its header alone (a large vocabulary fills the first MiB)."""
    import hashlib

    import llama_cpp

    from specchat.engine.llama import model_identity
    from specchat.engine.speculation import cost_key

    engine = make_engine("none")
    key = cost_key(engine.target, engine.ctx, engine.config.target)
    with open("/proc/cpuinfo") as cpuinfo:
        cpu = next(line.partition(":")[2].strip() for line in cpuinfo if line.startswith("model name"))
    assert f"cpu={cpu}" in key and "|extra_bufts=" in key
    assert hashlib.sha256(llama_cpp.llama_print_system_info()).hexdigest()[:12] in key  # the build, as llama.cpp says
    assert "gpu=" not in key  # no layer runs on a GPU here

    data = target_path.read_bytes()
    head = 1 << 20
    moved = tmp_path / "moved.gguf"
    moved.write_bytes(data)
    assert model_identity(moved) == model_identity(target_path)  # a copy, moved and renamed: the same model
    for name, other in (("new-weights.gguf", data[:head] + data[head:][::-1]),  # the same header, other weights
                        ("last-byte.gguf", data[:-1] + bytes([data[-1] ^ 1]))):
        path = tmp_path / name
        path.write_bytes(other)
        assert model_identity(path) != model_identity(target_path), name
