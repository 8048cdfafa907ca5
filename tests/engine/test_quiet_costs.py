"""A busy minute must not decide for a week (issue #47): a timing taken while other processes kept the cores busy
serves its own process only, and a kept curve a quiet probe contradicts is measured again. The busy window is made
here, by busy loops beside the sweep, and the kept curve is written as a busy start wrote one."""

from __future__ import annotations

import json
import time

import pytest
from helpers import BusyLoops

from specchat.engine.draft_length import costs
from specchat.engine.draft_length.policies import VerifyCost
from specchat.engine.draft_length.costs import CostCache, measure_verify_cost, probe_verify_cost

SIZES = (1, 2, 4, 8, 16)
# An engine timed beside the busy loops decodes with one thread: two threads of ours beside two loops on two cores
# stall at every barrier (6.6 tok/s against 68 with one, engine/cpu.py), and the sweeps here would take minutes. What
# is kept or not, and why, is the same at any thread count; a quiet engine that must find a busy one's curve (or not)
# runs with the same count, since curves are kept per thread count. In a test worker pinned to one core
# (tests/machine_share.py) the loops and the engine's thread share that core: the loops keep about two thirds of it
# busy, above QUIET_OTHERS (half a core).
BUSY_THREADS = 1


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test starts as a new process would: nothing timed in a busy window, no kept curve probed yet."""
    monkeypatch.setattr(costs, "_busy", {})
    monkeypatch.setattr(costs, "_probed", set())


@pytest.fixture
def busy_loops():
    loops = BusyLoops()
    yield loops
    loops.stop()


def test_a_sweep_timed_beside_busy_loops_serves_this_process_only(make_engine, tmp_path, busy_loops):
    engine = make_engine("none", threads=BUSY_THREADS)
    ctx, token = engine.ctx, max(engine.target.bos, 0)
    path = tmp_path / "costs.json"
    calls = []

    def measure() -> VerifyCost:
        calls.append(1)
        return measure_verify_cost(ctx, token, SIZES)

    cost = CostCache(path).get("target", measure)
    assert not path.exists() or "target" not in json.loads(path.read_text())  # never for the next process
    assert costs.busy_timings()["target"] >= costs.QUIET_OTHERS
    assert CostCache(path).get("target", measure) == cost and calls == [1]  # this process: measured once
    slope = CostCache(path).get_slope("slope", lambda: 1e-6)
    assert slope == 1e-6 and (not path.exists() or "slope" not in json.loads(path.read_text()))
    busy_loops.stop()
    costs._busy.clear()  # the next process, on a quiet machine
    CostCache(path).get("target", measure)
    CostCache(path).get_slope("slope", lambda: 1e-6)
    assert set(json.loads(path.read_text())) == {"target", "slope"} and calls == [1, 1]


def test_a_kept_curve_from_a_busy_start_is_found_out_by_a_quiet_probe(make_engine, tmp_path):
    """As a start beside a compile kept it: 8 and 16 rows priced at 3× their quiet cost, within what looks possible."""
    engine = make_engine("none")
    ctx, token = engine.ctx, max(engine.target.bos, 0)
    quiet = measure_verify_cost(ctx, token, SIZES)
    poisoned = VerifyCost(SIZES, quiet.seconds[:3] + tuple(3 * s for s in quiet.seconds[3:]), quiet.exact)
    path = tmp_path / "costs.json"
    CostCache(path).get("target", lambda: poisoned)
    costs._probed.clear()  # the next process
    probe = probe_verify_cost(ctx, token)
    assert not probe(poisoned) and probe(quiet)
    measured = CostCache(path).get("target", lambda: measure_verify_cost(ctx, token, SIZES), probe)
    assert measured(8) < poisoned(8) / 1.5
    assert json.loads(path.read_text())["target"]["seconds"] == list(measured.seconds)  # the quiet one is kept


def test_a_probe_in_a_busy_window_leaves_a_kept_curve_alone(make_engine, tmp_path, busy_loops):
    engine = make_engine("none")
    ctx, token = engine.ctx, max(engine.target.bos, 0)
    kept = VerifyCost(SIZES, (0.01, 0.012, 0.015, 0.02, 0.03), 16)
    path = tmp_path / "costs.json"  # as a quiet start kept it
    path.write_text(json.dumps({"target": {"sizes": list(kept.sizes), "seconds": list(kept.seconds),
                                           "exact": kept.exact, "measured": time.time()}}))
    before = path.read_text()
    called = []
    assert CostCache(path).get("target", lambda: called.append(1) or kept, probe_verify_cost(ctx, token)) == kept
    assert not called and path.read_text() == before


def kept_curves(path) -> dict:
    return {key: entry for key, entry in json.loads(path.read_text()).items() if "seconds" in entry}


def test_after_a_busy_start_the_next_one_on_a_quiet_machine_drafts_again(make_engine, tmp_path, monkeypatch):
    """The issue's week: a start beside a compile kept its sweep, and every later start said "even a perfect draft
    could not win here". Now the busy start's sweep is its own, and says so; the next, quiet, start times its own."""
    from specchat import paths

    monkeypatch.setattr(paths, "verify_costs_file", lambda: tmp_path / "costs.json")
    loops = BusyLoops()
    try:
        busy = make_engine("ngram", n_max="auto", threads=BUSY_THREADS)
        assert any("timed while other processes kept" in note for note in busy.notes)
    finally:
        loops.stop()
    assert not (tmp_path / "costs.json").exists() or not kept_curves(tmp_path / "costs.json")
    costs._busy.clear()  # the next process
    quiet = make_engine("ngram", n_max="auto", threads=BUSY_THREADS)
    assert not any("timed while other processes kept" in note for note in quiet.notes)
    assert kept_curves(tmp_path / "costs.json") and quiet.speculation_state().active


