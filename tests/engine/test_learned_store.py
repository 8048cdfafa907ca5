"""What "auto" learned lasts from one process to the next (engine/draft_length/learned_store.py): kept per target in the user
cache, versioned, bounded, and never trusted when it is damaged, stale or of another version."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import numpy as np
import pytest

from helpers import run
from specchat.engine.draft_length.learned_store import MAX_ENTRIES, VERSION, LearnedStore

COPY_PROMPT = ("Repeat this list exactly, twice: apples, pears, plums, cherries, grapes, lemons, limes, figs, dates,"
               " melons, kiwis, mangoes.")


def test_kept_states_come_back(tmp_path):
    memory = LearnedStore(tmp_path / "m.json")
    memory.keep({"a": {"x": 1}, "b": [1, 2]})
    assert LearnedStore(tmp_path / "m.json").recall("a") == {"x": 1}
    assert memory.recall("b") == [1, 2] and memory.recall("c") is None


@pytest.mark.parametrize("content", [b"{not json", json.dumps([1, 2]).encode(), json.dumps({"version": VERSION + 1,
                                     "entries": {"a": {"saved": 0, "state": 1}}}).encode(), b"\x00\xff\xfe" * 10])
def test_a_damaged_file_or_another_version_is_ignored_and_replaced(tmp_path, content):
    path = tmp_path / "m.json"
    path.write_bytes(content)
    memory = LearnedStore(path)
    assert memory.recall("a") is None
    memory.keep({"a": 5})
    assert memory.recall("a") == 5


def test_a_stale_entry_is_not_trusted(tmp_path):
    path = tmp_path / "m.json"
    old = time.time() - 31 * 24 * 3600
    path.write_text(json.dumps({"version": VERSION, "entries": {"a": {"saved": old, "state": 1},
                                                                 "b": {"saved": time.time() + 3600, "state": 2},
                                                                 "c": {"saved": "yesterday", "state": 3}}}))
    memory = LearnedStore(path)
    assert [memory.recall(k) for k in "abc"] == [None, None, None]


def test_the_file_is_bounded(tmp_path):
    memory = LearnedStore(tmp_path / "m.json")
    for i in range(MAX_ENTRIES + 10):
        memory.keep({f"k{i}": i})
    entries = json.loads((tmp_path / "m.json").read_text())["entries"]
    assert len(entries) == MAX_ENTRIES
    assert memory.recall("k0") is None and memory.recall(f"k{MAX_ENTRIES + 9}") == MAX_ENTRIES + 9
    memory.keep({"k10": "again"})  # written again: the newest, not the next to go
    memory.keep({"new": 1})
    assert memory.recall("k10") == "again" and memory.recall("k11") is None


def test_an_unwritable_cache_only_means_starting_from_the_priors(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")  # unwritable for root too
    memory = LearnedStore(blocker / "specchat" / "m.json")
    memory.keep({"a": 1})  # no exception
    assert memory.recall("a") is None


def _state(engine):
    auto = engine.speculation.length
    return auto.hazards, auto.acceptance, auto.costs


def test_a_new_engine_starts_where_the_last_one_stopped(make_engine, isolated_learned_store):
    """n-gram hazards, the learned verify costs, and (for a model draft) the acceptance and draft cost: what one engine
    learned in a reply is what the next engine of the same configuration starts from; another configuration starts
    from the priors."""
    first = make_engine("ngram", n_max="auto")
    r = run(first, COPY_PROMPT, max_tokens=96)
    assert r.finished.stats.accepted > 10
    hazards, _, costs = _state(first)
    assert isolated_learned_store.is_file()
    second = make_engine("ngram", n_max="auto")
    hazards2, _, costs2 = _state(second)
    assert np.allclose(hazards2.evidence, hazards.evidence) and hazards2.evidence.sum() > 10
    assert costs2.timed == 0 and np.allclose(costs2.correction, costs.correction)
    assert np.allclose(costs2.weight, costs.weight) and costs.weight.sum() > 0
    # Another sampling is another configuration: its acceptance was never seen.
    from specchat.engine.sampling import SamplingParams
    other = make_engine("ngram", n_max="auto", sampling=SamplingParams(temperature=0.7))
    assert other.speculation.length.hazards.evidence.sum() == 0

    # The embedded pair never pays on a CPU ("auto" keeps the draft model off, so it learns no acceptance here):
    # what an engine with a pair that drafts would have kept, the next engine takes up.
    drafting = make_engine("draft", n_max="auto")
    run(drafting, "Name three colours.", max_tokens=48)
    memory = json.loads(isolated_learned_store.read_text())
    key = next(key for key in memory["entries"] if "|draft|" in key)
    state = memory["entries"][key]["state"]
    assert set(state) == {"acceptance", "draft cost"}
    state["acceptance"] = {"evidence": [40.0, 5.0], "active": False, "probe_every": 64}
    state["draft cost"]["correction"] = -0.5
    isolated_learned_store.write_text(json.dumps(memory))
    again = make_engine("draft", n_max="auto")
    assert again.speculation.length.acceptance.evidence == [40.0, 5.0] and again.speculation.length.acceptance.probe_every == 64
    assert again.speculation.length.draft_cost.seconds == pytest.approx(drafting.speculation.length.draft_cost.measured * np.exp(-0.5))
    # A sampling switched in the same engine is another configuration too: its own policies, its own key.
    from specchat.engine.sampling import SamplingParams
    auto = first.speculation.length
    first.apply(dataclasses.replace(first.config, sampling=SamplingParams(temperature=0.7)))
    assert first.speculation.length is not auto and first.speculation.length.hazards.evidence.sum() == 0 and first.speculation.length.key != auto.key


def test_a_model_drafts_policy_comes_back_whole():
    from specchat.engine.draft_length.policies import AutoDraftLength, VerifyCost

    cost = VerifyCost((1, 2, 8, 17), (0.01, 0.011, 0.014, 0.02), exact=17)
    policy = AutoDraftLength(cost, draft_cost=0.001, k_max=16)
    rng = np.random.default_rng(0)
    for _ in range(40):
        k = policy.plan()
        policy.observe(k, int(sum(rng.random(k) < 0.8)))
    again = AutoDraftLength(cost, draft_cost=0.001, k_max=16)
    assert again.restore(policy.state())
    assert (again.evidence, again.active, again.k, again.probe_every) == (policy.evidence, policy.active, policy.k,
                                                                          policy.probe_every)
    assert sum(policy.evidence) > 10
    for bad in (None, {"evidence": [1, 2, 3], "active": True, "probe_every": 16},
                {"evidence": [1, -2], "active": True, "probe_every": 16},
                {"evidence": [1, 2], "active": "yes", "probe_every": 16},
                {"evidence": [1, 2], "active": True, "probe_every": 10 ** 6}):
        assert not AutoDraftLength(cost, draft_cost=0.001, k_max=16).restore(bad)


def test_the_first_reply_of_a_new_process_drafts_like_the_last_of_the_old(make_engine, isolated_learned_store):
    """Ten replies to the same prompt in one engine (cache and remembered replies cleared each time, as a fresh
    process has them), then a new engine: it chooses every draft length as the old one would for its next reply,
    and differently from an engine that starts from the priors."""
    old = make_engine("ngram", n_max="auto")
    for _ in range(10):
        old.new_chat()
        old.clear_cache(replies=True)
        last = run(old, COPY_PROMPT, max_tokens=96)
    new = make_engine("ngram", n_max="auto")
    isolated_learned_store.unlink()
    cold = make_engine("ngram", n_max="auto")
    matches = range(2, 80)
    # Priced alike (the old engine re-prices as its costs move, every few steps): the hazards alone decide.
    curve = new.speculation.length.costs.at(0)
    for engine in (old, new, cold):
        engine.speculation.length.hazards.reprice(curve)
    lengths = [old.speculation.length.hazards.best(m)[0] for m in matches]
    assert [new.speculation.length.hazards.best(m)[0] for m in matches] == lengths
    assert [cold.speculation.length.hazards.best(m)[0] for m in matches] != lengths
    first = run(new, COPY_PROMPT, max_tokens=96)
    assert first.ids == last.ids and first.finished.stats.accepted > 10


def test_ask_keeps_what_it_learned_in_the_user_cache(tmp_path, isolated_user_dirs, user_cache):
    import subprocess

    def ask() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specchat", "ask", "--profile", "ngram", "--max-tokens", "48",
                               COPY_PROMPT], capture_output=True, text=True, timeout=300, env={**os.environ})

    first = ask()
    assert first.returncode == 0, first.stderr
    kept = json.loads((user_cache / "auto-memory.json").read_text())
    assert kept["version"] == VERSION
    assert any(key.startswith("auto|") and "|ngram|" in key for key in kept["entries"])
    assert any(key.startswith("costs|") for key in kept["entries"])
    second = ask()
    assert second.returncode == 0 and second.stdout.splitlines()[0] == first.stdout.splitlines()[0]
