"""One message in the chat: a user prompt, or a reply coloured token by token by where each token came from."""

from __future__ import annotations

import re

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static

from ...chats.records import ReplyRecord
from ...colours import GHOST_STYLE, PROVENANCE, STYLES
from ...figures import looped
from ..text_lines import TextLines

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
FINISH_LABELS = {"cancelled": "⏹ cancelled", "context_full": "context full", "length": "stopped at the token limit",
                 "interrupted": "⏸ interrupted: specchat closed while it streamed", "error": "✗ stopped by an error"}
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
# While streaming, a reply keeps blank lines below its text: a line added inside them changes no widget's size, so the
# frame needs no layout pass (and the chat scrolls only when they run out).
ROOM_LINES = 6
SEGMENT = "segment"  # the style meta key that holds a token's index, for a click
SELECTED, COPIED = "reverse", "underline"  # marks: the inspector's token (a replayed step); an n-gram draft's source


def legend(width: int | None = None) -> Text:
    """What each colour means, in ``width`` cells: narrower than the whole legend, its words are shortened (the
    colours stay), so a narrow terminal still shows every kind."""
    text = _legend(short=False)
    return text if width is None or text.cell_len <= width else _legend(short=True)


def _legend(*, short: bool) -> Text:
    text = Text()
    for shown in PROVENANCE.values():
        text.append("■ ", style=shown.style or "bold")
        text.append((shown.label.split()[0] if short else shown.label) + (" " if short else "  "))
    text.append("abc", style=GHOST_STYLE)
    text.append(" rejected" if short else " rejected draft")
    return text


class Legend(Static):
    """The legend under the chat, as wide as the chat column allows."""

    def on_resize(self) -> None:
        self.update(legend(self.content_size.width))


def provenance_text(segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool,
                    offset: int = 0, marks: dict[int, str] | None = None, clickable: bool = False) -> Text:
    """Segments coloured by provenance; ``ghosts`` is keyed by segment index, counted from ``offset``, so are
    ``marks``: a style added to a segment (``SELECTED``: the inspector's token, a replayed step; ``COPIED``: the text
    an n-gram draft copied). A ``clickable`` text carries each segment's index in its style, so a click can tell
    which token it hit."""
    marks = marks or {}
    text = Text()
    for i, (piece, kind) in enumerate(segments, start=offset):
        style: str | Style = STYLES.get(kind, "")
        if i in marks:
            style = f"{style} {marks[i]}"
        if clickable:
            style = Style.parse(style) + Style(meta={SEGMENT: i}) if style else Style(meta={SEGMENT: i})
        text.append(piece, style=style)
        if show_ghosts and i in ghosts:
            text.append(ghosts[i], style=GHOST_STYLE)
    return text


