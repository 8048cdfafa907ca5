"""How "auto" is fed each step (engine/draft_length/auto_length.py) and the combined drafter's choice
(engine/drafters/combined.py), on synthetic steps: what each policy learns from, which steps are plain or longer, and what is kept."""

from __future__ import annotations

import numpy as np
import pytest
from specchat.engine.draft_length.auto_length import (CALIBRATE_EVERY, EXPLORE_EVERY, EXPLORE_FROM, REPRICE_EVERY, Adaptive,
                                                 judged_against, lengthened)
from specchat.engine.draft_length.policies import VerifyCost
from specchat.engine.draft_length.learned_store import LearnedStore
from specchat.engine.drafters import METHODS, NO_DRAFT, Draft
from specchat.engine.drafters.combined import CopyThenModel
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.draft_length.learned_costs import LEARN_STEPS, LearnedVerifyCost
from specchat.engine.loop import StepOutcome
from specchat.engine.rules import Rules
from specchat.engine.sampling import SamplingParams

SWEEP = VerifyCost((1, 2, 4, 8, 16, 32, 65), (0.01, 0.018, 0.027, 0.045, 0.08, 0.16, 0.33), exact=65)
K_MAX = {"draft": 16, "ngram": 64}


def adaptive(tmp_path, method: str = "ngram+draft") -> Adaptive:
    return Adaptive.open(LearnedVerifyCost(SWEEP), METHODS[method].copies, K_MAX, 0.004 if "draft" in method else None,
                         LearnedStore(tmp_path / "memory.json"), "auto|test", "costs|test", depth=0,
                         recalls=METHODS[method].reads_stored_chats)


def step(drafted: int, accepted: int, token: int, tokens: list[int], copied: bool, match: int = 0) -> StepOutcome:
    draft = Draft(tokens[:drafted], match=match, from_text=copied) if drafted else NO_DRAFT
    return StepOutcome(drafted=drafted, n_accepted=accepted, accepted=tokens[:accepted], rejected=tokens[accepted:drafted],
                       token=token, match=match, t_verify=SWEEP(drafted + 1), t_batch=SWEEP(drafted + 1), draft=draft)


def test_a_copy_turned_down_is_judged_at_its_own_match_length(tmp_path):
    """In the combined method a copy the hazards would not verify leaves the step to the draft model; what the target
    then chose still judges the copy, in the classes of the copy's own match, not of match 0."""
    auto = adaptive(tmp_path)
    before = auto.hazards.evidence.copy()
    copy = Draft([11, 12, 13], match=6, from_text=True)
    auto.observe(step(2, 2, 13, [11, 12], copied=False), depth=10, turned_down=copy)  # the model drafted 11 12
    gained = auto.hazards.evidence - before * (1 - 1 / 256)
    classes = list(auto.hazards.edges)
    # 11 and 12 were right at effective matches 6 and 7 (class 6), 13 at 8 (class 8); nothing at the short matches.
    assert gained[classes.index(6)].tolist() == pytest.approx([2.0, 0.0])
    assert gained[classes.index(8)].tolist() == pytest.approx([1.0, 0.0])
    assert np.isclose(gained[:classes.index(6)], 0).all()


def test_copies_of_stored_chats_learn_apart_from_copies_of_the_conversation(tmp_path):
    """Method "suffix" copies from two sources that survive differently: a stored reply that answered the same question
    goes on as copied where a copy of the open chat's own text breaks. Priced by one set of hazards, the conversation's
    misses at long matches cut the stored reply's copies short too (2026-12-05: a stored reply accepted whole was
    verified 3 tokens a step). Each source learns its own, the step's fading reaches both, and both are kept."""
    auto = adaptive(tmp_path, "suffix")
    stored = (7, 42)  # (chat, message) of a stored reply
    auto.begin_reply()
    for i in range(40):  # the conversation's long copies break after two tokens; the stored reply's are all right
        auto.observe(step(4, 2, 99, [1, 2, 3, 4], copied=True, match=30), depth=i)
        outcome = step(8, 8, 9, list(range(8)), copied=True, match=30)
        outcome.draft = Draft(list(range(8)), match=30, from_text=True, origin=stored)
        auto.observe(outcome, depth=i)
    conversation = Draft(list(range(64)), match=30, from_text=True)
    recalled = Draft(list(range(64)), match=30, from_text=True, origin=stored)
    assert auto.copy_length(conversation) <= 2
    assert auto.copy_length(recalled) >= 8 and auto.in_use == auto.copy_length(recalled)
    long = list(auto.hazards.edges).index(32)  # the class of effective matches 32 to 63
    assert auto.hazards.hazards()[long] > 0.3  # the conversation's misses stayed its own
    right, wrong = auto.recalled.evidence[long]
    assert right > 20 * wrong  # and the stored reply's long copies were learned right
    # Every step fades both, judged or not; what the reply has earned is the reply's, whichever source showed it.
    before = auto.recalled.evidence.copy()
    auto.observe(step(8, 8, 9, list(range(8)), copied=True, match=30), depth=41)  # a conversation copy, all right
    assert np.allclose(auto.recalled.evidence, before * (1 - 1 / 256))
    assert auto.recalled.cap == auto.hazards.cap >= 16
    auto.keep()
    again = adaptive(tmp_path, "suffix")
    assert np.allclose(again.recalled.evidence, auto.recalled.evidence)
    assert np.allclose(again.hazards.evidence, auto.hazards.evidence)
    assert adaptive(tmp_path / "other", "ngram").recalled is None  # a method that reads no stored chats has none


