"""Widgets drawn with Textual's Line API from lines of Rich text: each line is rendered once, then kept."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.selection import Selection
from textual.strip import Strip


class TextLines:
    """Mixin for a widget whose content is ``_lines``; a line is rendered again only after ``_forget`` drops it.

    While a reply streams, most lines of the sidebar and of the reply are the same from one frame to the next: as
    Static widgets they would be rendered whole every frame, and on a CPU that time is taken from decoding.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lines: list[Text] = []
        self._strips: dict[int, Strip] = {}
        self._line_style: Style | None = None  # the widget's own style, looked up once: the lookup walks the DOM

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget()  # e.g. a new theme: every line is drawn again in its colours
        self._line_style = None

    def _forget(self, index: int | None = None) -> None:
        """Drop the rendered line ``index``, or all of them."""
        if index is None:
            self._strips.clear()
        else:
            self._strips.pop(index, None)

    def _replace_lines(self, lines: list[Text], unchanged: int = 0) -> None:
        """Show ``lines``, the first ``unchanged`` of them known to be as before: only the lines whose text changed are
        rendered again, and each run of them is repainted on its own rather than the span of all of them."""
        old, self._lines = self._lines, lines
        end = max(len(old), len(lines))
        run_start: int | None = None
        for y in range(unchanged, end + 1):
            if y < end and old[y:y + 1] != lines[y:y + 1]:
                self._forget(y)
                run_start = y if run_start is None else run_start
            elif run_start is not None:
                self.refresh(Region(0, run_start - self.scroll_offset.y, self.size.width, y - run_start))
                run_start = None

    def _line_strip(self, index: int, width: int) -> Strip:
        selection = self.text_selection
        strip = self._strips.get(index) if selection is None else None
        if strip is None:
            if self._line_style is None:
                self._line_style = self.rich_style
            style = self._line_style
            if index >= len(self._lines):
                return Strip.blank(width, style)
            line = self._lines[index].copy()
            line.stylize_before(style)
            span = selection.get_span(index) if selection is not None else None
            if span is not None:  # the part of the line a mouse drag selected
                start, end = span
                line.stylize(self.screen.get_component_rich_style("screen--selection"), start,
                             len(line) if end == -1 else end)
            # Each cell knows its place in the text: what a drag selects, Ctrl+C copies (Textual's text selection).
            strip = Strip(line.render(self.app.console), line.cell_len).crop_extend(0, width, style).apply_offsets(0, index)
            if selection is None:
                self._strips[index] = strip
        return strip

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The text a mouse drag selected, for Textual's copy (lines as shown: a wrapped line ends with a newline)."""
        return selection.extract("\n".join(line.plain for line in self._lines).rstrip("\n")), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self._forget()
        self.refresh()
