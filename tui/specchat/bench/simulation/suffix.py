"""The suffix drafter simulated over recorded replies: "auto" as the engine runs it (``Adaptive`` for method "suffix",
fed each step as the engine feeds it), against the oracle of the same drafter, with earlier replies indexed as stored
chats are (``indexed``). `benchmarks/suffix_simulation.py` runs it over ``repeated_work.toml``'s families."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...engine.core import Engine
from ...engine.draft_length.auto_length import Adaptive
from ...engine.draft_length.policies import VerifyCost
from ...engine.drafters import NO_DRAFT
from ...engine.drafters.stored_chats import StoredChatsDrafter, StoredChatsIndex, StoredReply, documents_of
from ...engine.drafters.stored_chats_cache import TokenCache
from ...engine.drafters.suffix import SuffixDrafter
from ...engine.loop import StepOutcome
from ...engine.rules import Rules
from .ngram import Reply, draft_limit


END = -1  # the target's token after a reply's last one: its end token, which the recorded reply does not hold


def accepted(tokens: list[int], seq: list[int], pos: int) -> int:
    """How many of ``tokens`` the recorded conversation ``seq`` has from ``pos`` on."""
    right = 0
    while right < len(tokens) and pos + right < len(seq) and tokens[right] == seq[pos + right]:
        right += 1
    return right


class ColdSuffix(SuffixDrafter):
    def forget(self) -> None:
        """Before each replayed reply (``ngram.simulate``): no reply of this process to copy, as `specchat bench`
        times by default; the stored chats stay."""
        self.ngram.forget()


def simulate_auto(reply: Reply, auto: Adaptive, verify: VerifyCost, rules: Rules, drafter: ColdSuffix) -> float:
    """Plain decoding's cost over ``auto``'s on this reply, each step planned, chosen and learned from as the engine's
    step loop (``Engine._decode``, ``loop.speculate``) does."""
    seq = reply.prompt + reply.tokens
    drafter.forget()
    auto.begin_reply()
    pos, seconds = len(reply.prompt) + 1, 0.0
    while pos < len(seq):
        k, choose = auto.plan(draft_limit(reply, verify, pos))
        proposal = drafter.propose(seq[:pos], k, rules) if k > 0 else NO_DRAFT
        kept = choose(proposal) if choose is not None and proposal.tokens else min(k, len(proposal.tokens))
        tokens = proposal.tokens[:kept]
        right = accepted(tokens, seq, pos)
        outcome = StepOutcome(
            drafted=len(tokens), n_accepted=right, accepted=tokens[:right], rejected=tokens[right:],
            token=seq[pos + right] if pos + right < len(seq) else END, match=proposal.match,
            next_proposed=proposal.tokens[kept] if len(proposal.tokens) > kept else None,
            t_batch=verify(len(tokens) + 1), draft=replace(proposal, tokens=tokens) if tokens else NO_DRAFT)
        auto.observe(outcome, pos)
        seconds += verify(len(tokens) + 1)
        pos += right + 1
    return (len(reply.tokens) - 1) * verify(1) / seconds


def indexed(engine: Engine, earlier: list[Reply], folder: Path) -> StoredChatsDrafter:
    """The earlier replies as the engine indexes stored chats (``history.documents_of``: the question rendered alone,
    the reply's own tokens)."""
    target = engine.target
    stored = [StoredReply((i, 0), reply.task.prompt, target.detokenize(reply.tokens), tuple(reply.tokens),
                          target.identity) for i, reply in enumerate(earlier)]
    documents = documents_of(stored, target.identity, engine.template,
                             lambda text: target.tokenize(text, add_special=False), lambda: None,
                             TokenCache(folder / "tokens.npz"))
    return StoredChatsDrafter(index=StoredChatsIndex(documents))
