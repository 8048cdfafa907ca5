"""``n_max = "auto"`` on its own, with synthetic verify costs and acceptance: when it drafts, how long, and when not."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from specchat.engine.draft_length.policies import (HAZARD_CLASSES, SLOW_START, AutoDraftLength, MatchHazards, VerifyCost,
                                  expected_tokens)
from specchat.engine.draft_length.costs import CostCache, measure_verify_cost

# Verify cost of a batch of b tokens, in units of one plain step, shaped like the measured CPU curve here
# (llama-bench pp1..pp32 on SmolLM2-135M, 2 threads): each token costs more than half a plain step up to b = 4.
CPU = VerifyCost((1, 2, 4, 8, 16, 32, 64), (1.0, 1.8, 2.7, 4.05, 7.5, 14.7, 29.0))
LINEAR = VerifyCost((1, 64), (1.0, 64.0))
FLAT = VerifyCost((1, 64), (1.0, 1.3))


def simulate(policy: AutoDraftLength, acceptance: float, steps: int, rng: np.random.Generator) -> tuple[int, int, list[int]]:
    """Run ``steps`` steps whose draft tokens are each accepted with probability ``acceptance`` (given the earlier ones
    were). Returns (on/off switches, drafting steps, the draft lengths used)."""
    switches = drafting = 0
    lengths = []
    for _ in range(steps):
        k = policy.plan()
        accepted = 0
        while accepted < k and rng.random() < acceptance:
            accepted += 1
        switches += policy.observe(k, accepted)
        drafting += k > 0
        lengths.append(k)
    return switches, drafting, lengths


def test_expected_tokens_formula():
    assert expected_tokens(0.0, 4) == 1
    assert expected_tokens(1.0, 4) == 5
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_picks_no_draft_when_verifying_costs_as_much_as_decoding():
    policy = AutoDraftLength(LINEAR, draft_cost=0.0, k_max=16, prior=(99, 1))  # even at 99 % acceptance
    assert policy.plan() == 0 and not policy.active
    assert "even a perfect draft" in policy.reason


def test_picks_long_drafts_when_verifying_is_cheap_and_acceptance_high():
    policy = AutoDraftLength(FLAT, draft_cost=0.0, k_max=64, prior=(98, 2))
    assert policy.plan() >= 32 and policy.active
    cautious = AutoDraftLength(FLAT, draft_cost=0.0, k_max=64, prior=(6, 4))
    assert 0 < cautious.plan() < 16


def test_a_draft_that_costs_as_much_as_the_target_is_never_tried():
    policy = AutoDraftLength(CPU, draft_cost=0.8, k_max=16)
    switches, drafting, _ = simulate(policy, 1.0, 500, np.random.default_rng(0))
    assert drafting == 0 and not policy.active
    assert "even a perfect draft" in policy.reason


def test_switches_off_when_losing_and_back_on_when_a_probe_wins():
    rng = np.random.default_rng(1)
    policy = AutoDraftLength(CPU, draft_cost=0.0, k_max=32)
    simulate(policy, 0.2, 300, rng)
    assert not policy.active and "expected" in policy.reason
    _, drafting, _ = simulate(policy, 0.2, 1000, rng)
    assert drafting < 60, "while off, only occasional probes draft"
    simulate(policy, 0.97, 400, rng)
    assert policy.active
    _, drafting, lengths = simulate(policy, 0.97, 200, rng)
    assert drafting > 190 and np.median(lengths) >= 8


def test_probe_interval_grows_only_while_probes_lose():
    rng = np.random.default_rng(2)
    policy = AutoDraftLength(CPU, draft_cost=0.0, k_max=32)  # off at first: 50 % acceptance cannot win here
    assert not policy.active
    first = policy.probe_every
    simulate(policy, 0.1, 120, rng)
    assert not policy.active and policy.probe_every >= 4 * first  # lost probes back off
    simulate(policy, 0.98, 2000, rng)
    assert policy.active and policy.probe_every == first  # a won probe resets the interval


def test_no_flapping_at_parity():
    # Acceptance at which the best draft length is expected to run exactly as fast as plain decoding.
    parity = next(a for a in np.linspace(0.3, 0.99, 500) if AutoDraftLength.best(a, CPU, 0.0, 32)[1] >= 1.0)
    for seed in range(3):
        policy = AutoDraftLength(CPU, draft_cost=0.0, k_max=32)
        switches, _, _ = simulate(policy, float(parity), 3000, np.random.default_rng(seed))
        assert switches <= 4, f"{switches} switches in 3000 steps at parity"


# -- n-gram drafts: hazards by effective match length -------------------------------------------------------------


def copy_text(policy: MatchHazards, hazard, tokens: int, rng: np.random.Generator) -> tuple[float, list[int]]:
    """Decode ``tokens`` tokens of a text in which a copied token is wrong with probability ``hazard(M)``, M the
    effective match length before it (a wrong token breaks the copy: the next proposal starts on a 2-token match).
    Every step has a proposal, as in text that keeps copying. Returns the speed-up over plain decoding under the CPU
    curve and the draft lengths used."""
    match, made, seconds, lengths = 2, 0, 0.0, []
    while made < tokens:
        k = policy.plan(match)
        judged = []
        while len(judged) <= k:  # the draft's k positions, then the proposal's next token against the target's
            judged.append(bool(rng.random() >= hazard(match + len(judged))))
            if not judged[-1]:
                break
        accepted = min(sum(judged), k)
        policy.observe(match, judged)
        seconds += CPU(k + 1)
        made += accepted + 1
        match = match + accepted + 1 if all(judged) else 2
        lengths.append(k)
    return made * CPU(1) / seconds, lengths


def test_hazards_best_length_equals_a_direct_computation():
    """E(k) / verify(k + 1) by hand from the prior hazards, against the vectorised chooser."""
    policy = MatchHazards(CPU, k_max=40)
    edges = [e for e, _ in HAZARD_CLASSES]

    def hazard(m: int) -> float:
        return HAZARD_CLASSES[max(i for i, e in enumerate(edges) if m >= e)][1]

    for match in (0, 2, 5, 9, 14, 30, 100, 500):
        gains = []
        for k in range(41):
            survival, expected = 1.0, 1.0
            for j in range(k):
                survival *= 1 - hazard(match + j)
                expected += survival
            gains.append(expected / CPU(k + 1))
        k, gain = policy.best(match)
        assert k == int(np.argmax(gains)) and gain == pytest.approx(max(gains)), match


def test_the_chooser_that_stops_early_gives_what_scanning_every_length_gives():
    """``best`` and ``active`` stop scanning once no longer draft can win: against every length scanned by hand, over
    learned hazards, curves that are not monotone, capped lengths and a drafter's own survival."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        sizes = (1, 2, 4, 8, 16, 33)
        seconds = tuple(np.cumsum(rng.uniform(0.05, 1.2, len(sizes))))
        if trial % 2 == 0:  # a dip: the largest batch timed about as cheap as two rows
            seconds = seconds[:-1] + (seconds[1] * 1.05,)
        curve = VerifyCost(sizes, seconds)
        policy = MatchHazards(curve, k_max=32)
        for _ in range(int(rng.integers(0, 80))):
            match = int(rng.integers(0, 200))
            policy.observe(match, [bool(x) for x in rng.random(int(rng.integers(1, 12))) < rng.uniform(0.2, 1.0)])
        hazards = policy.hazards()

        for match in (0, 2, 3, 7, 30, 129, 400):
            longest = int(rng.integers(0, 33))
            survival = tuple(np.cumprod(rng.uniform(0.3, 1.0, int(rng.integers(1, 40)))))
            for cap, own in ((None, None), (longest, None), (None, survival), (longest, survival)):
                n = 32 if own is None else min(len(own), 32)
                by_hand = gains_by_hand(hazards, curve, match, n if cap is None else min(n, cap), own)
                k, gain = policy.best(match, cap, own)
                assert k == int(np.argmax(by_hand)) and gain == pytest.approx(max(by_hand)), (trial, match, cap)
        assert policy.active == any(max(gains_by_hand(hazards, curve, e, 32)) >= 1.02 for e in EDGES), trial


