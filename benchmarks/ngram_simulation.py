"""Draft-length policies for n-gram drafts, compared without timing noise: greedy replies simulated
(``specchat.bench.simulation.ngram``).

Greedy output does not depend on speculation, so each task's reply is decoded once, plainly, on the real model; then
every policy is replayed over it: at each step the real n-gram drafter proposes from the conversation so far, the
policy picks how many tokens to verify, and the recorded reply says how many the target accepts. A step's cost is the
target's verify time for that batch, from a verify sweep measured here on the same model, threads and backend; the
speed-up is plain decoding's cost over the policy's (decode steps only, as `specchat bench` reports). Policies:

- `auto`: the engine's ``MatchHazards``, carried over tasks and repetitions as in one `specchat bench` process, with
  the engine's plain step now and then and its longer draft now and then (``adaptive``: what keeps the learned costs
  true; here the costs are the sweep's, so they only cost); each reply starts short and earns longer drafts, and
  weighs earlier replies' judgements as a prior (``SLOW_START``, ``CARRIED_JUDGEMENTS``);
- `auto, pooled`: the same without that per-reply start — every reply's judgements pooled, as "auto" was before;
- `n_max N`: verify up to N proposed tokens at every step;
- `map-k-like`: 48 tokens whenever the match reaches 12 tokens (llama-server's `ngram-map-k` defaults: 12-token key,
  48-token value);
- `oracle`: knows how many proposed tokens the target will accept and verifies the best prefix of them — the ceiling
  of any draft-length policy for this drafter on these replies;
- `match table`: the best table of draft lengths by match-length class (``HAZARD_CLASSES``) for each task, fitted to
  that task's reply in hindsight (coordinate descent from several tables, no learning): about the most a policy that
  sees only how far the proposal's match reaches could get on that reply — what bounds `auto` against `oracle`;
- `copy ceiling`: at every position the longest run of the reply found verbatim earlier in the conversation, with the
  best plan of draft lengths over the whole reply — the ceiling of any drafter that copies earlier text (prompt
  lookup), whatever it proposes and however long it drafts.

    python benchmarks/ngram_simulation.py [--tasks FILE] [--repeat 3] [--profile ngram]
    python benchmarks/ngram_simulation.py --suite spec-bench --per 2 [--categories summarization,rag] [--max-tokens N]

Spec-Bench's questions are chosen as `specchat bench` chooses them (the same options, the same draw); each turn of a
two-turn question is replayed as a reply of its own, named QUESTION/TURN.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from specchat.bench.selection import add_task_options, chosen_tasks
from specchat.bench.simulation.ngram import (ORACLE, EngineAuto, Fixed, Policy, copy_ceiling, match_table, recorded,
                                             simulate, swept, sweep_line)
from specchat.engine.draft_length.auto_length import AUTO_K_MAX
from specchat.engine.draft_length.policies import MatchHazards
from specchat.engine.drafters.ngram import NgramDrafter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_options(parser)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="ngram")
    args = parser.parse_args()
    tasks, _ = chosen_tasks(args)
    engine, replies = recorded(args.profile, tasks)
    verify = swept(engine, AUTO_K_MAX["ngram"] + 1)
    print(sweep_line(verify))
    k_max = min(AUTO_K_MAX["ngram"], verify.exact - 1)
    spec = engine.config.spec
    drafter = NgramDrafter(spec.ngram_min, spec.ngram_max)
    rules = engine.speculation.rules
    makers: dict[str, Callable[[], Policy | object]] = {
        "auto": lambda: EngineAuto(MatchHazards(verify, k_max)),
        "auto, pooled": lambda: EngineAuto(MatchHazards(verify, k_max), per_reply=False),
        **{f"n_max {n}": (lambda n=n: Fixed(n)) for n in (4, 8, 16, 32)},
        "map-k-like": lambda: Fixed(48, shortest=12),
        "oracle": lambda: ORACLE,
    }
    results: dict[str, dict[str, float]] = {}
    for name, make in makers.items():
        policy = make()  # one per name, carried over tasks and repetitions as in one bench process
        runs: dict[str, list[float]] = {r.task.name: [] for r in replies}
        for rep in range(args.repeat + 1):  # the first round is the bench's excluded warm-up
            for reply in replies:
                speed = simulate(reply, policy, verify, rules, drafter)
                if rep:
                    runs[reply.task.name].append(speed)
        results[name] = {task: statistics.median(speeds) for task, speeds in runs.items()}
    results["match table"] = {reply.task.name: match_table(reply, verify, rules, drafter) for reply in replies}
    results["copy ceiling"] = {reply.task.name: copy_ceiling(reply, verify) for reply in replies}
    names = list(results)
    widths = [max(12, len(n) + 2) for n in names]
    print("task".ljust(20) + "".join(n.rjust(w) for n, w in zip(names, widths)))
    for reply in replies:
        task = reply.task.name
        print(task.ljust(20) + "".join(f"{results[n][task]:{w - 1}.2f}×" for n, w in zip(names, widths)))


if __name__ == "__main__":
    main()
