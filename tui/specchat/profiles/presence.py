"""Whether a profile's models are on this machine — asked before it is chosen, so the picker can say so instead of
the load failing after Enter. Only looks (paths and the model folders); nothing is loaded or derived."""

from __future__ import annotations

from .resolve import model_base
from .models import EMBEDDED, locate
from .schema import Profile


def absent_models(profile: Profile) -> str:
    """What of the profile's models this machine lacks, one line; "" when it has them all. A remote server holds its
    own models (a local copy of its target only tokenizes)."""
    if profile.backend_kind.own_models:
        return ""
    wanted = [("target", profile.model("target"))]
    if profile.uses_draft_model:
        wanted.append(("draft", profile.model("draft")))
    base = model_base(profile)
    try:
        missing = [reference for _role, reference in wanted
                   if reference and reference not in EMBEDDED and locate(reference, base).path is None]
    except OSError:  # a model folder that cannot be read: no verdict, the load will say what it meets
        return ""
    return f"not on this machine: {', '.join(missing)}" if missing else ""