EDGES = [e for e, _ in HAZARD_CLASSES]


def gains_by_hand(hazards, curve: VerifyCost, match: int, n: int, survival=None) -> list[float]:
    """Expected speed-up of drafts of 0 … n tokens from ``match``, every length computed."""
    out, alive, expected = [1.0], 1.0, 1.0
    for j in range(1, n + 1):
        m = min(match, EDGES[-1]) + j - 1
        alive *= 1 - hazards[max(i for i, e in enumerate(EDGES) if m >= e)]
        expected += alive if survival is None else min(alive, survival[j - 1])
        out.append(expected * curve(1) / curve(j + 1))
    return out


def test_hazards_pick_no_draft_when_verifying_costs_as_much_as_decoding():
    policy = MatchHazards(LINEAR, k_max=32)
    for _ in range(200):
        policy.observe(32, [True] * 33)  # even copies that are always right
    assert all(policy.plan(m) == 0 for m in (2, 8, 32, 200)) and not policy.active
    assert "no match length expected to win" in policy.reason


def test_hazards_draft_long_on_long_matches_when_verifying_is_flat():
    policy = MatchHazards(FLAT, k_max=64)
    policy.observe(64, [True] * 33)  # once the reply has shown a long copy (SLOW_START)
    assert policy.plan(64) == 64 and policy.active


