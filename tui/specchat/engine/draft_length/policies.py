"""``n_max = "auto"``: each step's draft length from the target's measured verify costs and the acceptance seen.

Model drafts (``AutoDraftLength``): if each draft position is accepted with probability a (given the earlier ones were), a draft of k tokens yields
E(k) = 1 + a + … + a^k tokens (the correction or bonus included), and the step costs verify(k + 1) + k · draft_cost,
where verify(b) is the measured time of a b-token verify batch. The policy drafts the k that maximises E(k) / cost; it
stops drafting when even that k is expected to run slower than plain decoding (1 / verify(1)) and starts again only
when the expected gain is clearly positive, so an estimate that wobbles around parity does not flap.

While off it probes now and then with one draft, so it can notice that the text became predictable; a probe that
loses doubles the wait before the next, one that wins resets it. A pair whose draft costs so much that even a draft
that is always right could not win is never probed. What is judged is always the acceptance seen: drafting costs come
from the measured curve, so a probe is not penalised for the draft model catching up on the text it missed.

n-gram drafts (``MatchHazards``) cost nothing to propose, so their length is chosen after seeing the proposal, from
how far back its match reaches; see below.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

PRIOR = (2.0, 2.0)  # accepted and rejected judgements assumed before any is seen
MEMORY_STEPS = 96  # the evidence of a step fades by 1/MEMORY_STEPS with each later step: the text moves on
START_ABOVE = 1.05  # start drafting when the best draft is expected to run this much faster than plain decoding
STOP_BELOW = 0.98  # stop when it is expected to run slower than this
PROBE_EVERY = 16  # plain steps between probes, at first
PROBE_EVERY_MAX = 256
PROBE_ACCEPTANCE = 0.9  # a probe drafts the length that would be best at this acceptance: long enough to show a win


@dataclass(frozen=True)
class VerifyCost:
    """Seconds the target takes to verify a batch of b tokens with logits on every row, measured at ``sizes``, and the
    largest of those batches whose logits equal one-at-a-time decoding bit for bit (``exact``)."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    exact: int = 1

    def __call__(self, b: int) -> float:
        """Linear between measured sizes, and beyond the last one along the last segment's slope."""
        sizes, seconds = self.sizes, self.seconds
        if b <= sizes[0]:
            return seconds[0]
        i = min(bisect_left(sizes, b), len(sizes) - 1)
        lo, hi = i - 1, i
        slope = (seconds[hi] - seconds[lo]) / (sizes[hi] - sizes[lo])
        return seconds[lo] + slope * (b - sizes[lo])