def test_judged_against_what_the_target_chose():
    outcome = step(3, 1, 7, [5, 6, 9], copied=False)  # accepted 5, then the target chose 7
    assert judged_against([5, 7, 8], outcome) == [True, True]  # 5 and 7 were the target's; nothing known after
    assert judged_against([5, 8, 8], outcome) == [True, False]  # up to the first miss
    assert judged_against([], outcome) == []


def test_no_stale_copy_is_judged_on_a_step_that_proposed_nothing():
    model_calls = []

    class Model:
        blocked = ""

        def notice(self, seq): pass

        def propose(self, seq, n_max, rules):
            model_calls.append(n_max)
            return Draft([1] * n_max)

    ngram = NgramDrafter(2, 4)
    rules = Rules(SamplingParams(), np.random.default_rng(0), np.random.default_rng(1), type("V", (), {
        "n_vocab": 100, "is_eog": lambda self, t: False})())
    combined = CopyThenModel(ngram, Model(), copy_length=lambda copy: 0, model_length=lambda: 3)
    seq = [1, 2, 3, 4, 9, 1, 2, 3]  # "1 2 3" was followed by 4: a copy of 4 9 1 ... is proposed
    draft = combined.propose(seq, 8, rules)
    assert model_calls == [3] and draft.tokens == [1, 1, 1] and not draft.from_text
    assert combined.turned_down is not None and combined.turned_down.tokens[0] == 4 and combined.turned_down.match >= 3
    combined.begin_step()  # a plain step next (the engine's calibration, the reply's last token): nothing proposed
    assert combined.turned_down is None
    worth = CopyThenModel(ngram, Model(), copy_length=lambda copy: 2, model_length=lambda: 3)
    assert worth.propose(seq, 8, rules).from_text and worth.turned_down is None and model_calls == [3]


