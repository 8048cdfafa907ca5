"""``n_max = "auto"``: each step's draft length from the target's measured verify costs and the acceptance seen.

If each draft position is accepted with probability a (given the earlier ones were), a draft of k tokens yields
E(k) = 1 + a + … + a^k tokens (the correction or bonus included), and the step costs verify(k + 1) + k · draft_cost,
where verify(b) is the measured time of a b-token verify batch. The policy drafts the k that maximises E(k) / cost; it
stops drafting when even that k is expected to run slower than plain decoding (1 / verify(1)) and starts again only
when the expected gain is clearly positive, so an estimate that wobbles around parity does not flap.

While off it probes now and then with one draft, so it can notice that the text became predictable; a probe that
loses doubles the wait before the next, one that wins resets it. A pair whose draft costs so much that even a draft
that is always right could not win is never probed. What is judged is always the acceptance seen: drafting costs come
from the measured curve, so a probe is not penalised for the draft model catching up on the text it missed.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

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
        self.ceiling = self.best(1.0, verify, draft_cost, k_max)[1]  # what a draft that is always right would gain
        self.k, self.gain = self.best(self.acceptance, verify, draft_cost, k_max)
        self.active = self.gain >= START_ABOVE
        self.reason = "" if self.active else self._why_off()
        self._probe_k = self.best(max(PROBE_ACCEPTANCE, self._acceptance_to_win()), verify, draft_cost, k_max)[0]

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
        if self.active and self.gain < STOP_BELOW:
            self.active, self.probe_every, self._since_probe = False, PROBE_EVERY, 0
        elif not self.active and self.gain >= START_ABOVE:
            self.active, self.probe_every = True, PROBE_EVERY
        elif probed:
            self.probe_every = min(self.probe_every * 2, PROBE_EVERY_MAX)
        self.reason = "" if self.active else self._why_off()
        return self.active != was

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


# Prompt lookup: how likely a draft is right depends mostly on how far back the text before it matches the earlier text
# it copies (a long match means the reply is copying, and copies tend to go on). Each class of match length learns its
# own acceptance, starting from a prior that trusts longer matches more: (shortest match of the class, (accepted,
# rejected) pseudo-counts).
MATCH_CLASSES = ((0, (1.0, 2.0)), (4, (2.0, 2.0)), (8, (4.0, 1.0)), (16, (9.0, 1.0)), (32, (19.0, 1.0)),
                 (64, (49.0, 1.0)), (128, (99.0, 1.0)))


class MatchClasses:
    """``n_max = "auto"`` for n-gram drafts: one ``AutoDraftLength`` per class of match length.

    Drafting costs nothing here, so the draft is proposed first and its match decides how much of it to verify.
    """

    def __init__(self, verify: VerifyCost, k_max: int) -> None:
        self.classes = [(shortest, AutoDraftLength(verify, 0.0, k_max, prior)) for shortest, prior in MATCH_CLASSES]
        self._last: AutoDraftLength | None = None
        self.k = 0  # the length chosen last

    def _class(self, match: int) -> AutoDraftLength:
        return next(policy for shortest, policy in reversed(self.classes) if match >= shortest)

    def plan(self, match: int) -> int:
        """How many tokens of a draft whose text before it matched ``match`` tokens to verify."""
        self._last = self._class(match)
        self.k = self._last.plan()
        return self.k

    def observe(self, drafted: int, accepted: int) -> bool:
        """Learn from the step planned last (a step without a match planned nothing and teaches nothing)."""
        policy, self._last = self._last, None
        was = self.active
        if policy is not None:
            policy.observe(drafted, accepted)
        return self.active != was

    @property
    def active(self) -> bool:
        return any(policy.active for _, policy in self.classes)

    @property
    def reason(self) -> str:
        if self.active:
            return ""
        longest = self.classes[-1][1]
        return (f"auto: no match length expected to win (even {self.classes[-1][0]}+ token matches: "
                f"{longest.gain:.2f}× plain decoding at {longest.acceptance:.0%} acceptance); trying now and then")
