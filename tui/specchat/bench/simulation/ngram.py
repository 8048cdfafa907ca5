"""Draft-length policies for n-gram drafts simulated over greedy replies, without timing noise.

Greedy output does not depend on speculation, so each task's reply is decoded once, plainly, on the real model; then
a policy is stepped over it: at each step the real n-gram drafter proposes from the conversation so far, the policy
picks how many tokens to verify, and the recorded reply says how many the target accepts. A step's cost is the
target's verify time for that batch, from a verify sweep on the same model, threads and backend; the speed-up is
plain decoding's cost over the policy's (decode steps only, as `specchat bench` reports). ``ORACLE`` verifies the best
prefix of each proposal; ``match_table`` and ``copy_ceiling`` bound what a policy, and any copying drafter, could get.
`benchmarks/ngram_simulation.py` compares them; the tests step the engine's own "auto" through them.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right

from ...engine import TokenEmitted
from ...engine.core import Engine
from ...engine.draft_length.auto_length import CALIBRATE_EVERY, explored_copy
from ...engine.draft_length.costs import measure_verify_cost, sizes_up_to
from ...engine.draft_length.policies import HAZARD_CLASSES, MatchHazards, VerifyCost
from ...engine.drafters import Draft
from ...engine.drafters.ngram import NgramDrafter
from ...engine.llama import common_prefix
from ...engine.rules import Rules
from ...profiles import load_profile, run_config
from ..runners import conversation_before
from ..tasks import Task


@dataclasses.dataclass
class Reply:
    task: Task
    prompt: list[int]
    tokens: list[int]


class Policy:
    """What the simulation asks of a policy: the engine's ``MatchHazards`` interface."""

    def plan(self, match: int) -> int:
        raise NotImplementedError

    def observe(self, match: int, judged: list[bool]) -> bool:
        return False


class Fixed(Policy):
    def __init__(self, k: int, shortest: int = 0) -> None:
        self.k, self.shortest = k, shortest

    def plan(self, match: int) -> int:
        return self.k if match >= self.shortest else 0


class EngineAuto(Policy):
    """``MatchHazards`` as the engine steps it (``Adaptive``): a plain step when drafting has not paused for
    ``CALIBRATE_EVERY`` steps, now and then a longer draft (``explored_copy``), never longer than the reply has earned
    (``MatchHazards.cap``)."""

    def __init__(self, hazards: MatchHazards, per_reply: bool = True) -> None:
        self.hazards, self.steps, self.since_plain, self.per_reply = hazards, 0, 0, per_reply
        if not per_reply:  # "auto, pooled": as before a reply earned its draft length and weighed the past as a prior
            hazards.cap = hazards.k_max

    @property
    def calibrating(self) -> bool:
        """The engine's plain step: it proposes nothing (so nothing is judged)."""
        return self.since_plain >= CALIBRATE_EVERY - 1

    def plan(self, match: int) -> int:
        # The engine's choice for a copy on this match (``explored_copy``) as if it went on to the policy's longest:
        # the simulation cuts it to the proposal.
        copy = Draft([0] * self.hazards.k_max, match=match, from_text=True)
        return explored_copy(self.hazards, copy, self.steps, self.hazards.k_max)

    def begin_reply(self) -> None:
        if self.per_reply:
            self.hazards.begin_reply()

    def observe(self, match: int, judged: list[bool]) -> bool:
        return self.hazards.observe(match, judged)

    def stepped(self, drafted: int) -> None:
        self.steps += 1
        self.since_plain = 0 if drafted == 0 else self.since_plain + 1


class Table(Policy):
    """A fixed draft length per match-length class."""

    EDGES = [shortest for shortest, _ in HAZARD_CLASSES]

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def plan(self, match: int) -> int:
        return self.lengths[bisect_right(self.EDGES, match) - 1]


ORACLE = object()


def record(engine: Engine, tasks: list[Task]) -> list[Reply]:
    """Each task's greedy reply, turn by turn: a later turn follows the model's own reply to the one before."""
    replies = []
    for task in tasks:
        engine.clear_cache(replies=True)
        engine.restore(conversation_before(engine.config, task))
        for number, prompt in enumerate(task.turns(), start=1):
            events = list(engine.reply(prompt, max_tokens=task.max_tokens))
            tokens = [e.token for e in events if isinstance(e, TokenEmitted)]
            conversation = list(engine.tokens)
            assert conversation[len(conversation) - len(tokens):] == tokens
            name = f"{task.name}/{number}" if task.follow_ups else task.name
            replies.append(Reply(dataclasses.replace(task, name=name), conversation[: len(conversation) - len(tokens)], tokens))
    return replies


def draft_limit(reply: Reply, verify: VerifyCost, pos: int) -> int:
    """The most draft tokens a step at ``pos`` may verify, as the engine limits it: an exact batch, with room for the
    target's own token after the draft and within the reply's max_tokens."""
    return min(verify.exact - 1, reply.task.max_tokens - (pos - len(reply.prompt)) - 1)