def expected_tokens(a: float, k: int) -> float:
    """Tokens a step yields from a k-token draft whose positions are each accepted with probability a."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


class AutoDraftLength:
    def __init__(self, verify: VerifyCost, draft_cost: float, k_max: int, prior: tuple[float, float] = PRIOR) -> None:
        self.verify, self.draft_cost, self.k_max = verify, draft_cost, k_max
        self.prior = prior
        self.evidence = [0.0, 0.0]  # accepted and rejected judgements seen, faded
        self.probe_every = PROBE_EVERY
        self._since_probe = 0
        self._probing = False
        self.active = False
        self.reprice(verify, draft_cost)

    def reprice(self, verify: VerifyCost, draft_cost: float) -> bool:
        """Take up costs learned since (``learned_costs``); returns True when that switched speculation on or off."""
        self.verify, self.draft_cost = verify, draft_cost
        self.ceiling = self.best(1.0, verify, draft_cost, self.k_max)[1]  # what a draft always right would gain
        self._probe_k = self.best(max(PROBE_ACCEPTANCE, self._acceptance_to_win()), verify, draft_cost, self.k_max)[0]
        was = self.active
        self.k, self.gain = self.best(self.acceptance, verify, draft_cost, self.k_max)
        self._switch(probed=False)
        return self.active != was

    def _switch(self, *, probed: bool) -> None:
        """On or off by the expected gain, with a margin each way so an estimate near parity does not flap."""
        if self.active and self.gain < STOP_BELOW:
            self.active, self.probe_every, self._since_probe = False, PROBE_EVERY, 0
        elif not self.active and self.gain >= START_ABOVE:
            self.active, self.probe_every = True, PROBE_EVERY
        elif probed:
            self.probe_every = min(self.probe_every * 2, PROBE_EVERY_MAX)
        self.reason = "" if self.active else self._why_off()

    @staticmethod
    def best(a: float, verify: VerifyCost, draft_cost: float, k_max: int) -> tuple[int, float]:
        """The draft length with the highest expected speed over plain decoding, and that speed-up."""
        plain = verify(1)
        k, gain = max(((k, expected_tokens(a, k) * plain / (verify(k + 1) + k * draft_cost))
                       for k in range(1, k_max + 1)), key=lambda kg: kg[1])
        return k, gain

    @property
    def acceptance(self) -> float:
        accepted = self.prior[0] + self.evidence[0]
        return accepted / (accepted + self.prior[1] + self.evidence[1])

    @property
    def hopeless(self) -> bool:
        return self.ceiling < START_ABOVE

    def plan(self) -> int:
        """Draft length for the next step; 0 means a plain step."""
        if self.active:
            return self.k
        if self.hopeless:
            return 0
        self._since_probe += 1
        if self._since_probe < self.probe_every:
            return 0
        self._since_probe = 0
        self._probing = True
        # What was seen before speculation went off describes text that has moved on: the probe is judged alone.
        self.evidence = [0.0, 0.0]
        return self._probe_k

    def observe(self, drafted: int, accepted: int) -> bool:
        """Learn from a finished step; returns True when it switched speculation on or off."""
        fade = 1 - 1 / MEMORY_STEPS
        self.evidence = [self.evidence[0] * fade, self.evidence[1] * fade]
        if drafted == 0:  # a plain step, or a drafter that found nothing to propose: nothing was judged
            self._probing = False
            return False
        self.evidence[0] += accepted
        self.evidence[1] += accepted < drafted
        self.k, self.gain = self.best(self.acceptance, self.verify, self.draft_cost, self.k_max)
        was, probed = self.active, self._probing
        self._probing = False
        self._switch(probed=probed)
        return self.active != was

    def state(self) -> dict:
        """What was learned, for ``learned_store``: the acceptance evidence and whether drafting was on."""
        return {"evidence": [float(e) for e in self.evidence], "active": self.active, "probe_every": self.probe_every}

    def restore(self, state: object) -> bool:
        """Take up what an earlier process learned, if it is sane; returns whether it was."""
        try:
            evidence = [float(e) for e in state["evidence"]]  # type: ignore[index]
            active, probe_every = state["active"], state["probe_every"]  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return False
        if (len(evidence) != 2 or not all(0 <= e <= MEMORY_STEPS * 1024 for e in evidence)
                or not isinstance(active, bool) or not isinstance(probe_every, int)
                or not PROBE_EVERY <= probe_every <= PROBE_EVERY_MAX):
            return False
        self.evidence, self.active, self.probe_every = evidence, active and not self.hopeless, probe_every
        self.k, self.gain = self.best(self.acceptance, self.verify, self.draft_cost, self.k_max)
        self._switch(probed=False)
        return True

    def _acceptance_to_win(self) -> float:
        if self.hopeless:
            return 1.0
        lo, hi = 0.0, 1.0
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.best(mid, self.verify, self.draft_cost, self.k_max)[1] >= START_ABOVE else (mid, hi)
        return hi

    def _why_off(self) -> str:
        if self.hopeless:
            return (f"auto: even a perfect draft could not win here (at most {self.ceiling:.2f}× plain decoding: a"
                    f" draft token costs {self.draft_cost / self.verify(1):.0%} of a target step, and verifying"
                    f" {self.k_max + 1} tokens costs {self.verify(self.k_max + 1) / self.verify(1):.1f} steps)")
        return (f"auto: drafts expected at {self.gain:.2f}× plain decoding ({self.acceptance:.0%} acceptance, best"
                f" length {self.k}); trying one now and then")


# Prompt lookup. Whether a copied token is right depends mostly on how far back the text before it matches the earlier
# text it copies: at a draft's i-th token that is the draft's match plus the i - 1 draft tokens before it, all right if
# this one is judged. So one hazard — the chance that the next copied token is wrong — per class of that effective match
# length describes every position of every draft, and a draft that starts on a short match is judged like one that
# grew into it. Classes: (shortest effective match, prior hazard). The prior only says longer matches copy better (a
# long match means the reply is copying); what is seen replaces it within a few dozen judgements.
HAZARD_CLASSES = ((0, 0.6), (3, 0.45), (4, 0.3), (6, 0.2), (8, 0.12), (12, 0.08), (16, 0.05), (24, 0.04), (32, 0.03),
                  (64, 0.03), (128, 0.03))
HAZARD_PRIOR_WEIGHT = 4.0  # judgements the prior counts as
HAZARD_MEMORY = 256  # judgements fade by 1/HAZARD_MEMORY each step: the text moves on, slowly
DRAFT_ABOVE = 1.02  # draft when the best length is expected to run this much faster than plain decoding
# The hazards are learned over every reply (and kept between processes), so a reply starts with what copies taught
# them: a free-text reply that restates the question meets a long match and drafted 31 tokens for one accepted, the
# cost of twenty plain steps. Within a reply a draft is therefore at most twice the longest run of right tokens the
# reply has shown so far, and SLOW_START before any: what a wrong prior costs is a few short drafts, and a reply that
# copies reaches the long ones within a few steps (each doubling the last).
SLOW_START = 8
# And a reply weighs what earlier replies taught as at most this many judgements per match class: a memory learned
# on copies (2-token matches right nine times in ten) no longer outweighs the reply's own first misses, so free text
# unlearns a wrong prior within a handful of judgements, while a copying reply confirms a right one as fast.
CARRIED_JUDGEMENTS = 8.0


class MatchHazards:
    """``n_max = "auto"`` for n-gram drafts: each step's length from the hazards by effective match length.

    A k-token draft on a match m yields E(k) = 1 + S(1) + … + S(k) tokens, S(j) the chance its first j tokens are all
    right (the product of 1 - hazard over effective matches m … m + j - 1), and costs verify(k + 1): the policy verifies
    the k that maximises E(k) / verify(k + 1), or none when that is not clearly faster than a plain step. Proposing
    costs nothing, so a plain step judges the proposal too (was its first token the target's?), and so does the token
    after a fully accepted draft: every class keeps learning without drafts spent on probing.

    This runs on every step, right after the target's decode has pushed everything else out of the CPU's caches, where
    each numpy call on these few numbers cost 5–10 µs: as numpy it took 60–150 µs a step, beside as much for the
    learned costs (docs/benchmarks.md, ``benchmarks/engine_overhead.py --method ngram``). So it is plain Python on
    lists, what a step needs is computed when it is asked for, and a length's scan stops once no longer draft can do
    better (``_scan``).
    """

    def __init__(self, verify: VerifyCost, k_max: int) -> None:
        self.k_max = k_max
        self.edges = [shortest for shortest, _ in HAZARD_CLASSES]
        self._prior = [((1 - h) * HAZARD_PRIOR_WEIGHT, h * HAZARD_PRIOR_WEIGHT) for _, h in HAZARD_CLASSES]
        self._evidence = [[0.0, 0.0] for _ in HAZARD_CLASSES]  # right and wrong judgements per class, faded
        # The class of every effective match length a draft can reach (longer ones are the last class's).
        self._class_of = [bisect_right(self.edges, m) - 1 for m in range(self.edges[-1] + k_max + 1)]
        self.k = 0  # the length chosen last
        self.cap = SLOW_START  # the longest draft this reply has earned (SLOW_START)
        self._hazards: list[float] | None = None  # derived from the evidence when asked for (``_changed``)
        self._active: bool | None = None
        self._price(verify)

    def reprice(self, verify: VerifyCost) -> bool:
        """Take up costs learned since (``learned_costs``); returns True when that switched speculation on or off."""
        was = self.active
        self._price(verify)
        return self.active != was

    def _price(self, verify: VerifyCost) -> None:
        # Speed of a k-token draft yielding one token, relative to plain decoding, for k = 0 … k_max; and the best of
        # it from k on, which bounds what a longer draft could still gain.
        plain = verify(1)
        self._per_token = [plain / verify(k + 1) for k in range(self.k_max + 1)]
        self._best_from = list(accumulate(reversed(self._per_token), max))[::-1]
        self._changed()

    @property
    def evidence(self) -> np.ndarray:
        """Right and wrong judgements per class, faded (a copy)."""
        return np.array(self._evidence)

    def hazards(self) -> np.ndarray:
        return np.array(self._hazard_list())

    def _hazard_list(self) -> list[float]:
        if self._hazards is None:
            self._hazards = [(p_wrong + wrong) / (p_right + right + p_wrong + wrong)
                             for (p_right, p_wrong), (right, wrong) in zip(self._prior, self._evidence)]
        return self._hazards

    def best(self, match: int, longest: int | None = None,
             survival: Sequence[float] | None = None) -> tuple[int, float]:
        """The draft length (up to ``longest``) for a match of ``match`` tokens with the highest expected speed-up,
        and that speed-up. ``survival``: the drafter's own estimate of the chance that its first 1, 2, … tokens are all
        right (a copy scored by how often earlier text went on that way); the lower of it and the hazards' holds, and
        the draft is no longer than it."""
        n = self.k_max if survival is None else min(len(survival), self.k_max)
        return self._scan(match, n if longest is None else min(n, longest), survival)

    def _scan(self, match: int, n: int, survival: Sequence[float] | None = None,
              enough: float | None = None) -> tuple[int, float]:
        """The best of drafts of 0 … ``n`` tokens from ``match``, stopping early once one reaches ``enough`` or once
        no longer one can beat the best so far (each later token adds at most the survival reached, and a token's
        speed is at most ``_best_from``): the same answer as scanning every length."""
        hazards, class_of, per_token, best_from = self._hazard_list(), self._class_of, self._per_token, self._best_from
        start = min(match, self.edges[-1])  # hazards are constant beyond the longest class
        alive, expected = 1.0, 1.0
        best_k, best_gain = 0, per_token[0]
        for j in range(1, n + 1):
            alive *= 1 - hazards[class_of[start + j - 1]]
            expected += alive if survival is None else min(alive, survival[j - 1])
            gain = expected * per_token[j]
            if gain > best_gain:
                best_k, best_gain = j, gain
                if enough is not None and gain >= enough:
                    break
            bound = (expected + alive * (n - j)) * (best_from[j + 1] if j < n else 0.0)
            if bound <= best_gain or (enough is not None and bound < enough):
                break
        return best_k, best_gain

    def survives(self, match: int, n: int, survival: Sequence[float] | None = None) -> float:
        """The chance that the first ``n`` tokens (at most ``k_max``) of a copy on a match of ``match`` tokens are all
        right: the hazards' and, where the drafter scored the copy (``survival``, see ``best``), the lower of that
        and its own — 0 where its score stops short of ``n`` (the drafter saw no evidence that far)."""
        n = min(n, self.k_max)
        if n <= 0:
            return 1.0
        hazards, class_of = self._hazard_list(), self._class_of
        start = min(match, self.edges[-1])
        alive = 1.0
        for j in range(n):
            alive *= 1 - hazards[class_of[start + j]]
        if survival is not None:
            alive = min(alive, survival[n - 1] if n <= len(survival) else 0.0)
        return alive

    def plan(self, match: int, survival: Sequence[float] | None = None) -> int:
        """How many tokens of a draft whose text before it matched ``match`` tokens to verify (``survival``: see
        ``best``): the best length this reply has earned (``cap``), if that is clearly faster than a plain step."""
        k, gain = self.best(match, self.cap, survival)
        self.k = k if gain >= DRAFT_ABOVE else 0
        return self.k

    def begin_reply(self) -> None:
        """A new reply earns its long drafts again (SLOW_START) and weighs earlier replies' judgements as a prior
        (CARRIED_JUDGEMENTS per class), not as its own."""
        self.cap = SLOW_START
        for pair in self._evidence:
            scale = min(1.0, CARRIED_JUDGEMENTS / max(pair[0] + pair[1], 1e-12))
            pair[0] *= scale
            pair[1] *= scale
        self._changed()

    def observe(self, match: int, judged: Sequence[bool]) -> bool:
        """Learn from a step: ``judged`` says, position by position from the first proposed token, whether the
        proposal was the target's token. Returns True when speculation switched on or off."""
        was = self.active
        fade = 1 - 1 / HAZARD_MEMORY
        for pair in self._evidence:
            pair[0] *= fade
            pair[1] *= fade
        class_of, last = self._class_of, len(self._class_of) - 1
        run = 0
        for i, right in enumerate(judged):
            self._evidence[class_of[min(match + i, last)]][0 if right else 1] += 1.0
            run = run + 1 if right and run == i else run
        self.cap = max(self.cap, 2 * run)
        self._changed()
        return self.active != was

    def state(self) -> dict:
        """What was learned, for ``learned_store``: right and wrong judgements per class."""
        return {"classes": list(self.edges), "evidence": [list(pair) for pair in self._evidence]}

    def restore(self, state: object) -> bool:
        """Take up what an earlier process learned, if it is for the same classes and sane; returns whether it was."""
        try:
            classes, evidence = list(state["classes"]), np.array(state["evidence"], dtype=float)  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return False
        if (classes != self.edges or evidence.shape != (len(self.edges), 2)
                or not np.all(np.isfinite(evidence)) or not np.all((evidence >= 0) & (evidence <= HAZARD_MEMORY * 1024))):
            return False
        self._evidence = evidence.tolist()
        self._changed()
        return True

    def _changed(self) -> None:
        """The evidence or the costs moved: what was derived from them is derived again when next asked for."""
        self._hazards = None
        self._active = None

    @property
    def active(self) -> bool:
        """Some match length would be drafted (the longest matches, the likeliest to, are tried first)."""
        if self._active is None:
            self._active = any(self._scan(start, self.k_max, enough=DRAFT_ABOVE)[1] >= DRAFT_ABOVE
                               for start in reversed(self.edges))
        return self._active

    @property
    def reason(self) -> str:
        if self.active:
            return ""
        longest = self.edges[-1]
        return (f"auto: no match length expected to win (even {longest}+ token matches:"
                f" {self.best(longest)[1]:.2f}× plain decoding, {self._hazard_list()[-1]:.0%} of their copied tokens"
                " wrong)")
