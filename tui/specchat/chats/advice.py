"""When speculation is slower than plain decoding: why, in one line, and the profile that pays on this machine instead.

On a CPU the embedded pair runs at about half of plain decoding, and "⚠ slower than plain" alone leaves a new user
nowhere. The reason is read from what the screen already shows (the models' sizes, the acceptance); the suggestion is
the draftless `ngram` profile where it runs the same target the same way, else speculation switched off by hand (plain
decoding of the same target), one key away.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..figures import mb, pct
from ..profiles import Profile, available_profiles, load_profile

# A draft this share of the target's weights costs about as much to run as the target saves by skipping steps.
SAME_SIZE_DRAFT = 0.4
LOW_ACCEPTANCE = 0.5
SLOWER = 0.97  # below this share of plain decoding's rate, a reply is slower beyond the noise of one measurement


@dataclass(frozen=True)
class Advice:
    why: str  # why speculation loses here, one line
    suggestion: str | None  # the profile to try instead, by name; None: speculation off by hand, the same target
    does: str  # what the suggestion does differently, a few words


def advice(speedup: float | None, speculating: bool, acceptance: float | None, profile: Profile | None,
           model_bytes: dict[str, int], guessed: bool = True) -> Advice | None:
    """Advice for a reply ``speedup`` times as fast as plain decoding, slower with speculation active; None else
    (within the noise of a measurement, SLOWER, it says nothing). ``guessed``: a draft model drafted in the reply (True
    too where the backend does not say which source drafted). A loaded draft model that sat out cost no time, and where
    only copies drafted, ``ngram`` (copies too) is no remedy: speculation off is."""
    if speedup is None or speedup >= SLOWER or not speculating:
        return None
    draft, target = model_bytes.get("draft"), model_bytes.get("target")
    if guessed and draft and target and draft >= SAME_SIZE_DRAFT * target:
        why = f"the draft ({mb(draft)}) costs about as much to run as the target ({mb(target)}) saves"
    elif acceptance is None:
        why = "no draft was judged in this reply, and looking for one still cost its time"
    elif acceptance < LOW_ACCEPTANCE:
        why = f"only {pct(acceptance)} of the drafted tokens are accepted"
    else:
        why = "a verify step costs more here than its accepted drafts save"
    ngram = _same_target_ngram(profile) if guessed else None
    if ngram is not None:
        return Advice(why, ngram, "drafts from the chat itself, no second model")
    return Advice(why, None, "plain decoding of the same target")


# The answer for the profile in use, found once per loaded profile: the sidebar asks at every frame of a reply, on the
# UI thread, and listing and parsing the profiles took 33 ms each time. (The profile is kept with its answer, so its id
# names no other profile while it is here.)
_answered: dict[int, tuple[Profile, str | None]] = {}


def _same_target_ngram(profile: Profile | None) -> str | None:
    """The bundled `ngram` profile when it runs the same target the same way (else it would swap the model too)."""
    if profile is None or profile.method == "ngram":
        return None
    kept = _answered.get(id(profile))
    if kept is None or kept[0] is not profile:
        _answered.clear()  # one profile is in use at a time
        kept = _answered[id(profile)] = (profile, _found_ngram(profile))
    return kept[1]


def _found_ngram(profile: Profile) -> str | None:
    if "ngram" not in available_profiles():
        return None
    ngram = load_profile("ngram")
    same = (ngram.model("target"), ngram.n_ctx, ngram.kv_cache) == (profile.model("target"), profile.n_ctx,
                                                                     profile.kv_cache)
    return "ngram" if same and ngram.backend_kind == profile.backend_kind else None
