"""A bench verdict carries its uncertainty (issue #47 item 5): worked examples of the bootstrap's 95 % intervals."""

from __future__ import annotations

import random
import statistics

import pytest

from specchat.bench.categories import by_category, verdicts
from specchat.bench.intervals import ratio_interval, verdict

MINE, PEER, PLAIN = "specchat suffix-draft", "llama-server ngram-mod", "specchat none"


def rates(table: dict[str, list[float]]) -> dict[str, dict[int, float]]:
    return {q: dict(enumerate(values)) for q, values in table.items()}


def test_a_ratio_the_same_in_every_repetition_has_no_width():
    mine = rates({"a": [15.0, 30.0, 45.0], "b": [30.0, 30.0, 30.0]})
    plain = rates({"a": [10.0, 20.0, 30.0], "b": [20.0, 20.0, 20.0]})
    assert ratio_interval(mine, plain) == pytest.approx((1.5, 1.5))


def test_the_interval_covers_the_spread_of_the_questions():
    """Two questions, one 1.6× and one 0.6× of plain at equal rates: the ratio of means is 1.1, and a resample of
    the questions can draw either twice (0.6 to 1.6): not a verdict."""
    mine = rates({"a": [16.0, 16.0], "b": [6.0, 6.0]})
    plain = rates({"a": [10.0, 10.0], "b": [10.0, 10.0]})
    low, high = ratio_interval(mine, plain)
    assert low == pytest.approx(0.6) and high == pytest.approx(1.6)
    assert verdict((low, high), "ahead", "level", "behind") == "level"


def test_the_bootstrap_matches_the_spread_of_runs_drawn_again():
    """Independent of the bootstrap: draw the whole experiment again many times from a known noise (±10 % a run, as
    this machine's), and the spread of the ratio so measured is about what one run's interval says."""
    rng = random.Random(7)
    true = {f"q{i}": 20.0 + i for i in range(12)}

    def one_run() -> tuple[dict, dict]:
        mine = {q: {rep: 1.2 * r * rng.gauss(1, 0.1) for rep in range(3)} for q, r in true.items()}
        plain = {q: {rep: r * rng.gauss(1, 0.1) for rep in range(3)} for q, r in true.items()}
        return mine, plain

    def measured(mine: dict, plain: dict) -> float:
        return (sum(statistics.median(v.values()) for v in mine.values())
                / sum(statistics.median(v.values()) for v in plain.values()))

    again = sorted(measured(*one_run()) for _ in range(400))
    spread = again[int(0.975 * 399)] - again[int(0.025 * 399)]
    widths = [high - low for low, high in (ratio_interval(*one_run(), resamples=400) for _ in range(10))]
    assert 0.5 * spread < statistics.median(widths) < 2.0 * spread
    low, high = ratio_interval(*one_run())
    assert low > 1.0  # 1.2× with ±10 % noise over 12 questions and 3 repetitions: clearly faster


def report_of(mine: dict[str, list[float]], peer: dict[str, list[float]], plain: dict[str, list[float]]) -> dict:
    runs, summary = [], []
    for runner, table in ((MINE, mine), (PEER, peer), (PLAIN, plain)):
        for q, values in table.items():
            runs += [{"task": q, "runner": runner, "rep": rep, "decode_tps": v, "generated": 10, "ttft": 0.1,
                      "extra": {}} for rep, v in enumerate(values)]
            summary.append({"task": q, "runner": runner, "decode_tps_median": statistics.median(values),
                            "drafted": None, "accepted": 0, "same_output": None if runner == PLAIN else True})
    report = {"categories": {q: "qa" for q in mine}, "summary": summary, "runs": runs}
    report["by_category"] = by_category(report)
    return report


def test_verdicts_are_said_only_where_the_interval_excludes_parity():
    plain = {"a": [10.0, 10.5, 9.5], "b": [20.0, 21.0, 19.0], "c": [15.0, 15.5, 14.5]}
    clearly = {q: [1.5 * v for v in values] for q, values in plain.items()}
    barely = {q: [1.02 * v for v in values[::-1]] for q, values in plain.items()}  # 2 % ahead, within the noise
    text = verdicts(report_of(clearly, barely, plain), MINE)
    assert "faster than plain decoding" in text and f"ahead of {PEER}" in text
    text = verdicts(report_of(barely, clearly, plain), MINE)
    assert "level with plain decoding" in text and f"behind {PEER}" in text
    rows = {(r["category"], r["runner"]): r for r in report_of(clearly, barely, plain)["by_category"]}
    low, high = rows[("qa", MINE)]["speedup_interval"]
    assert low <= rows[("qa", MINE)]["speedup"] <= high
