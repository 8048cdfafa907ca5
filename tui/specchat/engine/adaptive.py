"""``n_max = "auto"``: choose the draft length from what the steps measurably cost and gain.

Draft length follows Hugging Face's heuristic (+2 after a fully accepted draft, −1 after a rejection). Separately, the
controller keeps exponential averages of the seconds each emitted token cost in speculative steps and in plain steps
(it interleaves a plain calibration step now and then). When speculation costs more per token than plain decoding it
switches itself off; while off it probes with one draft, less and less often while the probes keep losing, so it can
switch back on when the text becomes predictable.
"""

from __future__ import annotations

from dataclasses import dataclass

K_START = 4
K_MAX = 16
SMOOTHING = 0.1  # weight of the newest observation in the running averages
MIN_SPEC_OBSERVATIONS = 8  # speculative steps seen before judging
CALIBRATE_EVERY = 32  # speculative steps between plain calibration steps
PROBE_EVERY = 24  # plain steps before the first probe while switched off
PROBE_EVERY_MAX = 384  # each probe that confirms the loss doubles the wait, up to this
TOLERANCE = 1.03  # speculation must cost ≤ 3 % more per token than plain decoding to stay on


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


@dataclass
class AdaptiveDraftLength:
    k: int = K_START
    active: bool = True
    plain_cost: float | None = None  # seconds per token of a plain step
    spec_seconds: float | None = None  # average seconds of a speculative step
    spec_tokens: float | None = None  # average tokens a speculative step emits
    spec_observations: int = 0
    since_plain: int = 0
    since_off: int = 0
    probe_every: int = PROBE_EVERY
    reason: str = ""

    def plan(self) -> int:
        """Draft length for the next step; 0 means a plain step."""
        if not self.active:
            self.since_off += 1
            if self.since_off < self.probe_every:
                return 0
            self.since_off = 0
            self.probe_every = min(self.probe_every * 2, PROBE_EVERY_MAX)
            return self.k  # a probe at the learned length: a shorter one could never show a win on a CPU
        if self.plain_cost is None or self.since_plain >= CALIBRATE_EVERY:
            return 0
        return self.k

    def observe(self, planned: int, drafted: int, accepted: int, emitted: int, seconds: float) -> bool:
        """Learn from a finished step; returns True when speculation was switched on or off by it."""
        if drafted == 0:
            self.plain_cost = _ema(self.plain_cost, seconds)
            self.since_plain = 0
        else:
            # Averaging time and tokens separately weighs each step by what it produced: one failed long draft
            # must not outweigh several that paid off.
            self.spec_seconds = _ema(self.spec_seconds, seconds)
            self.spec_tokens = _ema(self.spec_tokens, emitted)
            self.spec_observations += 1
            self.since_plain += 1
            if drafted == planned:  # a draft cut short (low confidence, no n-gram match) says nothing about k
                self.k = min(self.k + 2, K_MAX) if accepted == drafted else max(self.k - 1, 1)
        return self._judge()

    @property
    def spec_cost(self) -> float | None:
        """Seconds per emitted token of speculative steps."""
        if self.spec_seconds is None or not self.spec_tokens:
            return None
        return self.spec_seconds / self.spec_tokens

    def _judge(self) -> bool:
        spec_cost = self.spec_cost
        if self.plain_cost is None or spec_cost is None or self.spec_observations < MIN_SPEC_OBSERVATIONS:
            return False
        slower = spec_cost > self.plain_cost * TOLERANCE
        if self.active and slower:
            self.active = False
            self.since_off = 0
            self.probe_every = PROBE_EVERY
            self.reason = (
                f"auto: speculation measured slower than plain decoding ({1 / spec_cost:.0f} vs"
                f" {1 / self.plain_cost:.0f} tok/s); probing now and then"
            )
            return True
        if not self.active and not slower:
            self.active = True
            self.reason = ""
            return True
        return False
