"""A busy machine: the engine decodes with the threads other processes leave it, and the output does not change."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pytest

from helpers import BusyLoops, on_cores, run
from specchat.engine import cpu
from specchat.engine.cpu import CpuSample, ThreadGovernor, others_cores
from specchat.engine.draft_length.costs import watched
from specchat.engine.engine_config import default_threads
from specchat.engine.events import ThreadsAdjusted
from specchat.engine.llama import Context, Model


def test_others_cores_is_all_busy_time_less_our_own():
    before = CpuSample(when=10.0, busy_s=100.0, ours_s=20.0)
    after = CpuSample(when=12.0, busy_s=103.6, ours_s=20.4)  # 3.6 core-seconds in 2 s, 0.4 of them ours
    assert others_cores(before, after) == pytest.approx(1.6)
    assert others_cores(after, after) == 0.0
    moved = CpuSample(when=13.0, busy_s=50.0, ours_s=20.5, cores=frozenset({1}))  # counted on other cores now
    assert others_cores(after, moved) is None


@pytest.mark.alone  # a loop on the core this process may not run on, then on the one it may: nothing else running
def test_a_process_pinned_to_one_core_decodes_with_one_thread_and_counts_that_core_only():
    """As under ``taskset`` or a container's cpuset: a loop on a core this process cannot use takes nothing from its
    threads. The machine-wide figure (the first line of /proc/stat, what the check read before) counts it as busy."""
    everywhere = os.sched_getaffinity(0)
    if len(everywhere) < 2:
        pytest.skip("one core: nothing to pin apart")
    ours, other = sorted(everywhere)[:2]
    loops = BusyLoops(1)
    loop = loops.loops[0].pid
    try:
        os.sched_setaffinity(loop, {other})
        time.sleep(0.3)
        with on_cores({ours}):
            assert default_threads() == 1 and cpu.cores() == 1
            assert watched(lambda: time.sleep(1.0))[1] < 0.3
        assert watched(lambda: time.sleep(1.0))[1] > 0.7  # what the whole machine shows
        os.sched_setaffinity(loop, {ours})
        time.sleep(0.3)
        with on_cores({ours}):
            assert watched(lambda: time.sleep(1.0))[1] > 0.7
    finally:
        loops.stop()


def test_the_governor_gives_back_cores_to_others_and_takes_them_again(monkeypatch):
    """Two cores, two threads allowed; each check sees what other processes used over the last second."""
    monkeypatch.setattr(cpu, "CHECK_EVERY_S", 0.0)
    others = iter([0.0, 0.1, 1.8, 1.0, 1.0, 0.2, 0.0, 1.2])  # the first is the sample taken at start
    clock = {"t": 0.0, "busy": 0.0}

    def sample() -> CpuSample:  # one second later, others used the next figure and we used 0.3 of a core
        clock["t"] += 1.0
        clock["busy"] += next(others, 0.0) + 0.3
        return CpuSample(clock["t"], clock["busy"], 0.3 * clock["t"])

    clock["t"], clock["busy"] = -1.0, -0.3  # the first sample lands on 0 s
    applied = []
    governor = ThreadGovernor(2, applied.append, n_cores=2, sample=sample)
    counts = []
    for _ in range(7):
        governor.check()
        counts.append(governor.threads)
    # 0.1 busy: 2 stay · 1.8: 1 · 1.0: still 1 (one free core is one thread) · 1.0 · 0.2: 2 again · 0.0 · 1.2: 1
    assert counts == [2, 1, 1, 1, 2, 2, 1]
    assert applied == [1, 2, 1]
    assert governor.oversubscribed


def test_the_thread_count_does_not_change_the_logits(target_path):
    """What makes adapting safe: 1 and 2 threads give bit-identical logits, prefill and one token at a time."""
    model = Model(target_path)
    tokens = model.tokenize("The lighthouse keeper opened the bottle and read", add_special=True)
    results = []
    for threads in (1, 2):
        ctx = Context(model, n_ctx=256, threads=threads)
        ctx.decode(tokens, all_logits=True)
        prefill = ctx.logits().copy()
        steps = []
        for _ in range(24):
            token = int(np.argmax(ctx.logits()[-1]))
            ctx.decode([token])
            steps.append(ctx.logits()[-1].copy())
        ctx.close()
        results.append((prefill, steps))
    model.close()
    assert np.array_equal(results[0][0], results[1][0])
    assert all(np.array_equal(a, b) for a, b in zip(results[0][1], results[1][1]))


@pytest.fixture
def two_busy_loops():
    loops = BusyLoops(2)
    yield loops
    loops.stop()


@pytest.mark.alone  # two threads of ours and two loops, on both cores
def test_beside_two_busy_loops_the_engine_drops_to_one_thread_and_the_reply_is_the_same(make_engine, two_busy_loops):
    prompt = "Write a long story about a lighthouse keeper who finds a message in a bottle."
    engine = make_engine("ngram")
    busy = run(engine, prompt, max_tokens=120)
    adjusted = [e for e in busy.events if isinstance(e, ThreadsAdjusted)]
    # two loops beside two threads of ours on two cores get about one core between them (0.99 measured)
    assert adjusted and adjusted[0].threads == 1 and adjusted[0].others_cores > 0.5, adjusted
    assert busy.finished.stats.threads == 1
    assert busy.finished.stats.busy_cores > 0.5  # said with the reply: its steps are no plain rate of this machine
    two_busy_loops.stop()  # the reference decodes the same ids on a quiet machine, in a third of the time
    fixed = make_engine("ngram")
    fixed.apply(dataclasses.replace(fixed.config, adapt_threads=False))
    same = run(fixed, prompt, max_tokens=120)
    assert not any(isinstance(e, ThreadsAdjusted) for e in same.events)
    assert same.ids == busy.ids  # the thread count changed mid-reply; not one token did
