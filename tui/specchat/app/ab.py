"""A/B in the chat: the last prompt again without speculation, from the cache state the speculative reply started from.

Both arms then decode the same prompt tokens (the plain run must not find the prompt cached by the first), on the
same target, context and sampling. Sampled replies differ by chance, so they are not compared token by token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..engine import Engine, Message, ReplyFinished
from ..telemetry.memory import peak_rss_bytes, reset_peak_rss


@dataclass(frozen=True)
class ABResult:
    spec: dict[str, Any]
    plain: dict[str, Any]
    identical: bool | None  # None when sampling: equal text is then not expected
    sampled: bool


def rerun_plain(engine: Engine, prompt: str, before: list[Message], after: list[Message], reused_tokens: int,
                max_tokens: int) -> tuple[dict[str, Any], list[int]]:
    """The plain arm: its telemetry and tokens. The engine is left as it was (configuration and conversation)."""
    original = engine.config
    try:
        engine.restore(before)
        engine.apply(dataclasses.replace(original, spec=dataclasses.replace(original.spec, method="none")))
        engine.truncate_cache(reused_tokens)
        reset_peak_rss()
        finished = [e for e in engine.reply(prompt, max_tokens=max_tokens) if isinstance(e, ReplyFinished)][-1]
        return finished.stats.summary() | {"peak_rss": peak_rss_bytes()}, list(engine.messages[-1].tokens or [])
    finally:
        engine.apply(original)
        engine.restore(after)


def compare(spec: dict[str, Any], spec_tokens: list[int], plain: dict[str, Any], plain_tokens: list[int],
            sampled: bool) -> ABResult:
    return ABResult(spec, plain, None if sampled else spec_tokens == plain_tokens, sampled)