def test_a_curve_kept_by_a_busy_start_of_an_earlier_version_is_timed_again(make_engine, tmp_path, monkeypatch):
    """Written as the issue's busy start wrote it: 8 rows and more at four times their quiet price, within what a
    curve may claim (a batch at most two plain steps a row), so nothing but timing it can tell."""
    from specchat import paths

    path = tmp_path / "costs.json"
    monkeypatch.setattr(paths, "verify_costs_file", lambda: path)
    make_engine("ngram", n_max="auto")
    entries = json.loads(path.read_text())
    for entry in entries.values():
        if "seconds" in entry and len(entry["seconds"]) > 1:
            one = entry["seconds"][0]
            entry["seconds"] = [s if b < 8 else min(4 * s, 2 * b * one) for b, s in zip(entry["sizes"], entry["seconds"])]
    path.write_text(json.dumps(entries))
    poisoned = kept_curves(path)
    costs._probed.clear()  # the next process
    engine = make_engine("ngram", n_max="auto")
    assert kept_curves(path) != poisoned
    assert engine.speculation.verify(16) < min(e["seconds"][e["sizes"].index(16)] for e in poisoned.values()) / 1.5


def poison(path) -> dict:
    """Every batch of two rows or more at two plain steps a row: the dearest a kept curve may claim, and a curve on
    which no draft can win (as a start beside a compile priced it)."""
    entries = json.loads(path.read_text())
    for entry in entries.values():
        if "seconds" in entry and len(entry["seconds"]) > 1:
            one = entry["seconds"][0]
            entry["seconds"] = [one if b == 1 else 2 * b * one for b in entry["sizes"]]
    path.write_text(json.dumps(entries))
    return kept_curves(path)


def trusted_at_start(path) -> None:
    """As when the start's probe ran in a busy window: the kept curve is used as it is."""
    for key in kept_curves(path):
        costs._probed.add((path, key))


