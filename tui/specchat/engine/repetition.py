"""A reply stuck in a loop: the same span of tokens, verbatim, back to back at its end.

Small models fall into cycles ("código de código de …", or a whole function written out again and again) and run to
the token limit. The rule reads nothing but the reply's tokens, so every backend, both arms of an A/B and every
benchmark runner stop at the same token: greedy output with speculation stays equal to plain decoding, cut at the
same place. A reply is never cut inside a character spelled over several tokens: it ends at the token that completes
the character. A speculative step that completes the cycle midway ends the reply there and counts as far as it was
shown (what it verified beyond is neither shown nor counted), as a llama-server's stream closed there is counted.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class LoopRule:
    """A reply stops once its last tokens are one span repeated ``repeats`` times in a row, the copies covering at
    least ``min_tokens`` tokens (a short refrain, "ha ha ha", is no loop), the span at most ``window // repeats``."""

    repeats: int = 3
    min_tokens: int = 48
    window: int = 512

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ConfigError(f"loop_repeats must be ≥ 2 (a span seen once is no loop), got {self.repeats}")
        if self.min_tokens < 2:
            raise ConfigError(f"loop_min_tokens must be ≥ 2, got {self.min_tokens}")
        if self.window < max(self.min_tokens, self.repeats):
            raise ConfigError(f"loop_window ({self.window}) must be at least loop_min_tokens ({self.min_tokens}) and"
                              f" loop_repeats ({self.repeats})")

    @property
    def longest_span(self) -> int:
        return self.window // self.repeats


class LoopWatch:
    """The reply's tokens so far, and whether they end in a loop; ``add`` each token as it is shown."""

    def __init__(self, rule: LoopRule) -> None:
        self.rule = rule
        self.tokens: list[Hashable] = []
        self.span = 0  # the repeated span's length in tokens, once a loop is seen
        self.covered = 0  # tokens its copies cover at the end of the reply

    def add(self, token: Hashable, whole: bool = True) -> bool:
        """Whether the reply ends after ``token``: it completes a loop, or one was completed before it, and ``whole``
        says the text so far ends a whole character (a loop is never cut inside a character spelled over several
        tokens: the reply goes on to the token that completes it)."""
        if self.span:
            return whole
        tokens, rule = self.tokens, self.rule
        tokens.append(token)
        if len(tokens) > 2 * rule.window:  # only the last window is ever read
            del tokens[: len(tokens) - rule.window]
        n = len(tokens)
        for span in range(1, rule.longest_span + 1):
            stretch = max(span * rule.repeats, rule.min_tokens)
            if stretch > n:
                break
            # A stretch with period ``span`` equals itself shifted by one span (the last token first: it is cheap).
            if tokens[-1] == tokens[-1 - span] and tokens[n - stretch + span:] == tokens[n - stretch:n - span]:
                self.span, self.covered = span, stretch
                return whole
        return False


def loop_watch(rule: LoopRule | None) -> LoopWatch | None:
    return LoopWatch(rule) if rule is not None else None
