"""A/B in a chat: the last reply against the same prompt rerun without speculation (see ``Backend.rerun_plain``).

Both arms decode the same prompt tokens from the same cache state, on the same target, context and sampling. Sampled
replies differ by chance, so they are not compared token by token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ABResult:
    spec: dict[str, Any]
    plain: dict[str, Any]
    identical: bool | None  # None when sampling: equal text is then not expected
    sampled: bool


def compare(spec: dict[str, Any], spec_tokens: list[int], plain: dict[str, Any], plain_tokens: list[int],
            sampled: bool) -> ABResult:
    return ABResult(spec, plain, None if sampled else spec_tokens == plain_tokens, sampled)