def test_plain_and_longer_steps_come_now_and_then_within_the_longest_draft(tmp_path):
    assert lengthened(8, EXPLORE_EVERY // 2, 64) == 16 and lengthened(8, EXPLORE_EVERY // 2 + 1, 64) == 8
    assert lengthened(EXPLORE_FROM - 1, EXPLORE_EVERY // 2, 64) == EXPLORE_FROM - 1  # a doubtful draft stays short
    assert lengthened(40, EXPLORE_EVERY // 2, 64) == 64  # never past the policy's longest (the sweep, exact batches)
    auto = adaptive(tmp_path, "ngram")
    for i in range(CALIBRATE_EVERY - 1):
        assert not auto.calibrating
        auto.observe(step(4, 4, 9, [1, 2, 3, 4], copied=True, match=20), depth=i)
    assert auto.calibrating  # drafting has not paused for 31 steps: the next one is plain
    auto.observe(step(0, 0, 9, [], copied=False), depth=40)
    assert not auto.calibrating


def test_a_batch_priced_too_dear_is_found_out_where_copies_are_short_for_its_price(tmp_path):
    """A busy minute timed 8-row verifies at twice their cost; the policy then verified a stored reply 3 tokens a step
    and, exploring only drafts of 4 or more, never timed a longer batch again: the price stayed and the copies stayed
    short (2026-12-05: a correction of e^0.62 at 8 rows kept "auto" at 3 tokens while the engine verified 9 rows in
    5.3 plain steps, which pays 1.7× against 3 tokens' 1.4×). A copy likely to survive twice its planned length is
    explored as long drafts are: the true price is learned and the drafts grow."""
    auto = adaptive(tmp_path, "suffix")
    for drafted in (0, 1, 3) * LEARN_STEPS:  # the small batches timed at what they cost
        auto.observe(step(drafted, drafted, 9, list(range(drafted)), copied=True, match=30), depth=0)
    for i in range(LEARN_STEPS):  # then a busy minute
        busy = step(7, 7, 9, list(range(7)), copied=True, match=30)
        busy.t_batch = 2 * SWEEP(8)
        auto.observe(busy, depth=0)
    assert auto.steps % REPRICE_EVERY == 0  # (the policies were priced after it)
    stored_reply = Draft(list(range(64)), match=30, from_text=True, origin=(7, 42))
    auto.begin_reply()
    first = auto.copy_length(stored_reply)
    assert first <= 4  # priced as the busy minute said
    lengths = []
    for i in range(256):  # the stored reply is copied right, every batch costs what the sweep said
        k, choose = auto.plan(64)
        kept = min(choose(stored_reply), 63) if choose is not None and k else 0
        lengths.append(kept)
        outcome = step(kept, kept, 9, list(range(kept)), copied=True, match=30)
        outcome.draft = Draft(list(range(kept)), match=30, from_text=True, origin=(7, 42)) if kept else NO_DRAFT
        auto.observe(outcome, depth=0)
    assert max(lengths[:EXPLORE_EVERY]) > first  # the first exploring step already drafts longer
    assert auto.copy_length(stored_reply) >= 7  # what a copy always right pays on the true curve


def test_the_draft_cost_learns_only_from_caught_up_drafts(tmp_path):
    auto = adaptive(tmp_path, "draft")
    slow = step(4, 2, 9, [1, 2, 3, 4], copied=False)
    slow.t_draft = 0.2  # the draft model read a whole new user turn first
    auto.begin_reply()
    auto.observe(slow, depth=100)
    assert auto.draft_cost.weight == 0  # the first model draft of a reply is not a caught-up one
    caught_up = step(4, 2, 9, [1, 2, 3, 4], copied=False)
    caught_up.t_draft = 4 * 0.005
    auto.observe(caught_up, depth=106)
    assert auto.draft_cost.weight == 1 and auto.draft_cost.seconds == pytest.approx(0.005)
    auto.begin_reply()
    auto.observe(slow, depth=200)
    assert auto.draft_cost.weight == 1


def test_what_is_kept_comes_back_only_for_the_same_sweep(tmp_path):
    auto = adaptive(tmp_path)
    for i in range(10):
        auto.observe(step(8, 8, 9, list(range(8)), copied=True, match=30), depth=i)
    auto.keep()
    again = adaptive(tmp_path)
    assert np.allclose(again.costs.correction, auto.costs.correction) and auto.costs.weight.sum() > 0
    assert np.allclose(again.hazards.evidence, auto.hazards.evidence) and auto.hazards.evidence.sum() > 0
    resweep = VerifyCost(SWEEP.sizes, tuple(s * 1.01 for s in SWEEP.seconds), SWEEP.exact)
    measured_again = LearnedVerifyCost(resweep)
    assert not measured_again.restore(auto.costs.state())  # corrections of another sweep would mislead this one
    for bad in ({**auto.costs.state(), "sizes": 5}, {**auto.costs.state(), "sweep": None}):
        assert not LearnedVerifyCost(SWEEP).restore(bad)
    assert not again.hazards.restore({"classes": None, "evidence": []})
    assert not again.hazards.restore({"classes": 3, "evidence": [[1, 1]]})


def test_a_draft_model_is_priced_as_slowed_as_the_targets_step(tmp_path):
    """The draft model's cost is measured as the sweep is, one token on an empty context; when the target's steps turn
    out slower (deeper context, a busier machine) the draft's slow with them. Priced at its empty-context cost, a draft
    that cannot pay looked as if it might once the target's step had slowed by half, and "auto" probed it — on
    Spec-Bench's stem-149 one probe's catch-up over the context took 0.8 s of a 4.5 s reply (the embedded pair, 0.89×
    of plain)."""
    auto = Adaptive.open(LearnedVerifyCost(SWEEP), False, K_MAX, 0.006, LearnedStore(tmp_path / "memory.json"),
                         "auto|test", "costs|test", depth=0)
    assert auto.acceptance.hopeless  # even a draft always right would not run faster than plain decoding
    for i in range(40):
        plain = step(0, 0, 9, [], copied=False)
        plain.t_batch = 1.5 * SWEEP(1)
        auto.observe(plain, depth=0)
    slowed_by = auto.costs.at(0)(1) / SWEEP(1)
    assert slowed_by > 1.4
    assert auto.acceptance.draft_cost == pytest.approx(0.006 * slowed_by)
    assert auto.acceptance.hopeless and auto.plan(16)[0] == 0  # and no probe: the pair still cannot pay