def simulate(reply: Reply, policy: Policy | object, verify: VerifyCost, rules: Rules, drafter: NgramDrafter) -> float:
    """Plain decoding's cost over the policy's, for the steps after the first token (which the prefill yields)."""
    seq, reply_tokens = reply.prompt + reply.tokens, reply.tokens
    drafter.forget()  # a cold run, as `specchat bench` times by default
    if isinstance(policy, EngineAuto):
        policy.begin_reply()
    pos, seconds = len(reply.prompt) + 1, 0.0
    while pos < len(seq):
        limit = draft_limit(reply, verify, pos)
        if isinstance(policy, EngineAuto) and policy.calibrating:
            limit = 0
        proposal = drafter.propose(seq[:pos], limit, rules) if limit > 0 else None
        tokens = proposal.tokens if proposal is not None else []
        right = 0
        while right < len(tokens) and pos + right < len(seq) and tokens[right] == seq[pos + right]:
            right += 1
        if policy is ORACLE:
            k = max(range(right + 1), key=lambda n: (n + 1) / verify(n + 1))
        else:
            k = min(policy.plan(proposal.match), len(tokens)) if tokens else 0
        accepted = min(right, k)
        judged = [True] * accepted + ([tokens[accepted] == seq[pos + accepted]]
                                      if accepted < len(tokens) and pos + accepted < len(seq) else [])
        if policy is not ORACLE:
            policy.observe(proposal.match if tokens else 0, judged)
        if isinstance(policy, EngineAuto):
            policy.stepped(k)
        seconds += verify(k + 1)
        pos += accepted + 1
    return (len(reply_tokens) - 1) * verify(1) / seconds


TABLE_LENGTHS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48)
TABLE_STARTS = ((0,) * 11, (4,) * 11, (8,) * 11, (0, 0, 1, 2, 3, 4, 6, 8, 8, 8, 8), (0, 2, 4, 8, 12, 16, 24, 32, 32, 32, 32))


def match_table(reply: Reply, verify: VerifyCost, rules: Rules, drafter: NgramDrafter) -> float:
    """The speed-up of the best length-per-match-class table for this reply, found knowing the reply: coordinate
    descent from several starting tables (a local optimum each, so the best of them bounds the true best from below)."""
    best = 0.0
    for start in TABLE_STARTS:
        lengths = list(start)
        here = simulate(reply, Table(lengths), verify, rules, drafter)
        improved = True
        while improved:
            improved = False
            for i in range(len(lengths)):
                for k in TABLE_LENGTHS:
                    trial = lengths[:i] + [k] + lengths[i + 1:]
                    speed = simulate(reply, Table(trial), verify, rules, drafter)
                    if speed > here + 1e-9:
                        here, lengths, improved = speed, trial, True
        best = max(best, here)
    return best


def copy_ceiling(reply: Reply, verify: VerifyCost) -> float:
    """Plain decoding's cost over the cheapest plan of drafts that are each an earlier verbatim copy, chosen knowing
    the reply."""
    seq, start, end = reply.prompt + reply.tokens, len(reply.prompt) + 1, len(reply.prompt) + len(reply.tokens)
    # cost[pos]: the least verify time that decodes seq[pos:]. A step at pos may verify up to the longest run of the
    # reply from pos found whole before pos, and yields one token more (the target's own), possibly past the end.
    cost = {end: 0.0, end + 1: 0.0}
    for pos in range(end - 1, start - 1, -1):
        limit = max(0, draft_limit(reply, verify, pos))
        copyable = max(common_prefix(seq[source:pos], seq[pos : pos + limit]) for source in range(pos))
        cost[pos] = min(verify(k + 1) + cost[pos + k + 1] for k in range(copyable + 1))
    return (len(reply.tokens) - 1) * verify(1) / cost[start]


def recorded(profile: str, tasks: list[Task]) -> tuple[Engine, list[Reply]]:
    """``tasks``' greedy replies (``record``), on an engine of ``profile``'s target decoding plainly."""
    config = dataclasses.replace(run_config(load_profile(profile)), adapt_threads=False)
    engine = Engine(dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none")))
    return engine, record(engine, tasks)


def swept(engine: Engine, largest: int) -> VerifyCost:
    """A verify sweep up to ``largest`` rows on the engine's context."""
    return measure_verify_cost(engine.ctx, max(engine.target.bos, 0), sizes_up_to(largest))


def sweep_line(verify: VerifyCost) -> str:
    """The sweep in plain steps, one line."""
    steps = ", ".join(f"{b}: {s / verify(1):.2f}" for b, s in zip(verify.sizes, verify.seconds))
    return f"verify sweep: {steps} plain steps; exact up to {verify.exact} rows"