class ProvenanceLines(TextLines, Widget):
    """Coloured segments drawn line by line: a frame re-renders only the screen lines whose text changed.

    The text is kept as paragraphs: a paragraph is closed at a segment that ends a line, never at the newest segment
    (its rejected draft may still arrive as a ghost) nor where a ghost follows the line end (it would start the next
    line), and is wrapped once; each frame wraps only the open paragraph. While streaming the widget keeps up to
    ``ROOM_LINES`` blank lines below its text, so a new line usually needs no layout pass.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._segments: list[tuple[str, str]] = []
        self._ghosts: dict[int, str] = {}
        self._show_ghosts = False
        self._first = self._end = 0
        self._streaming = False
        self._marks: dict[int, str] = {}
        self._paragraphs: list[Text] = []  # closed paragraphs, then the open one
        self._open_from = 0  # index of the open paragraph's first segment
        self._closed_lines: list[Text] = []  # the closed paragraphs, wrapped
        self._height = 0  # lines laid out: the text's, plus room while streaming
        self._width = 0  # the width the lines were wrapped to

    @property
    def content(self) -> Text:
        """The text shown, unwrapped."""
        return Text("\n").join(self._paragraphs)

    class TokenClicked(Message):
        """A token of this text was clicked (its index in the segments)."""

        def __init__(self, lines: ProvenanceLines, index: int) -> None:
            super().__init__()
            self.lines, self.index = lines, index

        @property
        def control(self) -> ProvenanceLines:
            return self.lines

    def show(self, segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool, first: int,
             end: int, *, streaming: bool = False, marks: dict[int, str] | None = None) -> None:
        """Show ``segments[first:end]``; ghosts are keyed by index in ``segments``, so are ``marks``. A finished
        text is clickable token by token (while streaming the styles stay plain: cheaper to draw)."""
        marks = marks or {}
        if (show_ghosts, first, marks, streaming) != (self._show_ghosts, self._first, self._marks,
                                                      self._streaming) or end < self._end:
            self._reset(first)
        self._marks = marks
        self._segments, self._ghosts, self._show_ghosts = segments, ghosts, show_ghosts
        self._first, self._end, self._streaming = first, end, streaming
        if self.size.width:  # else the first layout wraps the text, in get_content_height
            self._update()

    def on_resize(self) -> None:
        self._update()

    def on_click(self, event: events.Click) -> None:
        index = event.style.meta.get(SEGMENT)
        if isinstance(index, int):
            self.post_message(self.TokenClicked(self, index))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._width:
            self._lines = self._wrap(width)[0]  # the layout that asks repaints the whole widget
        self._height = len(self._lines) + (ROOM_LINES if self._streaming else 0)
        return self._height

    def _reset(self, first: int) -> None:
        self._paragraphs, self._closed_lines, self._open_from = [], [], first

    def _update(self) -> None:
        lines, unchanged = self._wrap(self.size.width)
        if len(lines) > self._height or (not self._streaming and len(lines) != self._height):
            self.refresh(layout=True)
        self._replace_lines(lines, unchanged)

    def _wrap(self, width: int) -> tuple[list[Text], int]:
        """Wrap what is new since the last call: the lines, and how many leading ones are the same as before."""
        if width != self._width:
            self._reset(self._first)
            self._width = width
            self._forget()
        kept = len(self._closed_lines)
        console = self.app.console
        width = max(width, 1)  # a terminal squeezed to nothing still lays out (Rich cannot fold words into 0 columns)
        closed = self._paragraphs[:-1]
        start = self._open_from
        for i in range(start, self._end - 1):
            if self._segments[i][0].endswith("\n") and not (self._show_ghosts and i in self._ghosts):
                paragraph = provenance_text(self._segments[start:i + 1], self._ghosts, self._show_ghosts, start,
                                            self._marks, not self._streaming)
                paragraph.right_crop(1)  # the line end: the next paragraph starts on the next line anyway
                closed.append(paragraph)
                self._closed_lines.extend(paragraph.wrap(console, width))
                start = i + 1
        self._open_from = start
        open_paragraph = provenance_text(self._segments[start:self._end], self._ghosts, self._show_ghosts, start,
                                         self._marks, not self._streaming)
        self._paragraphs = [*closed, open_paragraph]
        return self._closed_lines + list(open_paragraph.wrap(console, width)), kept

    def render_line(self, y: int) -> Strip:
        return self._line_strip(y, self.size.width)


def answer_start(segments: list[tuple[str, str]]) -> tuple[int, bool]:
    """Qwen3-style replies open with <think>…</think>: the index of the first answer segment (the thinking comes
    before it), and whether that index is settled — it is not while the reply may still turn out to think, or while
    the thinking goes on.
    """
    joined = "".join(piece for piece, _ in segments)
    opened = joined.lstrip()
    if not opened.startswith(THINK_OPEN):
        return 0, len(opened) >= len(THINK_OPEN)
    end = joined.find(THINK_CLOSE)
    if end < 0:
        return len(segments), False
    end += len(THINK_CLOSE)
    seen = 0
    for i, (piece, _) in enumerate(segments):
        seen += len(piece)
        if seen >= end:
            return i + 1, i + 1 < len(segments)
    return len(segments), False


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a reply, in order, each without its fences."""
    return CODE_BLOCK.findall(text)


def versions_line(versions: tuple[int, int], keys: str) -> Text:
    """ "‹ 2/3 ›" for a message with several versions (edits, answers), and the keys that move between them."""
    shown, count = versions
    return Text.assemble(("‹ ", "bold" if shown > 1 else "dim"), (f"{shown}/{count}", "bold"),
                         (" ›", "bold" if shown < count else "dim"), (f"  {keys}", "dim"))


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user-message")
        self.text = text
        self.versions: Text | None = None
        self._marked = (0, 0)

    def mark(self, start: int = 0, end: int = 0) -> None:
        """Underline ``text[start:end]`` (the text an n-gram draft copied); nothing when the range is empty."""
        self._marked = (start, end)
        self._draw()

    def set_versions(self, versions: tuple[int, int], keys: str) -> None:
        self.versions = versions_line(versions, keys)
        self._draw()

    def _draw(self) -> None:
        shown = Text(self.text)
        start, end = self._marked
        if end > start:
            shown.stylize(COPIED, start, end)
        if self.versions is not None:
            shown.append("\n").append_text(self.versions)
        self.update(shown)