STORY = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def test_off_is_not_for_good_a_probe_between_replies_times_the_curve_again(make_engine, tmp_path, monkeypatch):
    from specchat import paths
    from specchat.engine import speculation
    from helpers import run

    path = tmp_path / "costs.json"
    monkeypatch.setattr(paths, "verify_costs_file", lambda: path)
    make_engine("ngram", n_max="auto")
    poisoned = poison(path)
    costs._probed.clear()
    trusted_at_start(path)
    engine = make_engine("ngram", n_max="auto")
    state = engine.speculation_state()
    assert not state.active and "timed again now and then, between replies (at most 2% of the time)" in state.reason
    plain = make_engine("none")
    expected = run(plain, STORY, max_tokens=120)
    first = run(engine, STORY, max_tokens=120)
    assert first.finished.stats.drafted == 0
    assert kept_curves(path) == poisoned  # a short reply has not paid for a probe at 2 %
    monkeypatch.setattr(speculation, "RETIME_SHARE", 1.0)  # the mechanism, not its price (benchmarks/busy_start.py)
    engine.new_chat()
    again = run(engine, STORY, max_tokens=120)
    assert kept_curves(path) != poisoned and again.finished.stats.speculation_active  # on for the next reply
    engine.new_chat()
    third = run(engine, STORY, max_tokens=120)
    assert third.finished.stats.drafted > 0
    assert [t.token for t in third.tokens] == [t.token for t in expected.tokens]  # the same reply, now drafted


def test_a_curve_timed_in_a_busy_window_is_probed_after_the_first_quiet_reply(make_engine, tmp_path, monkeypatch):
    from specchat import paths
    from helpers import run

    path = tmp_path / "costs.json"
    monkeypatch.setattr(paths, "verify_costs_file", lambda: path)
    loops = BusyLoops()
    try:
        engine = make_engine("ngram", n_max="auto", threads=BUSY_THREADS)
        assert costs.busy_timings()
        if not engine.speculation_state().active:
            assert "timed while other processes kept the cores busy" in engine.speculation_state().reason
    finally:
        loops.stop()
    run(engine, STORY, max_tokens=60)
    assert not costs.busy_timings() and kept_curves(path)  # confirmed or timed again, quietly: kept now


def test_a_plain_reference_taken_beside_busy_loops_is_not_compared_and_is_run_again(make_engine):
    """A start beside a compile: its plain run read 3.5-37 tok/s where A/B then read 147, and a reply that drafted
    every step showed 1.6-17× "vs plain" (benchmarks/plain_reference.py --busy-start 2). The run is marked, divides
    nothing, and is run again after the first reply on a quiet machine."""
    from helpers import run
    from specchat.engine.draft_length.costs import QUIET_OTHERS
    from specchat.engine.events import PlainMeasured, ReplyFinished
    from specchat.telemetry.live import LiveTelemetry

    loops = BusyLoops()
    try:
        engine = make_engine("ngram", n_max=4)
        busy = engine.plain_reference()
    finally:
        loops.stop()
    assert busy is not None and busy.busy >= QUIET_OTHERS
    live = LiveTelemetry()
    live.reference = busy
    assert live.plain_tps is None and live.plain_source.startswith("not compared — the plain run was taken while")
    reply = run(engine, STORY, max_tokens=40)
    measured = [e for e in reply.events if isinstance(e, PlainMeasured)]
    assert len(measured) == 1 and isinstance(reply.events[-1], ReplyFinished)
    live.consume(reply.events)
    # Faster than the busy run at the same depth (like for like): how much faster is the machine's, not the test's
    # (1.5× at the busy run's own depth failed once in a full run: 56.4 tok/s at depth 91 against 40.8 at depth 16).
    assert live.reference.busy is None and live.plain_tps > busy.tps_at(live.reference.depth)
    assert "after the last reply" in live.plain_source
    again = run(engine, STORY, max_tokens=40)
    assert not any(isinstance(e, PlainMeasured) for e in again.events)  # once
