"""Turn benchmark runs into per-task summaries, a terminal table, a JSON file and an optional plot."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..engine.cpu import cores
from ..figures import DASH, num
from .runners import BASELINE, RunResult


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: list[RunResult], *, greedy: bool) -> list[dict[str, Any]]:
    """One row per (task, runner), from the measured repetitions (warm-ups excluded)."""
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for run in runs:
        if run.rep >= 0:
            groups[(run.task, run.runner)].append(run)
    rows = []
    for (task, runner), group in groups.items():
        tps = [r.decode_tps for r in group if r.decode_tps is not None]
        drafted = sum(r.drafted or 0 for r in group) if any(r.drafted is not None for r in group) else None
        accepted = sum(r.accepted or 0 for r in group) if any(r.accepted is not None for r in group) else None
        rows.append({
            "task": task, "runner": runner, "repetitions": len(group),
            "ttft_median": _median([r.ttft for r in group]),
            "total_median": _median([r.total for r in group]),
            "decode_tps_median": _median(tps), "decode_tps_min": min(tps, default=None), "decode_tps_max": max(tps, default=None),
            "generated_median": _median([r.generated for r in group]),
            "drafted": drafted, "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_acceptance_length": _median([r.mean_acceptance_length for r in group]),
            "peak_rss_max": max((r.peak_rss for r in group if r.peak_rss is not None), default=None),
            "vram_max": max((r.vram_process for r in group if r.vram_process is not None), default=None),
        })
    _add_comparisons(rows, groups, greedy=greedy)
    return rows


def _add_comparisons(rows: list[dict[str, Any]], groups: dict[tuple[str, str], list[RunResult]], *, greedy: bool) -> None:
    """Every runner against specchat's plain decoding in the same repetition (runners alternate within one), so each
    speed-up is the median of ratios of runs made side by side."""
    for row in rows:
        base = groups.get((row["task"], BASELINE))
        mine = groups[(row["task"], row["runner"])]
        row["speedup"] = row["speedup_total"] = row["same_output"] = None
        if not base or row["runner"] == BASELINE:
            continue
        by_rep = {r.rep: r for r in base}
        paired = [(r, by_rep[r.rep]) for r in mine if r.rep in by_rep]
        ratios = [a.decode_tps / b.decode_tps for a, b in paired if a.decode_tps and b.decode_tps]
        totals = [b.total / a.total for a, b in paired if a.total > 0]
        row["speedup"], row["speedup_total"] = _median(ratios), _median(totals)
        if greedy:
            row["same_output"] = all(a.tokens == b.tokens if a.tokens and b.tokens else a.text == b.text
                                     for a, b in paired)


def machine() -> dict[str, Any]:
    import llama_cpp

    from ..telemetry.memory import GpuMemory, gpu_memory

    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    gpu = gpu_memory()
    return {
        # the cores the run could use (a cpuset or taskset holds it to fewer), and the machine's
        "platform": platform.platform(), "cpu": cpu, "cores": cores(), "machine_cores": os.cpu_count(),
        "python": platform.python_version(),
        "specchat": __version__, "llama_cpp_python": llama_cpp.__version__,
        "gpu": gpu.name if isinstance(gpu, GpuMemory) else f"none ({gpu.reason})",
    }


def build_report(runs: list[RunResult], *, profile: dict[str, Any], settings: dict[str, Any], errors: list[str],
                 greedy: bool, copy_heavy: set[str], spec_runner: str, own: list[str], rivals: list[str],
                 categories: dict[str, str] | None = None) -> dict[str, Any]:
    """``own``: specchat's runners, whose output must not change with speculation; ``rivals``: the peers' runners the
    per-category verdicts rank specchat against (``peers.Peer.rival``); ``categories``: each task's Spec-Bench
    category, where the tasks have one (the per-category report)."""
    summary = summarise(runs, greedy=greedy)
    changed = sorted({r["task"] for r in summary if r["runner"] in own and r["same_output"] is False})
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "profile": profile, "settings": settings,
        "runs": [dataclasses.asdict(r) for r in runs], "summary": summary,
        "output_changed": changed, "errors": errors, "copy_heavy": sorted(copy_heavy), "spec_runner": spec_runner,
        "categories": categories or {}, "rivals": rivals,
    }


def goals(report: dict[str, Any]) -> str:
    """Speed-ups by class of task: copy-heavy (the reply repeats given text) and free text, for every runner."""
    copy_heavy = set(report["copy_heavy"])
    lines = []
    for runner in dict.fromkeys(r["runner"] for r in report["summary"] if r["speedup"] is not None):
        rows = [r for r in report["summary"] if r["runner"] == runner and r["speedup"] is not None]
        heavy = [r["speedup"] for r in rows if r["task"] in copy_heavy]
        free = [r["speedup"] for r in rows if r["task"] not in copy_heavy]
        parts = []
        if heavy:
            parts.append(f"copy-heavy median {statistics.median(heavy):.2f}× (min {min(heavy):.2f}×)")
        if free:
            parts.append(f"free text min {min(free):.2f}× (median {statistics.median(free):.2f}×)")
        same = [r["same_output"] for r in rows if r["same_output"] is not None]
        if same:
            parts.append(f"identical output on {sum(same)}/{len(same)} tasks")
        lines.append(f"{runner}: " + ", ".join(parts))
    return "speed-up against specchat's plain decoding, paired per repetition:\n  " + "\n  ".join(lines)


def table(report: dict[str, Any]) -> str:
    header = ["task", "runner", "TTFT ms", "total s", "decode tok/s (min–max)", "speed-up", "drafted", "accepted",
              "accept %", "mean len", "peak RSS MB", "VRAM MB", "same output"]
    rows = [header]
    for r in report["summary"]:
        same = {True: "yes", False: "CHANGED", None: DASH}[r["same_output"]]
        rng = f" ({num(r['decode_tps_min'], '.0f')}–{num(r['decode_tps_max'], '.0f')})" if r["repetitions"] > 1 else ""
        rows.append([
            r["task"], r["runner"], num(r["ttft_median"], ".0f", 1000), num(r["total_median"], ".2f"),
            num(r["decode_tps_median"], ".1f") + rng, num(r["speedup"], ".2f") + ("×" if r["speedup"] else ""),
            num(r["drafted"], "d"), num(r["accepted"], "d"), num(r["acceptance_rate"], ".0f", 100),
            num(r["mean_acceptance_length"], ".2f"), num(r["peak_rss_max"], ".0f", 1e-6), num(r["vram_max"], ".0f", 1e-6),
            same,
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=1))


def plot(report: dict[str, Any], path: Path) -> None:
    """Decode tokens/s and acceptance per task and runner, as PNG or SVG (by the file's extension)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    tasks = list(dict.fromkeys(r["task"] for r in summary))
    runners = list(dict.fromkeys(r["runner"] for r in summary))
    cell = {(r["task"], r["runner"]): r for r in summary}
    fig, (speed, accept) = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(tasks)), 9), sharex=True)
    width = 0.8 / len(runners)
    for i, runner in enumerate(runners):
        xs = [t + (i - (len(runners) - 1) / 2) * width for t in range(len(tasks))]
        tps = [(cell.get((task, runner)) or {}).get("decode_tps_median") or 0 for task in tasks]
        rates = [((cell.get((task, runner)) or {}).get("acceptance_rate") or 0) * 100 for task in tasks]
        colour = plt.get_cmap("tab10")(i % 10)  # the same colour for a runner in both panels
        speed.bar(xs, tps, width, label=runner, color=colour)
        if any(rates):
            accept.bar(xs, rates, width, label=runner, color=colour)
    speed.set_ylabel("decode tokens/s (median)")
    fig.legend(*speed.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize="small")
    accept.set_ylabel("draft acceptance %")
    accept.set_xticks(range(len(tasks)), tasks, rotation=20)
    fig.suptitle(f"specchat bench — profile {report['profile'].get('name')} — {report['machine']['cpu']}", fontsize="medium")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path)
    plt.close(fig)
