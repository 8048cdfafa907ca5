"""Textual's footer, without its leak (Textualize/textual#6666).

Every change of the active bindings (a screen pushed or popped, focus moving) recomposes the footer, and each new key
binds itself to the footer's ``compact``. Textual drops a removed key's watcher only when ``compact`` changes, which
it never does here, so every recompose kept its keys alive: 28 more widgets each time the profile picker opened and
closed, about 0.7 MB a round in the storm benchmark. Changing ``compact`` and back after each recompose lets Textual
prune them. Delete this when Textual fixes the issue.
"""

from __future__ import annotations

from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    async def recompose(self) -> None:
        await super().recompose()
        compact = self.compact
        self.compact = not compact
        self.compact = compact
