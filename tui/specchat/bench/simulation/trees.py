"""Candidate trees simulated over recorded replies: several copied continuations verified in one batch (SuffixDecoding's
tree) against specchat's one chain, their cost the verify sweep's for that many rows. `benchmarks/candidate_trees.py`
compares them on this machine and on a GPU-like curve."""

from __future__ import annotations

import itertools
from collections import defaultdict

from ...engine.draft_length.policies import VerifyCost
from ...engine.llama import common_prefix
from .ngram import Reply, draft_limit


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
