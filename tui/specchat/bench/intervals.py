"""How sure a benchmark's speed-ups are: 95 % intervals by a bootstrap over questions and repetitions.

A category's speed-up is Spec-Bench's ratio of mean rates (``categories``): the mean over its questions of each
question's median decode rate, over the same for the baseline. Two runs of the same runner on this machine differ by
±10 % (issue #47), and Spec-Bench's own tables carry no interval, so a verdict read off one figure can be noise. Here
the questions are drawn again with replacement, and within each question its repetitions (a runner's run and the
baseline's of the same repetition, made side by side, drawn together), ``RESAMPLES`` times; the interval is the 2.5th
to 97.5th percentile of the ratio so drawn (a percentile bootstrap, seeded: the same runs give the same interval).
A verdict — ahead, level, behind — is said only where the interval of the ratio excludes parity.
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

RESAMPLES = 2000
SEED = 0
MIN_PAIRS = 3  # fewer paired runs than this give no interval, and no verdict

Rates = dict[str, dict[int, float]]  # question → repetition → decode tok/s


def rates_of(runs: Iterable[dict[str, Any]], runner: str, questions: set[str]) -> Rates:
    """Each measured repetition's decode rate of ``runner`` on each of ``questions``."""
    out: Rates = defaultdict(dict)
    for run in runs:
        if run["runner"] == runner and run["task"] in questions and run["rep"] >= 0 and run.get("decode_tps"):
            out[run["task"]][run["rep"]] = run["decode_tps"]
    return out


def ratio_interval(mine: Rates, other: Rates, *, resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float] | None:
    """The 95 % interval of mean(median rate of ``mine``) / mean(median rate of ``other``) over the questions both
    timed, their repetitions paired; None where fewer than two repetitions in all make it."""
    paired = {q: [(mine[q][rep], other[q][rep]) for rep in sorted(mine[q]) if rep in other.get(q, {})]
              for q in mine}
    paired = {q: pairs for q, pairs in paired.items() if pairs}
    if sum(len(pairs) for pairs in paired.values()) < MIN_PAIRS:
        return None
    rng = random.Random(seed)
    questions = sorted(paired)
    draws = []
    for _ in range(resamples):
        a_sum = b_sum = 0.0
        for q in rng.choices(questions, k=len(questions)):
            pairs = paired[q]
            drawn = rng.choices(pairs, k=len(pairs))
            a_sum += statistics.median(a for a, _ in drawn)
            b_sum += statistics.median(b for _, b in drawn)
        draws.append(a_sum / b_sum)
    draws.sort()
    return draws[int(0.025 * (resamples - 1))], draws[int(0.975 * (resamples - 1))]


def verdict(interval: Sequence[float] | None, ahead: str, level: str, behind: str) -> str:
    """``ahead`` where the interval lies above parity, ``behind`` below it, ``level`` where it holds parity; no verdict
    without an interval."""
    if interval is None:
        return "no verdict on too few runs:"
    low, high = interval
    return ahead if low > 1.0 else behind if high < 1.0 else level
