"""Counters and timings of one reply, with the definitions shared by vLLM and llama.cpp.

A *drafting step* is a verify step that judged a draft (a plain step judges none).
- acceptance rate = accepted / drafted, where drafted = accepted + rejected;
- mean acceptance length = 1 + accepted / drafting steps (tokens a drafting step yields, its correction or bonus
  included);
- per-position rate[i] = draft tokens accepted at position i / drafting steps (vLLM's
  ``num_accepted_tokens_per_pos / num_drafts``): unconditional, so it falls with i even when every draft is right.
Tokens a drafter computed but did not propose are counted apart: ``ignored`` (a whole draft shorter than n_min) and
``withheld`` (a position where the draft's confidence fell below p_min).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The tokens of one verify step arrive within microseconds of each other: a rate over less time than this measures
# that, not decoding.
MIN_RATE_WINDOW_S = 0.05


def rate(intervals: int, seconds: float, min_window: float = MIN_RATE_WINDOW_S) -> float | None:
    """Tokens per second over ``intervals`` token-to-token gaps; None when there is too little to measure."""
    if intervals < 1 or seconds < min_window:
        return None
    return intervals / seconds


@dataclass
class ReplyStats:
    method: str = "none"
    speculation_active: bool = False
    speculation_reason: str = ""
    draft_length: int = 0  # in use as the reply ended: the cap when fixed, "auto"'s latest choice
    adaptive: bool = False
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    generated: int = 0
    steps: int = 0  # verify steps (target decodes after the prefill)
    drafting_steps: int = 0  # verify steps that judged a draft
    copied_steps: int = 0  # of those, the steps whose draft was copied from earlier text (n-gram), not a model's
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    ignored: int = 0  # proposed, then dropped because the draft was shorter than n_min
    withheld: int = 0  # positions the drafter did not propose because its confidence was below p_min
    end_from_draft: bool = False  # the reply's end-of-generation token was a draft token the target accepted
    by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("accepted", "corrected", "bonus", "target"), 0))
    position_accepted: list[int] = field(default_factory=list)
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0
    ttft: float | None = None
    t_last_token: float | None = None  # seconds from the request to the last token shown
    context_used: int = 0
    n_ctx: int = 0
    threads: int = 0  # threads decoding at the end of the reply (fewer than allowed on a busy machine)
    token_steps: int = 0  # verify steps that emitted tokens after the first one (a rate needs two of them)
    last_step: int = 0
    estimated: bool = False  # token counts estimated (tiktoken) from a server that streams text without ids
    server_tokens: int | None = None  # the server's own count of the reply's tokens, where it gives one
    loop_span: int = 0  # a reply stopped in a loop (finish "loop"): the repeated span's length in tokens
    loop_tokens: int = 0  # and the tokens its copies covered at the end
    # the most cores other processes kept busy during the reply, where that many made its steps no plain rate of this
    # machine (engine/draft_length/costs.py's ``quiet``); None: a quiet reply, or one nobody watched
    busy_cores: float | None = None

    def token_emitted(self, kind: str, step: int, elapsed: float) -> None:
        """One token shown, of ``step``, ``elapsed`` seconds after the reply was requested."""
        self.generated += 1
        self.by_kind[kind] += 1
        if self.ttft is None:
            self.ttft = elapsed
        elif step != self.last_step:
            self.token_steps += 1
        self.last_step = step
        self.t_last_token = elapsed

    def record_step(self, drafted: int, accepted: int, ignored: int = 0, withheld: int = 0, copied: bool = False) -> None:
        """``copied``: the draft was copied from earlier text (an n-gram draft), not guessed by a draft model."""
        self.steps += 1
        self.ignored += ignored
        self.withheld += withheld
        if drafted == 0:
            return
        self.drafting_steps += 1
        self.copied_steps += copied
        self.drafted += drafted
        self.accepted += accepted
        self.rejected += drafted - accepted
        if drafted > len(self.position_accepted):  # positions drafted but never accepted show as 0 %
            self.position_accepted.extend([0] * (drafted - len(self.position_accepted)))
        for i in range(accepted):
            self.position_accepted[i] += 1

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.drafting_steps if self.drafting_steps else None

    @property
    def position_rates(self) -> list[float]:
        return [a / self.drafting_steps for a in self.position_accepted] if self.drafting_steps else []

    @property
    def decode_tps(self) -> float | None:
        """Tokens per second from the first token shown to the last: prefill and time to first token excluded. The
        tokens after the first must come from two steps at least: those of one step arrive together, so one step
        measures only the wait for it (a draft's first prefill, say), not decoding."""
        if self.ttft is None or self.t_last_token is None or self.token_steps < 2:
            return None
        return rate(self.generated - 1, self.t_last_token - self.ttft)

    @property
    def t_overhead(self) -> float:
        return max(self.t_total - self.t_prefill - self.t_draft - self.t_verify, 0.0)

    def summary(self) -> dict[str, object]:
        data = asdict(self)
        if self.busy_cores is None:
            del data["busy_cores"]  # the rows of quiet replies stay as they were before it was watched
        data.update(
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
            position_rates=self.position_rates,
            decode_tps=self.decode_tps,
            t_overhead=self.t_overhead,
        )
        return data
