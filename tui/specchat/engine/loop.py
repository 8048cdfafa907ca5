"""One step of speculative decoding — draft → verify → accept → roll back — readable in one place.

The target's cache holds the conversation minus its newest token, the *pending* one. A step decodes
``[pending, d1..dk]`` in one batch with logits on every row; row i judges d(i+1). The first rejected position yields
the target's own token (a correction); a fully accepted draft earns the token after it (a bonus); a step without a
draft yields a plain target token. Rejected positions leave the cache before the step returns, so the cache again
holds the conversation minus its newest token. (llama.cpp's ``examples/speculative-simple`` is the same loop.)

Two rules keep sampled output exactly the target's, because what is judged must never depend on what was drafted:
- a drafted end-of-generation token stays in the draft and is judged like any other (accepted, it ends the reply);
- a sampled draft is never discarded after the fact: ``n_min`` drops only one-hot drafts (greedy or n-gram).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter

import numpy as np

from .candidates import RowJudgement, judge_rows
from .drafters import NO_DRAFT, Draft, Drafter
from .events import TokenKind
from .llama import SequenceCache
from .rules import Rules
from .sampling import accept_or_resample, distribution, greedy_token, pick


@dataclass
class StepOutcome:
    drafted: int = 0
    n_accepted: int = 0  # draft tokens the target agreed with, an accepted end token included
    accepted: list[int] = field(default_factory=list)  # the accepted tokens to show (an end token is not shown)
    rejected: list[int] = field(default_factory=list)  # the rejected tail of the draft, from its first rejected token
    token: int | None = None  # the target's own token after them; None when an accepted end token ended the reply
    kind: TokenKind = TokenKind.TARGET  # of ``token``
    ends_reply: bool = False
    ignored: int = 0
    withheld: int = 0
    match: int = 0  # n-gram drafts: how far back the copied text matched
    # The proposal's token after the verified draft, when it went further: the target's token judges it for free.
    next_proposed: int | None = None
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_batch: float = 0.0  # of t_verify, the batch's decode and judging (not the inspector's ranking nor the rollback)
    draft: Draft = NO_DRAFT  # as verified
    rows: list[RowJudgement] = field(default_factory=list)  # with ``Rules.top``: rows 0..n_accepted, as judged

    def judgements(self) -> list[bool]:
        """Position by position from the proposal's first token, whether it was the target's: the accepted draft
        tokens, then the first rejected one or the unverified one after a fully accepted draft."""
        judged = [True] * self.n_accepted
        if self.rejected:
            judged.append(False)
        elif self.next_proposed is not None and self.token is not None:
            judged.append(self.next_proposed == self.token)
        return judged


def speculate(target: SequenceCache, tokens: Sequence[int], drafter: Drafter | None, k: int, rules: Rules,
              choose: Callable[[Draft], int] | None = None) -> StepOutcome:
    """One step after ``tokens`` (the conversation; the target's cache holds all but its last token).

    ``k`` is the most draft tokens to verify; ``choose``, when given, decides from a copied draft — its match length,
    and the chance of each token's survival where the drafter scored it — how many of them (copies cost nothing to
    propose, so their length is chosen after seeing them).
    """
    # 1. Draft.
    start = perf_counter()
    draft = drafter.propose(tokens, k, rules) if drafter is not None and k > 0 else NO_DRAFT
    proposal = draft.tokens
    if choose is not None and draft.tokens and draft.from_text:
        kept = choose(draft)
        copied = draft.copied[: len(draft.copied) - len(draft.tokens) + kept] if draft.copied else None
        draft = replace(draft, tokens=draft.tokens[:kept], copied=copied)
    t_draft = perf_counter() - start
    ignored = 0
    if draft.q is None and 0 < len(draft.tokens) < rules.n_min:
        ignored, draft = len(draft.tokens), Draft([], None, draft.withheld, draft.match, from_text=draft.from_text,
                                                  origin=draft.origin)
    next_proposed = proposal[len(draft.tokens)] if draft.q is None and len(proposal) > len(draft.tokens) else None

    # 2. Verify in one batch. A drafted id the target does not have cannot be decoded; it is rejected (p = 0), so
    # the rows up to it are all the judging needs.
    start = perf_counter()
    base = len(tokens)
    readable = next((i for i, t in enumerate(draft.tokens) if t >= rules.vocab.n_vocab), len(draft.tokens))
    target.decode([tokens[-1], *draft.tokens[:readable]], all_logits=True)
    n_accepted, token = verify(target.logits(), draft, rules)
    t_batch = perf_counter() - start
    # What decided each shown token, for the inspector: the rows that judged the accepted tokens and chose the last.
    rows = judge_rows(target.logits(), draft.tokens, draft.q, draft.rows, n_accepted + (token is not None), rules.top,
                      rules.sampling) if rules.top else []

    # 3. Accept and roll back: the cache keeps the pending token and the accepted draft tokens (an accepted end
    # token is not kept: the reply ends before it, as it does before the target's own end token).
    ended_in_draft = token is None
    target.truncate(base + n_accepted - ended_in_draft)
    t_verify = perf_counter() - start

    return StepOutcome(
        drafted=len(draft.tokens), n_accepted=n_accepted,
        accepted=draft.tokens[: n_accepted - ended_in_draft], rejected=draft.tokens[n_accepted:],
        token=token, kind=kind_after(len(draft.tokens), n_accepted),
        ends_reply=ended_in_draft or rules.vocab.is_eog(token),
        ignored=ignored, withheld=draft.withheld, match=draft.match, next_proposed=next_proposed,
        t_draft=t_draft, t_verify=t_verify, t_batch=t_batch, draft=draft, rows=rows,
    )


def kind_after(drafted: int, accepted: int) -> TokenKind:
    """What the target's own token after a step is: plain (nothing drafted), a bonus (every draft token accepted) or
    a correction (of the first rejected one)."""
    if drafted == 0:
        return TokenKind.TARGET
    return TokenKind.BONUS if accepted == drafted else TokenKind.CORRECTED


def verify(rows: np.ndarray, draft: Draft, rules: Rules) -> tuple[int, int | None]:
    """How many draft tokens the target accepts, and its own token after them (None after an accepted end token)."""
    sampling = rules.sampling
    for i, token in enumerate(draft.tokens):
        if sampling.greedy:
            chosen = greedy_token(rows[i])
            ok = chosen == token
        else:
            q = draft.q[i] if draft.q is not None else None
            ok, chosen = accept_or_resample(distribution(rows[i], sampling), q, token, rules.rng)
        if not ok:
            return i, chosen
        if rules.vocab.is_eog(token):
            return i + 1, None
    return len(draft.tokens), pick(rows[len(draft.tokens)], sampling, rules.rng)