class ReplyView(Vertical):
    """A reply record drawn: provenance colours while streaming; after it finishes, optionally rendered Markdown.

    The view only reads its record (the app adds events to the record, then asks the view to refresh). Only the body
    is mounted with the reply; the thinking box, the Markdown view and the status line are mounted when first needed,
    since every widget mounted as a reply starts is styled and laid out while the model answers.
    """

    def __init__(self, record: ReplyRecord, *, show_ghosts: bool = False, markdown: bool = False) -> None:
        super().__init__(classes="reply")
        self.record = record
        self.show_ghosts = show_ghosts
        self.markdown = markdown and not record.streaming
        self.body = ProvenanceLines(classes="reply-body")
        self.think_text: ProvenanceLines | None = None
        self.think_box: Collapsible | None = None
        self.rendered: Markdown | None = None
        self.status_line: Static | None = None
        self._answer_from: int | None = None  # index of the first answer segment, once the thinking is known
        self._streamed = record.streaming  # seen streaming: its thinking box folds when it finishes
        self._ready = False
        self.marks: dict[int, str] = {}  # segment → an added style: the inspector's token, an n-gram draft's source
        self._versions: Static | None = None  # "‹ 2/3 ›", mounted with the reply

    def compose(self) -> ComposeResult:
        if self._versions is not None:
            yield self._versions
        yield self.body

    def on_mount(self) -> None:
        self._ready = True  # Textual's is_mounted turns true only after this handler
        self.refresh_view()

    @property
    def segments(self) -> list[tuple[str, str]]:
        return self.record.segments

    @property
    def ghosts(self) -> dict[int, str]:
        return self.record.ghosts

    @property
    def tokens(self) -> list[int]:
        return self.record.tokens

    @property
    def finish_reason(self) -> str | None:
        return self.record.finish_reason

    @property
    def text(self) -> str:
        return self.record.text

    def set_ghosts(self, show: bool) -> None:
        self.show_ghosts = show
        self.refresh_view()

    def mark(self, marks: dict[int, str]) -> None:
        """Show these segments with these styles added (the inspector's cursor, an n-gram draft's source); the
        Markdown view gives way to the tokens."""
        self.marks = marks
        if marks and self.markdown:
            self.markdown = False
        self.refresh_view()

    def set_markdown(self, markdown: bool) -> None:
        self.markdown = markdown and self.finish_reason is not None
        self.refresh_view()

    def _answer_start(self) -> int:
        """Index of the first answer segment; the thinking, if any, comes before it. Settled once, then cached."""
        if self._answer_from is not None:
            return self._answer_from
        first, settled = answer_start(self.segments)
        if settled:
            self._answer_from = first
        return first

    def refresh_view(self) -> None:
        if not self._ready:
            return
        first = self._answer_start()
        streaming = self.finish_reason is None
        if not streaming and self.think_box is not None and self._streamed:
            self.think_box.collapsed = True  # the thinking folds away once the answer is complete
        self._streamed = streaming
        if first and self.think_box is None:
            self.think_text = ProvenanceLines(classes="think-text")
            self.think_box = Collapsible(self.think_text, title="thinking", collapsed=not streaming, classes="think")
            self.mount(self.think_box, before=self.body)
        if self.think_box is not None and self.think_text is not None:
            self.think_box.display = first > 0
            self.think_text.show(self.segments, self.ghosts, self.show_ghosts, 0, first,
                                 streaming=streaming and first == len(self.segments), marks=self.marks)
        self.body.display = not self.markdown
        if self.markdown:
            answer = "".join(piece for piece, _ in self.segments[first:])
            if self.rendered is None:  # given its text now: a Markdown widget clears itself when it is mounted
                self.rendered = Markdown(answer, classes="reply-markdown")
                self.mount(self.rendered, after=self.body)
            else:
                self.rendered.update(answer)
        if self.rendered is not None:
            self.rendered.display = self.markdown
        if not self.markdown:
            self.body.show(self.segments, self.ghosts, self.show_ghosts, first, len(self.segments),
                           streaming=streaming and first < len(self.segments), marks=self.marks)
        label = FINISH_LABELS.get(self.finish_reason or "")
        if self.finish_reason == "loop":
            stats = self.record.stats or {}
            label = "↻ " + looped(stats.get("loop_span", 0), stats.get("loop_tokens", 0), stats.get("estimated", False))
        if label and self.status_line is None:
            self.status_line = Static(classes="reply-status")
            self.mount(self.status_line)
        if self.status_line is not None:
            self.status_line.update(Text(label or "", style="italic dim"))
            self.status_line.display = label is not None

    def set_versions(self, versions: tuple[int, int], keys: str) -> None:
        """A line above the reply, given before it is mounted: which of its versions (answers) this is. (A change
        of versions draws the chat again.)"""
        self._versions = Static(versions_line(versions, keys), classes="versions")

    def code_blocks(self) -> list[str]:
        return code_blocks(self.text)