def test_a_reply_earns_long_drafts_whatever_the_hazards_learned_before():
    """Hazards learned on copies (kept between processes) made a free-text reply that restated the question draft 31
    tokens on its long match, one accepted: twenty plain steps' cost. A reply starts at SLOW_START and doubles from
    the runs it shows."""
    policy = MatchHazards(FLAT, k_max=64)
    for _ in range(200):
        policy.observe(32, [True] * 33)  # what earlier replies taught: long matches copy
    policy.begin_reply()
    assert policy.plan(64) == SLOW_START
    policy.observe(64, [True] * 5 + [False])
    assert policy.plan(64) == max(SLOW_START, 10)  # twice the run the reply showed
    policy.observe(64, [True] * 12)
    assert policy.plan(64) == 24
    policy.observe(64, [False])
    assert policy.plan(64) == 24  # a miss keeps what the reply earned: its copies may go on
    policy.begin_reply()
    assert policy.plan(64) == SLOW_START


def test_a_reply_unlearns_a_wrong_prior_within_a_few_judgements():
    """A memory learned on copies (short matches right every time) outweighed a free-text reply's own misses: it went
    on drafting on 2-token matches at 63 % acceptance, 0.76× of plain decoding."""
    policy = MatchHazards(CPU, k_max=62)
    for _ in range(300):
        policy.observe(2, [True] * 4)  # earlier replies: every short match copied on
    policy.begin_reply()
    assert policy.plan(2) > 0  # the prior still says a short match pays: a copying reply need not relearn it
    for _ in range(6):
        policy.observe(2, [False])  # this reply: its short matches are wrong
    assert policy.plan(2) == 0


class Threshold:
    """A fixed rule to compare with: draft ``k`` tokens whenever the match is at least ``shortest`` long."""

    def __init__(self, shortest: int, k: int) -> None:
        self.shortest, self.k = shortest, k

    def plan(self, match: int) -> int:
        return self.k if match >= self.shortest else 0

    def observe(self, match: int, judged: list[bool]) -> bool:
        return False


def test_a_copying_text_earns_drafts_on_long_matches_and_none_on_short_ones():
    def copying(m: int) -> float:  # a 2-token match is a coin toss; from 8 tokens on the reply copies
        return 0.5 if m < 8 else 0.01

    policy = MatchHazards(CPU, k_max=62)
    speed, _ = copy_text(policy, copying, 4000, np.random.default_rng(4))
    assert policy.plan(2) == 0 and policy.plan(16) >= 8
    # As fast as the best fixed rule chosen knowing the text's hazards, within noise.
    best_rule = max(copy_text(Threshold(8, k), copying, 4000, np.random.default_rng(4))[0] for k in (4, 8, 16, 32))
    assert speed > 1.15 and speed >= 0.9 * best_rule, (speed, best_rule)


def test_free_text_is_not_slowed_down():
    rng = np.random.default_rng(5)
    policy = MatchHazards(CPU, k_max=62)
    speed, lengths = copy_text(policy, lambda m: 0.8, 3000, rng)
    assert speed >= 0.97 and sum(k > 0 for k in lengths) < 0.05 * len(lengths)


def test_plain_steps_teach_the_hazards_without_drafting():
    """A class that drafts nothing still learns: the target's token judges the proposal's first token for free."""
    policy = MatchHazards(CPU, k_max=62)
    for _ in range(50):
        policy.observe(4, [False])
    assert policy.plan(4) == 0
    for _ in range(300):
        assert policy.observe(4, [True]) is False  # speculation stays on throughout (long matches would draft)
    assert policy.plan(4) > 0


def test_a_judged_draft_teaches_every_match_length_it_passed():
    policy = MatchHazards(CPU, k_max=62)
    before = policy.hazards()
    policy.observe(4, [True] * 20 + [False])  # right at effective matches 4 … 23, wrong at 24
    after = policy.hazards()
    edges = [e for e, _ in HAZARD_CLASSES]
    for i, shortest in enumerate(edges):
        if 4 <= shortest <= 23:
            assert after[i] < before[i], shortest
        elif shortest == 24:
            assert after[i] > before[i]
        else:
            assert after[i] == pytest.approx(before[i])


