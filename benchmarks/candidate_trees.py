"""Candidate trees (#35 item 3): would verifying several copied continuations in one batch pay on this machine?

SuffixDecoding and the unsloth prototype verify a tree of candidates — every continuation that earlier text offers
after the current match, one sequence per leaf — so a step survives when any branch is right. specchat verifies one
chain. Greedy output does not depend on the drafts, so each task's reply is decoded once, plainly, on the real model
(as ``ngram_replay.py`` does), and every step of it is replayed: the earlier occurrences of the longest match (2 to 8
tokens) ending at that point are grouped by the token that follows them, most frequent first (ties to the most
recent), and each group's most recent continuation is a branch. A chain verifies the first branch, up to L tokens; a
tree also the second (and third), up to M tokens each: 1 + L + M rows in one batch, whose cost is the verify sweep's
for that many rows (a tree's attention mask costs the same rows). A step yields the longest accepted branch and the
target's own token. For every fixed L and M the replay gives plain decoding's cost over the policy's, per task and
over all (the best of each kind knowing the replies: a ceiling for lengths chosen online); and the same with a
GPU-like curve (a row 2 % of a step), where trees are known to pay.

    python benchmarks/candidate_trees.py --suite spec-bench --per 2 --max-tokens 256 [--profile ngram]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections import defaultdict

from ngram_replay import Reply, draft_limit, recorded, swept  # the draft-length replay's replies, limits and sweep

from specchat.cli.bench import add_task_options
from specchat.engine.draft_length.auto import VerifyCost
from specchat.engine.llama import common_prefix

MATCHES = range(8, 1, -1)  # the longest match first
CHAIN = (1, 2, 3, 4, 6, 8, 12, 16)
TREE = tuple(itertools.product(CHAIN, (1, 2, 3, 4, 6)))  # a tree's first branch as long as a chain's


def branches(seq: list[int], pos: int, seen: dict[tuple[int, ...], list[int]], width: int, depth: int) -> list[list[int]]:
    """The continuations earlier text offers after the longest match ending at ``pos``: one per following token, most
    frequent first (ties to the most recent), each the most recent such continuation, cut at ``pos``."""
    for n in MATCHES:
        ends = seen.get(tuple(seq[pos - n: pos]))
        if not ends:
            continue
        groups: dict[int, list[int]] = defaultdict(list)
        for end in reversed(ends):  # newest first
            groups[seq[end]].append(end)
        ranked = sorted(groups.values(), key=lambda ends_: -len(ends_))  # stable: the newest first among ties
        return [seq[ends_[0]: min(ends_[0] + depth, pos)] for ends_ in ranked[:width]]
    return []


def remember(seq: list[int], pos: int, seen: dict[tuple[int, ...], list[int]]) -> None:
    """The n-grams that end at ``pos`` (exclusive), with where what follows them begins."""
    for n in MATCHES:
        if pos - n >= 0:
            seen.setdefault(tuple(seq[pos - n: pos]), []).append(pos)


def speed_up(reply: Reply, verify: VerifyCost, lengths: tuple[int, ...]) -> float:
    """Plain decoding's cost over verifying the first ``len(lengths)`` branches, up to those lengths, at every step."""
    seq = reply.prompt + reply.tokens
    seen: dict[tuple[int, ...], list[int]] = {}
    start = len(reply.prompt) + 1
    for pos in range(start):
        remember(seq, pos, seen)
    pos, seconds = start, 0.0
    while pos < len(seq):
        room = draft_limit(reply, verify, pos)  # an exact batch, within the reply's max_tokens, as the engine drafts
        found = branches(seq, pos, seen, len(lengths), max(lengths))
        cut = [b[:k] for b, k in zip(found, lengths)]
        while cut and sum(map(len, cut)) > room:  # the last branch gives way first
            cut[-1] = cut[-1][:-1]
            cut = [b for b in cut if b]
        rows = 1 + sum(map(len, cut))
        step = 1 + max((common_prefix(b, seq[pos: pos + len(b)]) for b in cut), default=0)
        seconds += verify(rows)
        for p in range(pos, min(pos + step, len(seq))):  # never the new position: what follows it is the future
            remember(seq, p, seen)
        pos += step
    return (len(reply.tokens) - 1) * verify(1) / seconds


def gpu_like(real: VerifyCost) -> VerifyCost:
    """A batch row at 2 % of a step (the tests' stand-in for a GPU), at this machine's step."""
    return VerifyCost(real.sizes, tuple(real.seconds[0] * (1 + 0.02 * (b - 1)) for b in real.sizes), real.exact)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_options(parser)
    parser.add_argument("--profile", default="ngram")
    args = parser.parse_args()
    engine, replies = recorded(args)
    verify = swept(engine, 33)
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
