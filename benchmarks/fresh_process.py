"""Each reply a fresh `specchat ask` process: the `ngram` profile's "auto" against plain decoding of the same target.

A newcomer's check (#37's first finding): every reply is its own process, so what "auto" knows comes only from the
memory it keeps in the user cache (engine/draft_length/learned_store.py) — learned on whatever that user asked before, copies or
free text. One isolated user cache (the measured verify sweep copied in, the memory starting from the priors) serves
every round, so the memory grows as a user's does, and free text follows copies. In each round every task is asked
twice, alternated and in a rotated order: ``specchat ask --profile ngram --temperature 0 --max-tokens N --json`` and
the same with ``--method none``. A reply's speed-up is plain decode time over spec decode time, each from the first
token to the last (process start and prefill apart, and the prefill is the same for both); the outputs must be
identical. Reported: per round the median over the free tasks and over the copy tasks, per task the median over
rounds, and for each copy task the replay's oracle for the same reply (``ngram_simulation.py``: the best any draft length
could do with this drafter, from the same verify sweep), measured after the rounds so it runs beside nothing.

Tasks: the held-out tasks that are one turn (`held_out_tasks.toml`), and Spec-Bench's first turns, ``--per`` per
category drawn as `specchat bench` draws them. Copy tasks are those marked ``copy_heavy`` (Spec-Bench: extraction,
summarization, RAG).

    python benchmarks/fresh_process.py [--rounds 5] [--per 1] [--max-tokens 160] [--categories …]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from specchat import paths
from specchat.bench.spec_bench import Selection, read_questions, select, suite_path
from specchat.bench.tasks import Task, load_tasks

HERE = Path(__file__).parent
GOAL_FREE, GOAL_COPY = 0.97, 0.85


def tasks_for(args: argparse.Namespace) -> list[Task]:
    held_out = [t for t in load_tasks(HERE / "held_out_tasks.toml")[0] if not t.earlier]
    questions, _ = read_questions(suite_path())
    chosen = select(questions, Selection(per=args.per, seed=args.seed,
                                         categories=tuple(filter(None, args.categories.split(",")))))
    return [dataclasses.replace(t, max_tokens=args.max_tokens, follow_ups=()) for t in held_out + chosen]


def ask(task: Task, method: str | None, env: dict[str, str]) -> dict:
    """One fresh process's reply: its tokens and decode seconds."""
    command = [sys.executable, "-m", "specchat", "ask", "--profile", "ngram", "--temperature", "0", "--max-tokens",
               str(task.max_tokens), "--json", *(["--method", method] if method else []), "-"]
    out = subprocess.run(command, input=task.prompt, capture_output=True, text=True, env=env, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    stats = next(r for r in rows if r["type"] == "summary")
    tokens = [r["token"] for r in rows if r["type"] == "token"]
    return {"tokens": tokens, "decode_s": stats["t_last_token"] - stats["ttft"], "drafted": stats["drafted"],
            "accepted": stats["accepted"]}


def oracles(copies: list[Task], profile: str) -> dict[str, float]:
    """The simulation's oracle for each copy task's greedy reply (``bench.simulation.ngram``), on the same verify
    sweep."""
    from specchat.bench.simulation.ngram import ORACLE, record, simulate
    from specchat.engine.core import Engine
    from specchat.engine.draft_length.auto_length import AUTO_K_MAX
    from specchat.engine.drafters.ngram import NgramDrafter
    from specchat.engine.draft_length.costs import measure_verify_cost, sizes_up_to
    from specchat.profiles import load_profile, run_config

    config = dataclasses.replace(run_config(load_profile(profile)), adapt_threads=False)
    engine = Engine(dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none")))
    try:
        replies = record(engine, copies)
        verify = measure_verify_cost(engine.ctx, max(engine.target.bos, 0), sizes_up_to(AUTO_K_MAX["ngram"] + 1))
        drafter = NgramDrafter(config.spec.ngram_min, config.spec.ngram_max)
        return {r.task.name: simulate(r, ORACLE, verify, engine.speculation.rules, drafter) for r in replies}
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", default="")
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    tasks = tasks_for(args)
    speedups: dict[str, list[float]] = {t.name: [] for t in tasks}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cache = home / ".cache" / "specchat"
        cache.mkdir(parents=True)
        for name in ("verify-costs.json", "cpu-probe.json"):  # measured here already: not what is compared
            if (paths.cache_dir() / name).is_file():
                shutil.copy(paths.cache_dir() / name, cache / name)
        for draft in paths.cache_dir().glob("*.gguf*"):  # the embedded draft, derived once
            shutil.copy(draft, cache / draft.name)
        env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
        for round_ in range(args.rounds):
            order = tasks[round_ % len(tasks):] + tasks[:round_ % len(tasks)]
            for i, task in enumerate(order):
                arms = [None, "none"] if (round_ + i) % 2 else ["none", None]
                replies = {method: ask(task, method, env) for method in arms}
                spec, plain = replies[None], replies["none"]
                if spec["tokens"] != plain["tokens"]:
                    raise SystemExit(f"{task.name}: speculation changed the output — the comparison is void")
                speedups[task.name].append(plain["decode_s"] / spec["decode_s"])
                print(f"round {round_ + 1} {task.name}: {speedups[task.name][-1]:.2f}× "
                      f"({spec['accepted']}/{spec['drafted']} accepted)", flush=True)
            free = [speedups[t.name][-1] for t in tasks if not t.copy_heavy]
            copy = [speedups[t.name][-1] for t in tasks if t.copy_heavy]
            print(f"round {round_ + 1}: median free text {statistics.median(free):.2f}× (goal ≥ {GOAL_FREE}), "
                  f"copies {statistics.median(copy):.2f}×", flush=True)
    copies = [t for t in tasks if t.copy_heavy]
    ceiling = oracles(copies, "ngram")
    print(f"{'task':<24}{'median':>8}{'min':>7}{'oracle':>8}{'of oracle':>11}")
    for task in tasks:
        runs = speedups[task.name]
        median = statistics.median(runs)
        oracle = ceiling.get(task.name)
        tail = f"{oracle:7.2f}×{median / oracle:10.2f}" if oracle else ""
        print(f"{task.name:<24}{median:7.2f}×{min(runs):6.2f}×{tail}")


if __name__ == "__main__":
    main()