def test_cost_cache_is_remeasured_when_corrupt_stale_or_for_another_key(tmp_path):
    path = tmp_path / "costs.json"
    calls = []

    def measure() -> VerifyCost:
        calls.append(1)
        return VerifyCost((1, 2), (0.01, 0.015))

    cache = CostCache(path, max_age_s=3600)
    assert cache.get("model-a", measure) == VerifyCost((1, 2), (0.01, 0.015)) and len(calls) == 1
    assert cache.get("model-a", measure) and len(calls) == 1  # fresh: trusted
    cache.get("model-b", measure)
    assert len(calls) == 2  # another model, threads or backend: measured
    path.write_text("{not json")
    assert cache.get("model-a", measure) and len(calls) == 3  # corrupt: measured again, never trusted
    data = json.loads(path.read_text())
    data["model-a"]["measured"] = time.time() - 7200
    path.write_text(json.dumps(data))
    cache.get("model-a", measure)
    assert len(calls) == 4  # stale
    data = json.loads(path.read_text())
    data["model-a"]["seconds"] = [0.01, -5]
    path.write_text(json.dumps(data))
    cache.get("model-a", measure)
    assert len(calls) == 5  # impossible figures: measured again
    data = json.loads(path.read_text())
    data["model-a"]["exact"] = 3  # exact up to a batch size that was never measured
    path.write_text(json.dumps(data))
    cache.get("model-a", measure)
    assert len(calls) == 6


def test_a_copy_scored_by_frequency_is_priced_by_the_lower_of_its_own_chance_and_the_hazards():
    """Three earlier reports went on with three different cities after "City:": the match is long, so the hazards
    alone would verify the copy, but its own chance is one in three — on this CPU's curve a loss, on a flat one a
    gain. Where earlier replies all agree, the hazards decide as before."""
    cpu = MatchHazards(CPU, k_max=32)
    for _ in range(50):
        cpu.observe(32, [True] * 8)  # copies on long matches have been right
    assert cpu.plan(32) > 0
    assert cpu.plan(32, (1 / 3,)) == 0
    assert cpu.plan(32, (1.0, 1.0, 1.0, 1.0)) == min(cpu.plan(32), 4)
    flat = MatchHazards(FLAT, k_max=32)
    flat.observe(32, [True] * 8)
    assert flat.plan(32, (1 / 3,)) == 1
    k, gain = cpu.best(32, survival=(0.9, 0.5, 0.2))
    right = 1 - cpu.hazards()[-1]  # the last class: every effective match from 32 on
    expected = [1, 1 + min(right, 0.9), 1 + min(right, 0.9) + min(right ** 2, 0.5),
                1 + min(right, 0.9) + min(right ** 2, 0.5) + min(right ** 3, 0.2)]
    speeds = [e * CPU(1) / CPU(i + 1) for i, e in enumerate(expected)]
    assert k == int(np.argmax(speeds)) and gain == pytest.approx(max(speeds))


def test_a_stalled_sweep_batch_is_measured_again_and_never_priced_above_its_tokens_one_by_one(make_engine, tmp_path):
    """Found on a fresh machine: the first 8-row batch of the sweep stalled 3.5 s (a compile beside it), the curve is
    kept non-decreasing, so every larger batch was priced at 3.5 s too — 234 plain steps for 8 rows — and kept in the
    user cache for a week: "auto" never drafted 8 tokens again, so no step ever taught it otherwise (Spec-Bench's
    summarization and RAG ran at 1.00 tokens a step). A batch is measured beside its tokens decoded one at a time: one
    slower than that is measured again, and never priced above it; a cached curve that does so is measured again."""
    engine = make_engine("none")
    ctx, token = engine.ctx, max(engine.target.bos, 0)
    decode = ctx.decode
    stalled = []

    def stalls_once(tokens, **kwargs):  # a busy neighbour, once: the one thing a test cannot make happen on demand
        if len(tokens) == 8 and not stalled:
            stalled.append(True)
            time.sleep(1.0)
        return decode(tokens, **kwargs)

    ctx.decode = stalls_once
    try:
        cost = measure_verify_cost(ctx, token, (1, 2, 4, 8, 16))
    finally:
        ctx.decode = decode
    assert stalled
    assert cost(8) < 0.5 and cost(16) < 0.5  # 8 and 16 plain steps of a few ms, not the stall
    assert all(cost(b) <= b * cost(1) * 1.5 for b in (2, 4, 8, 16))

    calls = []
    poisoned = VerifyCost((1, 2, 4, 8, 16), (0.0148, 0.0247, 0.0472, 3.46, 3.46), exact=16)  # as it was kept

    def measure() -> VerifyCost:
        calls.append(1)
        return cost

    cache = CostCache(tmp_path / "costs.json", max_age_s=3600)
    cache.get("k", lambda: poisoned)
    assert cache.get("k", measure) == cost and calls == [1]  # 8 rows at 234 plain steps: not trusted
