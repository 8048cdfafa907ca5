"""Every source combined (method "suffix+draft", the default profile's): copies from this chat and from the user's
stored chats (``suffix``) where one is worth verifying, the draft model's guess otherwise (``combined``).

With ``n_max = "auto"`` each step takes the copy its measured worth allows, and the draft model only where its own
acceptance pays for what it costs to run — so where even a draft always right could not pay (the embedded pair on a
2-core CPU), the method runs as its copies and the loaded draft model costs nothing per step; with a fixed ``n_max``
(F6 from "auto") the draft model drafts wherever nothing is copied.
"""

from __future__ import annotations

from .base import Method
from .combined import then_model
from .suffix import SuffixDrafter

METHOD = Method("suffix+draft", "copies from this chat and every stored chat where one is worth verifying, the draft"
                " model otherwise (a llama.cpp server runs ngram-cache on lookup caches of the stored chats)",
                "ngram-cache,draft-simple",
                build=lambda parts: then_model(SuffixDrafter(parts.ngram, parts.stored_chats), parts), draft_model=True,
                copies=True, reads_stored_chats=True)
