"""When speculation is slower than plain decoding: why, in one line, and the profile that pays on this machine instead.

On a CPU the embedded pair runs at about half of plain decoding, and "⚠ slower than plain" alone leaves a new user
nowhere. The reason is read from what the screen already shows (the models' sizes, the acceptance); the suggestion is
the draftless `ngram` profile (or plain decoding, for a losing n-gram profile), one key away.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..figures import mb, pct
from ..profiles import Profile, available_profiles

# A draft this share of the target's weights costs about as much to run as the target saves by skipping steps.
SAME_SIZE_DRAFT = 0.4
LOW_ACCEPTANCE = 0.5


@dataclass(frozen=True)
class Advice:
    why: str  # why speculation loses here, one line
    suggestion: str | None  # the profile to try instead, by name
    does: str  # what the suggestion does differently, a few words


def advice(speedup: float | None, speculating: bool, acceptance: float | None, profile: Profile | None,
           model_bytes: dict[str, int]) -> Advice | None:
    """Advice for a reply ``speedup`` times as fast as plain decoding, slower with speculation active; None else."""
    if speedup is None or speedup >= 1 or not speculating:
        return None
    draft, target = model_bytes.get("draft"), model_bytes.get("target")
    if draft and target and draft >= SAME_SIZE_DRAFT * target:
        why = f"the draft ({mb(draft)}) costs about as much to run as the target ({mb(target)}) saves"
    elif acceptance is not None and acceptance < LOW_ACCEPTANCE:
        why = f"only {pct(acceptance)} of the drafted tokens are accepted"
    else:
        why = "a verify step costs more here than its accepted drafts save"
    method = profile.method if profile is not None else ""
    suggestion, does = ("ngram", "drafts from the chat itself, no second model") if method != "ngram" else \
        ("baseline", "plain decoding")
    return Advice(why, suggestion if suggestion in available_profiles() else None, does)
