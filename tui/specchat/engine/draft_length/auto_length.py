"""``n_max = "auto"`` for one configuration: its draft-length policies, the verify costs they learn from every step the
engine times (``learned_costs``), and what is kept from one process to the next (``learned_store``).

A configuration drafting with a model has an ``AutoDraftLength``; one copying earlier text has ``MatchHazards`` —
two where it copies from the stored chats too, since how often a copy survives depends on where it was copied from
(``recalled``); the combined method (``combined``) has both kinds. ``Adaptive`` is a ``draft_length.DraftLength``, as
a fixed ``n_max`` is. The policies decide; this feeds them what each step showed, adds the plain and the longer steps
that keep the learned costs true, and keeps what was learned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..drafters import Draft
from ..loop import StepOutcome
from .policies import AutoDraftLength, MatchHazards, VerifyCost
from .learned_costs import LearnedDraftCost, LearnedVerifyCost, moved
from .learned_store import LearnedStore

AUTO_K_MAX = {"draft": 16, "ngram": 64}  # longest draft "auto" considers: model drafts cost per token, n-grams not
# A plain step now and then, when drafting never pauses: the plain step is what every draft is compared with, and
# without timing one the learned costs cannot tell a machine that slowed everything from one that slowed big batches.
# (One step in 32 gives up that step's gain: under 1 % of a 1.3× speed-up, about 2 % of a 3× one.)
CALIBRATE_EVERY = 32
REPRICE_EVERY = 8  # steps between looks at whether the learned costs moved enough to re-price the policies (~40 µs)
# And one step in 16 drafts twice as long as planned, when the proposal allows and at least EXPLORE_FROM tokens were
# planned: it times a size the policy would not choose, so a size the sweep made look too dear (a busy minute) is
# found out; doubling climbs to the right one. (Near the best length the gain is flat: such a step loses a few per
# cent of its gain, well under 1 % overall. A short planned draft is a doubtful one: doubling it would mostly waste.)
EXPLORE_EVERY = 16
EXPLORE_FACTOR = 2
EXPLORE_FROM = 4
# A copy planned shorter than that is explored too where it is this likely to survive the longer length: there a short
# plan says the longer batches look dear, not that the copy is doubtful, and only timing one can say whether they are
# (2026-12-05: 8-row verifies timed during a busy minute kept a stored reply at 3 tokens a step, never timed again).
EXPLORE_SURVIVAL = 0.5


def exploring(step: int) -> bool:
    """Whether the step numbered ``step`` (from 0) is one that drafts longer than planned (``EXPLORE_EVERY``)."""
    return step % EXPLORE_EVERY == EXPLORE_EVERY // 2


def lengthened(k: int, step: int, k_max: int) -> int:
    """The draft length of the step numbered ``step`` whose policy planned ``k``: longer on an exploring step when at
    least ``EXPLORE_FROM`` tokens were planned, never beyond the policy's longest (``k_max``: within the sweep, and
    within the exact batches)."""
    if k >= EXPLORE_FROM and exploring(step):
        return min(k * EXPLORE_FACTOR, k_max)
    return k


def explored_copy(hazards: MatchHazards, copy: Draft, step: int, limit: int) -> int:
    """How much of a proposed ``copy`` to verify on the step numbered ``step``: its hazards' plan within what this
    reply has earned (``cap``) and ``limit``; on an exploring step twice the plan where that was long, as for a model
    draft, or the copy is likely right that far (``EXPLORE_SURVIVAL``)."""
    k = hazards.plan(copy.match, copy.survival)
    chosen = min(k, hazards.cap, limit)
    if k > 0 and exploring(step):
        longer = min(EXPLORE_FACTOR * k, hazards.k_max, hazards.cap, limit, len(copy.tokens))
        if longer > chosen and (k >= EXPLORE_FROM
                                or hazards.survives(copy.match, longer, copy.survival) >= EXPLORE_SURVIVAL):
            return longer
    return chosen


@dataclass
class Adaptive:
    costs: LearnedVerifyCost
    hazards: MatchHazards | None  # n-gram drafts: copies of the open conversation (and this process's other replies)
    acceptance: AutoDraftLength | None  # model drafts
    draft_cost: LearnedDraftCost | None
    memory: LearnedStore
    key: str  # of the policies' state in the memory
    costs_key: str  # of the learned costs', shared by every configuration of the same target and threads
    priced: VerifyCost  # the curve the policies were last priced with
    priced_draft: float = 0.0
    # Copies of the user's stored chats (the methods that read them: "suffix", "suffix+draft"), learned apart: a
    # stored reply that answered the same question goes on as copied long after a copy of this chat's own text would
    # break (2026-12-05: with the same hazards for both, a stored reply accepted whole was verified 3 tokens a step).
    recalled: MatchHazards | None = None
    copied_last: MatchHazards | None = None  # whichever hazards chose the last copy's length
    copy_k: int = 0  # that length as chosen: explored, within the reply's cap and the step's limit
    model_drafted_last: bool = False  # the previous step verified a model draft (the draft model is caught up)
    since_plain: int = 0  # steps since the last plain one
    steps: int = 0  # steps learned from

    @classmethod
    def open(cls, costs: LearnedVerifyCost, copies: bool, k_max: dict[str, int], draft_cost: float | None,
             memory: LearnedStore, key: str, costs_key: str, depth: int, *, recalls: bool = False) -> Adaptive:
        """The policies for a method's drafts — n-gram hazards for one that ``copies`` (and for its copies of stored
        chats, apart, for one that ``recalls`` them), the draft model's acceptance for one with a ``draft_cost`` —
        taking up what an earlier process kept."""
        costs.restore(memory.recall(costs_key))
        kept = memory.recall(key)
        state = kept if isinstance(kept, dict) else {}
        priced = costs.at(depth)
        hazards = MatchHazards(priced, k_max["ngram"]) if copies else None
        if hazards is not None:
            hazards.restore(state.get("hazards"))
        recalled = MatchHazards(priced, k_max["ngram"]) if copies and recalls else None
        if recalled is not None:
            recalled.restore(state.get("recalled hazards"))
        learned_draft = acceptance = None
        if draft_cost is not None:
            learned_draft = LearnedDraftCost(draft_cost)
            learned_draft.restore(state.get("draft cost"))
            acceptance = AutoDraftLength(priced, learned_draft.seconds * slowed(costs, priced), k_max["draft"])
            acceptance.restore(state.get("acceptance"))
        return cls(costs, hazards, acceptance, learned_draft, memory, key, costs_key, priced,
                   acceptance.draft_cost if acceptance is not None else 0.0, recalled=recalled, copied_last=hazards)

    @property
    def calibrating(self) -> bool:
        """The next step should be plain (``CALIBRATE_EVERY``)."""
        return self.since_plain >= CALIBRATE_EVERY - 1

    def lengthen(self, k: int, policy: MatchHazards | AutoDraftLength) -> int:
        """``policy``'s planned draft length ``k``, or longer on an exploring step."""
        return lengthened(k, self.steps, policy.k_max)

    def plan(self, limit: int) -> tuple[int, Callable[[Draft], int] | None]:
        """``draft_length.DraftLength.plan``: a plain step when calibrating; an n-gram copy's length chosen once it is
        proposed; a model draft's from the acceptance seen."""
        if self.calibrating:
            return 0, None
        if self.hazards is not None:  # (the combined method asks the draft model's policy itself when it does not copy)
            return limit, lambda draft: self._copied(draft, limit)
        return min(self.model_length(), limit), None

    def _copied(self, copy: Draft, limit: int) -> int:
        """How much of a proposed copy to verify (``explored_copy``), by the hazards of its source."""
        hazards = self.hazards_of(copy)
        self.copied_last = hazards
        self.copy_k = explored_copy(hazards, copy, self.steps, limit)
        return self.copy_k

    def hazards_of(self, copy: Draft) -> MatchHazards:
        """The hazards that judge ``copy``: a stored chat's own, or the conversation's."""
        assert self.hazards is not None
        return self.recalled if self.recalled is not None and copy.origin is not None else self.hazards

    def copy_length(self, copy: Draft) -> int:
        self.copied_last = self.hazards_of(copy)
        self.copy_k = self.copied_last.plan(copy.match, copy.survival)
        return self.copy_k

    def model_length(self) -> int:
        acceptance = self.acceptance
        assert acceptance is not None
        return self.lengthen(acceptance.plan(), acceptance)

    def begin_reply(self) -> None:
        """A new reply: the draft model has the new user turn to read before its first draft (not a caught-up one),
        and copies start short again (``auto.SLOW_START``)."""
        self.model_drafted_last = False
        for hazards in self._copy_policies():
            hazards.begin_reply()

    @property
    def in_use(self) -> int:
        """The draft length chosen last: the copy's, or the draft model's when it drafted last (combined method)."""
        if self.copied_last is not None and (self.acceptance is None or not self.model_drafted_last):
            return self.copy_k
        assert self.acceptance is not None
        return self.acceptance.k

    @property
    def active(self) -> bool:
        return any(p.active for p in (*self._copy_policies(), self.acceptance) if p is not None)

    @property
    def reason(self) -> str:
        copies = self._copy_policies()
        # copies are off only when neither source's would be verified; the conversation's hazards then say why
        off = [copies[0]] if copies and not any(h.active for h in copies) else []
        return "; ".join(p.reason for p in (*off, self.acceptance) if p is not None and p.reason)

    def _copy_policies(self) -> tuple[MatchHazards, ...]:
        return tuple(h for h in (self.hazards, self.recalled) if h is not None)

    def observe(self, outcome: StepOutcome, depth: int, turned_down: Draft | None = None) -> None:
        """Learn from a finished step verified at a context depth of ``depth``. ``turned_down``: in the combined
        method, the copy of a step that verified a model draft or none instead (judged against what the target chose,
        at its own match length)."""
        self.costs.observe(outcome.drafted + 1, depth, outcome.t_batch)
        self.since_plain = 0 if outcome.drafted == 0 else self.since_plain + 1
        self.steps += 1
        by_model = outcome.drafted > 0 and not outcome.draft.from_text
        if self.draft_cost is not None and by_model and self.model_drafted_last:
            # (the curve priced last, not the costs at this depth: reading those learns the queued verifies on every
            # step, which the queue is there to avoid; it is within REPRICE_EVERY steps and ``moved`` of this depth's)
            self.draft_cost.observe(outcome.drafted, outcome.t_draft / slowed(self.costs, self.priced))
        self.model_drafted_last = by_model
        judged = None  # the hazards of the copy this step judged (none where the draft model drafted instead)
        if self.hazards is not None and turned_down is not None:
            judged = self.hazards_of(turned_down)
            judged.observe(turned_down.match, judged_against(turned_down.tokens, outcome))
        elif self.hazards is not None and not by_model:
            judged = self.hazards_of(outcome.draft)
            judged.observe(outcome.match, outcome.judgements())
        copies = self._copy_policies()
        for hazards in copies:
            if hazards is not judged:
                hazards.observe(0, [])  # every step fades what each learned, judged or not: the text moves on
        if len(copies) > 1:  # what the reply earned (``MatchHazards.cap``) is the reply's, whichever source showed it
            earned = max(hazards.cap for hazards in copies)
            for hazards in copies:
                hazards.cap = earned
        if self.acceptance is not None:
            self.acceptance.observe(outcome.drafted if by_model else 0, outcome.n_accepted if by_model else 0)
        self._reprice(depth)

    def _reprice(self, depth: int) -> None:
        if self.steps % REPRICE_EVERY:
            return
        curve = self.costs.at(depth)
        draft = self.draft_cost.seconds * slowed(self.costs, curve) if self.draft_cost is not None else 0.0
        if not moved(self.priced, curve) and abs(draft - self.priced_draft) <= 0.03 * max(self.priced_draft, 1e-9):
            return
        self.priced, self.priced_draft = curve, draft
        for hazards in self._copy_policies():
            hazards.reprice(curve)
        if self.acceptance is not None:
            self.acceptance.reprice(curve, draft)

    def keep(self, quiet: bool = True) -> None:
        """Write what was learned to the memory (at the end of each reply): the verify costs' corrections only from a
        reply during which no other process kept the cores busy (a busy minute's timings serve this process only)."""
        state: dict[str, object] = {}
        if self.hazards is not None:
            state["hazards"] = self.hazards.state()
        if self.recalled is not None:
            state["recalled hazards"] = self.recalled.state()
        if self.acceptance is not None and self.draft_cost is not None:
            state["acceptance"] = self.acceptance.state()
            state["draft cost"] = self.draft_cost.state()
        self.memory.keep({self.key: state} | ({self.costs_key: self.costs.state()} if quiet else {}))


def slowed(costs: LearnedVerifyCost, curve: VerifyCost) -> float:
    """How much slower a one-token step of the target runs on ``curve`` (the learned costs at some depth) than it did
    when swept on an empty context. The draft model's cost was measured as that sweep was (a one-token decode, no
    context) and slows with it: the same attention over the same context, the same machine. A draft priced as if the
    context stayed empty looked ever cheaper deep into a chat — the embedded pair on a CPU, which cannot pay, then
    passed for one that might, and "auto" probed it, each probe a catch-up over the whole context. Never below 1: the
    draft's measurement and the sweep are cached apart, and a sweep from a busy minute must not make the draft look
    cheaper than it was measured."""
    return max(curve(1) / costs.sweep(1), 1.0)


def judged_against(proposal: Sequence[int], outcome: StepOutcome) -> list[bool]:
    """Position by position, whether ``proposal`` was what the target chose in this step (up to its first miss)."""
    chosen = list(outcome.accepted) + ([outcome.token] if outcome.token is not None else [])
    judged = []
    for proposed, token in zip(proposal, chosen):
        judged.append(proposed == token)
        if proposed != token:
            break
    return judged
