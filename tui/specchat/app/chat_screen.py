"""The chat's screen: its frames render only the rows they repaint.

A frame while a reply streams repaints a few lines of the sidebar and the last lines of the reply. Textual's
compositor crops each frame to the box around its dirty regions, but asks every widget whose clip overlaps that box
for all of its lines — the footer, the prompt, the whole sidebar, the whole reply — and then keeps only the dirty
rows. On a CPU that work is taken from decoding, so this compositor asks each widget only for the rows where a dirty
region overlaps it. (Overrides ``Compositor.render_partial_update`` and ``Compositor._get_renders``, and sets
``Screen._compositor``: Textual 8.)
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip

# Rows of one widget a little apart are rendered in one call: each call has its own fixed cost.
RUN_GAP = 2


class DirtyRowsCompositor(Compositor):
    _updating: list[Region] | None = None  # the dirty regions of the partial update being rendered

    def render_partial_update(self) -> ChopsUpdate | None:
        self._updating = [*self._dirty_regions]
        try:
            return super().render_partial_update()
        finally:
            self._updating = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders(crop)
            return
        dirty = self._updating or [crop]
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            # Only rows are cropped: the columns stay the widget's visible ones, which line up with the cuts that
            # split each screen line between widgets.
            for top, bottom in _runs(area for area in dirty if area.overlaps(visible)):
                top, bottom = max(top, visible.y), min(bottom, visible.bottom)
                rows = Region(visible.x, top, visible.width, bottom - top)
                yield rows, rows, widget.render_lines(rows.translate((-region.x, -region.y)))


def _runs(areas: Iterable[Region]) -> list[tuple[int, int]]:
    """The rows the areas cover, as runs (top, bottom), joining runs up to ``RUN_GAP`` rows apart."""
    runs: list[tuple[int, int]] = []
    for top, bottom in sorted((area.y, area.bottom) for area in areas):
        if runs and top <= runs[-1][1] + RUN_GAP:
            runs[-1] = (runs[-1][0], max(bottom, runs[-1][1]))
        else:
            runs.append((top, bottom))
    return runs


class ChatScreen(Screen):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._compositor = DirtyRowsCompositor()
