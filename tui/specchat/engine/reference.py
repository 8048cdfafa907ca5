"""What "vs plain" compares a reply with: plain decoding of the same target, at the reply's context depth, with its
sampling.

Plain decoding slows as the context grows (each token attends to every cached one), and sampling costs more than an
argmax (a softmax over the whole vocabulary: ≈ 0.6 ms a token on a 49 k vocabulary here, against ≈ 0.01 ms). A
reference measured at an empty cache and greedily made an 800-token reply at T = 0 read 0.35× where plain decoding of
the same prompt ran at 0.63×. So a reference is a step time that grows linearly with depth — ``step_s`` at depth 0
plus ``per_token_s`` for every token of context — measured with the profile's sampling; a reply's reference is that
line at the reply's mean depth (its prompt plus half of what it generated). Without a measured slope the reference
holds only near the depth it was measured at, and elsewhere it is "–".
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter

import numpy as np

from .events import PlainMeasured
from .llama import Context, Model
from .loop import speculate
from .rules import Rules
from .phases import announce
from .sampling import SamplingParams
from .stats import rate

PLAIN_RATE_TOKENS = 32  # tokens of the plain run that gives "vs plain" its reference, on every backend
UNSLOPED_TOLERANCE = 0.25  # without a slope, a reference is used within this share of the depth it was measured at
UNSLOPED_MARGIN = 64  # ... or this many tokens, whichever is more


@dataclass(frozen=True)
class PlainReference:
    step_s: float  # seconds per plain step at depth 0 (or at ``depth`` when there is no slope)
    per_token_s: float | None  # seconds added per token of context; None: not measured
    depth: int  # the context depth the step was measured at
    sampled: bool
    source: str  # how it was obtained, for the screen
    busy: float | None = None  # the cores other processes kept busy while it ran, where that made it untrustworthy

    @staticmethod
    def measured(tps: float, depth: int, slope: float | None, sampled: bool, source: str,
                 busy: float | None = None) -> PlainReference:
        """A reference from a plain run at ``depth`` tokens of context (``slope``: seconds per token of context)."""
        step = 1.0 / tps
        if slope is not None:
            step = max(step - slope * depth, 1e-9)
        return PlainReference(step, slope, depth, sampled, source, busy)

    def remeasured(self) -> PlainMeasured:
        """The event that puts this reference in the place of one taken beside busy cores (``telemetry.live``)."""
        return PlainMeasured(self.tps_at(self.depth), self.depth, self.per_token_s, self.sampled)

    def tps_at(self, depth: float) -> float | None:
        """Plain tokens/s at ``depth`` tokens of context; None outside what this reference can tell."""
        if self.per_token_s is None:
            if abs(depth - self.depth) > max(UNSLOPED_TOLERANCE * self.depth, UNSLOPED_MARGIN):
                return None
            return 1.0 / self.step_s
        return 1.0 / (self.step_s + self.per_token_s * depth)

    def describe(self, depth: float | None) -> str:
        """One line for the screen: what was measured, and at which depth the reply is compared."""
        sampling = "sampled" if self.sampled else "greedy"
        if depth is None:
            return f"{self.source}, {sampling}"
        if self.per_token_s is None and self.tps_at(depth) is None:
            return f"{self.source} at {self.depth} tokens deep, {sampling}; this reply is {depth:.0f} deep"
        how = "at" if self.per_token_s is None else "modelled at"
        return f"{how} {depth:.0f} tokens deep, {sampling} — {self.source}"


def measure_plain(ctx: Context, target: Model, conversation: list[int], sampling: SamplingParams,
                  slope: float | None, tokens: int = PLAIN_RATE_TOKENS) -> PlainReference | None:
    """Plain decoding of ``target`` through the same step a reply takes, ``tokens`` of it after ``conversation``, with
    ``sampling`` (its own random draws), then undone. None when the context has no room for the run."""
    announce(f'measuring plain decoding for "vs plain" ({tokens} tokens)')
    seq = list(conversation) or [max(target.bos, 0)]
    keep = len(seq) - 1
    if keep + tokens + 1 >= ctx.n_ctx:
        return None
    if keep:
        ctx.sync(seq[:-1])
    else:
        ctx.truncate(0)
    rules = Rules(sampling, np.random.default_rng(sampling.seed), np.random.default_rng(sampling.seed), target)
    times = []
    for _ in range(tokens):
        seq.append(speculate(ctx, seq, None, 0, rules).token)
        times.append(perf_counter())
    ctx.truncate(keep)
    tps = rate(len(times) - 1, times[-1] - times[0])
    if tps is None:
        return None
    return PlainReference.measured(tps, keep + tokens // 2, slope, not sampling.greedy,
                                   f"a plain run of {tokens} tokens after loading, same loop")
