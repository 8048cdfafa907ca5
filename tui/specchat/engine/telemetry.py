"""Counters and timings of one reply, with the definitions shared by llama.cpp and vLLM.

acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / verify steps;
per-position rate[i] = accepted at draft position i / steps whose draft reached position i.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class ReplyStats:
    method: str = "none"
    speculation_active: bool = False
    speculation_reason: str = ""
    n_max: int = 0
    adaptive: bool = False
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    generated: int = 0
    steps: int = 0  # verify steps (target decodes after the prefill)
    spec_steps: int = 0  # steps that verified a draft
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    ignored: int = 0  # proposed, then dropped because the draft was shorter than n_min
    by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("accepted", "corrected", "bonus", "target"), 0))
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0
    ttft: float | None = None
    context_used: int = 0
    n_ctx: int = 0

    def record_step(self, drafted: int, accepted: int, ignored: int) -> None:
        self.steps += 1
        self.ignored += ignored
        if drafted == 0:
            return
        self.spec_steps += 1
        self.drafted += drafted
        self.accepted += accepted
        self.rejected += drafted - accepted
        grow = drafted - len(self.position_reached)
        if grow > 0:
            self.position_reached.extend([0] * grow)
            self.position_accepted.extend([0] * grow)
        # The target judges position i only when every earlier draft token was accepted.
        for i in range(min(drafted, accepted + 1)):
            self.position_reached[i] += 1
        for i in range(accepted):
            self.position_accepted[i] += 1

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.spec_steps if self.spec_steps else None

    @property
    def position_rates(self) -> list[float | None]:
        return [a / r if r else None for a, r in zip(self.position_accepted, self.position_reached, strict=True)]

    @property
    def decode_seconds(self) -> float:
        return max(self.t_total - (self.ttft or 0.0), 0.0)

    @property
    def decode_tps(self) -> float | None:
        """Tokens per second after the first token, so prefill and time to first token are excluded."""
        if self.generated < 2 or self.decode_seconds <= 0:
            return None
        return (self.generated - 1) / self.decode_seconds

    @property
    def t_overhead(self) -> float:
        return max(self.t_total - self.t_prefill - self.t_draft - self.t_verify, 0.0)

    def summary(self) -> dict[str, object]:
        data = asdict(self)
        data.update(
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
            position_rates=self.position_rates,
            decode_tps=self.decode_tps,
            t_overhead=self.t_overhead,
        )
        return data
