"""The report in Spec-Bench's terms: per category and overall, for every runner of one run.

Spec-Bench (``evaluation/speed.py``) divides a method's mean tokens/s over a category's questions by the baseline's
mean over the same questions, and reports the mean accepted tokens per target step beside it. Here the rates are
decode rates (each turn's prefill and first token apart, TTFT shown on its own), each question's the median of its
alternated repetitions, and the baseline is specchat's plain decoding of the same target in the same run. Each
speed-up carries its 95 % interval (``intervals``), and a verdict is said only where that interval excludes parity.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from ..figures import DASH, num
from .intervals import rates_of, ratio_interval, verdict
from .runners import BASELINE
from .spec_bench import CATEGORIES

OVERALL = "overall"  # the row over every category (a category of that name would merge with it: none has it)


def _order(categories: set[str]) -> list[str]:
    return [c for c in CATEGORIES if c in categories] + sorted(categories - set(CATEGORIES))


def _figures(rows: list[dict[str, Any]], base: dict[str, dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One runner's figures over the questions of ``rows`` (its summary rows) and ``runs`` (its measured runs)."""
    paired = [(r["decode_tps_median"], base[r["task"]]["decode_tps_median"]) for r in rows
              if r["task"] in base and r["decode_tps_median"] and base[r["task"]]["decode_tps_median"]]
    speedup = (statistics.mean(a for a, _ in paired) / statistics.mean(b for _, b in paired)) if paired else None
    drafted = sum(r["drafted"] or 0 for r in rows)
    accepted = sum(r["accepted"] or 0 for r in rows)
    steps = [r["extra"].get("steps") for r in runs]
    yielded = sum(int(r["extra"].get("step_tokens", 0)) for r in runs)  # tokens the target's steps gave
    known = steps and all(s for s in steps)
    same = [r["same_output"] for r in rows if r["same_output"] is not None]
    ttfts = [r["ttft"] for r in runs if r["ttft"] is not None]
    return {
        "questions": len(rows), "timed": len(paired), "speedup": speedup,
        "decode_tps_mean": statistics.mean(a for a, _ in paired) if paired else None,
        "tokens_per_step": yielded / sum(steps) if known else None,  # type: ignore[arg-type]
        "drafted": drafted if any(r["drafted"] is not None for r in rows) else None, "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "ttft_median": statistics.median(ttfts) if ttfts else None,
        "same_output": all(same) if same else None, "changed": [r["task"] for r in rows if r["same_output"] is False],
    }


def by_category(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (category, runner), then each runner's overall row."""
    category_of = report["categories"]
    summary = [r for r in report["summary"] if r["task"] in category_of]
    measured = [r for r in report["runs"] if r["rep"] >= 0 and r["task"] in category_of]
    base = {r["task"]: r for r in summary if r["runner"] == BASELINE}
    runners = list(dict.fromkeys(r["runner"] for r in summary))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in summary:
        for key in (category_of[row["task"]], OVERALL):
            groups[(key, row["runner"])].append(row)
    for run in measured:
        for key in (category_of[run["task"]], OVERALL):
            runs[(key, run["runner"])].append(run)
    rows = []
    for category in [*_order(set(category_of.values())), OVERALL]:
        questions = {t for t, c in category_of.items() if c == category or category == OVERALL}
        plain = rates_of(measured, BASELINE, questions)
        for runner in runners:
            if (category, runner) in groups:
                figures = _figures(groups[(category, runner)], base, runs[(category, runner)])
                interval = None if runner == BASELINE else ratio_interval(rates_of(measured, runner, questions), plain)
                rows.append({"category": category, "runner": runner, **figures, "speedup_interval": interval})
    return rows


def peer_interval(report: dict[str, Any], category: str, mine: str, peer: str) -> tuple[float, float] | None:
    """The 95 % interval of ``mine``'s speed-up over ``peer``'s in ``category`` (their rates, paired by repetition)."""
    questions = {t for t, c in report["categories"].items() if c == category or category == OVERALL}
    measured = report["runs"]
    return ratio_interval(rates_of(measured, mine, questions), rates_of(measured, peer, questions))


def table(rows: list[dict[str, Any]]) -> str:
    header = ["category", "runner", "questions", "speed-up", "95 % interval", "decode tok/s", "tokens/step", "accept %",
              "TTFT ms", "same output"]
    lines = [header]
    for r in rows:
        same = {True: "yes", False: "CHANGED", None: DASH}[r["same_output"]]
        timed = "" if r["timed"] == r["questions"] or r["runner"] == BASELINE else f" ({r['timed']} timed)"
        lines.append([r["category"], r["runner"], f"{r['questions']}{timed}",
                      num(r["speedup"], ".2f") + ("×" if r["speedup"] is not None else ""),
                      _interval(r.get("speedup_interval")),
                      num(r["decode_tps_mean"], ".1f"), num(r["tokens_per_step"], ".2f"),
                      num(r["acceptance_rate"], ".0f", 100), num(r["ttft_median"], ".0f", 1000), same])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _interval(interval: tuple[float, float] | list[float] | None) -> str:
    """Two decimals, three where a bound would round to parity (0.996 is below it: the verdict says so)."""
    if interval is None:
        return DASH
    digits = 3 if any(f"{bound:.2f}" == "1.00" and bound != 1.0 for bound in interval) else 2
    return f"{interval[0]:.{digits}f}–{interval[1]:.{digits}f}×"


def is_rival(report: dict[str, Any], runner: str) -> bool:
    """Whether the verdicts rank ``runner`` against specchat (a report written before ``rivals``: llama-server's)."""
    return runner in report["rivals"] if "rivals" in report else runner.startswith("llama-server")


def verdicts(report: dict[str, Any], spec_runner: str) -> str:
    """Where the profile stands against plain decoding and the best identical-output peer, category by category:
    "faster", "ahead" and their opposites only where the 95 % interval excludes parity, "level" otherwise."""
    rows = report["by_category"]
    lines = []
    for category in dict.fromkeys(r["category"] for r in rows):
        mine = next((r for r in rows if r["category"] == category and r["runner"] == spec_runner), None)
        peers = [r for r in rows if r["category"] == category and is_rival(report, r["runner"])
                 and r["speedup"] is not None and r["same_output"] is True]
        if mine is None or mine["speedup"] is None:
            continue
        interval = mine.get("speedup_interval")
        plain = verdict(interval, "faster than", "level with", "slower than")
        text = f"{category}: {spec_runner} {mine['speedup']:.2f}× ({_interval(interval)}), {plain} plain decoding"
        if peers:
            best = max(peers, key=lambda r: r["speedup"])
            against = peer_interval(report, category, spec_runner, best["runner"])
            standing = verdict(against, "ahead of", "level with", "behind")
            text += (f"; {standing} {best['runner']} {best['speedup']:.2f}× (the best identical-output type; the"
                     f" ratio {_interval(against)})")
        lines.append(text)
    return ("speed-up over specchat's plain decoding per category (Spec-Bench's ratio of mean rates, of decode"
            " tok/s: TTFT apart), with 95 % intervals (a bootstrap over questions and repetitions); a verdict only"
            " where the interval excludes parity:\n  " + "\n  ".join(lines))
