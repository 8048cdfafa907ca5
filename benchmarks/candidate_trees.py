"""Candidate trees (#35 item 3): would verifying several copied continuations in one batch pay on this machine?

SuffixDecoding and the unsloth prototype verify a tree of candidates — every continuation that earlier text offers
after the current match, one sequence per leaf — so a step survives when any branch is right. specchat verifies one
chain. Greedy output does not depend on the drafts, so each task's reply is decoded once, plainly, on the real model
(as ``ngram_simulation.py`` does; ``specchat.bench.simulation.trees``), and every step of it is replayed: the earlier occurrences of the longest match (2 to 8
tokens) ending at that point are grouped by the token that follows them, most frequent first (ties to the most
recent), and each group's most recent continuation is a branch. A chain verifies the first branch, up to L tokens; a
tree also the second (and third), up to M tokens each: 1 + L + M rows in one batch, whose cost is the verify sweep's
for that many rows (a tree's attention mask costs the same rows). A step yields the longest accepted branch and the
target's own token. For every fixed L and M the simulation gives plain decoding's cost over the policy's, per task and
over all (the best of each kind knowing the replies: a ceiling for lengths chosen online); and the same with a
GPU-like curve (a row 2 % of a step), where trees are known to pay.

    python benchmarks/candidate_trees.py --suite spec-bench --per 2 --max-tokens 256 [--profile ngram]
"""

from __future__ import annotations

import argparse
import statistics

from specchat.bench.selection import add_task_options, chosen_tasks
from specchat.bench.simulation.ngram import recorded, swept, sweep_line
from specchat.bench.simulation.trees import CHAIN, TREE, gpu_like, speed_up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_options(parser)
    parser.add_argument("--profile", default="ngram")
    args = parser.parse_args()
    tasks, _ = chosen_tasks(args)
    engine, replies = recorded(args.profile, tasks)
    verify = swept(engine, 33)
    print(sweep_line(verify))
    policies = {"chain": [(k,) for k in CHAIN], "tree of 2": TREE, "tree of 3": [(k, m, m) for k, m in TREE]}
    for curve_name, curve in (("this machine", verify), ("GPU-like (a row 2 % of a step)", gpu_like(verify))):
        by_task: dict[str, dict[str, float]] = {}
        overall: dict[str, tuple[float, tuple[int, ...]]] = {}
        for kind, choices in policies.items():
            speeds = {lengths: [speed_up(r, curve, lengths) for r in replies] for lengths in choices}
            by_task[kind] = {r.task.name: max(s[i] for s in speeds.values()) for i, r in enumerate(replies)}
            best = max(speeds, key=lambda lengths: statistics.fmean(speeds[lengths]))
            overall[kind] = (statistics.fmean(speeds[best]), best)
        print(f"\n{curve_name}: speed-up over plain decoding, the best fixed lengths per task (knowing the reply)")
        print("task".ljust(28) + "".join(kind.rjust(12) for kind in policies))
        for reply in replies:
            print(reply.task.name.ljust(28) + "".join(f"{by_task[k][reply.task.name]:11.2f}×" for k in policies))
        print("mean, per task".ljust(28) + "".join(f"{statistics.fmean(by_task[k].values()):11.2f}×" for k in policies))
        print("one length for all".ljust(28) + "".join(f"{overall[k][0]:11.2f}×" for k in policies))
        print("  (lengths: " + "; ".join(f"{k} {overall[k][1]}" for k in policies) + ")")


if __name__ == "__main__":
    main()
