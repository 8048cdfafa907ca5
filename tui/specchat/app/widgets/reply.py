"""One message in the chat: a user prompt, or a reply coloured token by token by where each token came from."""

from __future__ import annotations

import re

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.css.scalar import Unit
from textual.geometry import Size
from textual.widgets import Collapsible, Markdown, Static

from ...engine.events import DraftRejected, TokenEmitted

STYLES = {
    "accepted": "green",
    "corrected": "#ffaf00",
    "bonus": "#5fafff",
    "target": "",
}
GHOST_STYLE = "dim strike"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
# A streaming reply is split into blocks at line ends so each frame re-renders only the last block: re-rendering the
# whole reply grows with its length and competes with decoding for the CPU.
MIN_BLOCK_SEGMENTS = 32
# While streaming, the last block keeps blank lines below its text: a line added inside them changes no widget's size,
# so the frame needs no layout pass and repaints only that block (and the chat scrolls only when they run out).
ROOM_LINES = 6


def legend() -> Text:
    text = Text()
    for kind, label in (("accepted", "accepted draft"), ("corrected", "correction"), ("bonus", "bonus"), ("target", "target")):
        text.append("■ ", style=STYLES[kind] or "bold")
        text.append(label + "  ")
    text.append("abc", style=GHOST_STYLE)
    text.append(" rejected draft")
    return text


def provenance_text(segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool,
                    offset: int = 0) -> Text:
    """Segments coloured by provenance; ``ghosts`` is keyed by segment index, counted from ``offset``."""
    text = Text()
    for i, (piece, kind) in enumerate(segments, start=offset):
        text.append(piece, style=STYLES.get(kind, ""))
        if show_ghosts and i in ghosts:
            text.append(ghosts[i], style=GHOST_STYLE)
    return text


class ResizedInPlace:
    """For widgets that grow while a reply streams: a new size needs no second layout pass.

    Textual lays the screen out again whenever a widget's size changed in the pass that was just done, which doubles
    the frames of a growing reply. These widgets do not scroll and their children were arranged in that same pass,
    so the size is recorded without asking for another one. (Relies on ``Widget._size_updated``, Textual 8.)
    """

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)


class ProvenanceBlock(ResizedInPlace, Static):
    pass


class ProvenanceBlocks(ResizedInPlace, Vertical):
    """Coloured segments as a column of blocks that end at line ends; while streaming only the last block changes.

    A block is closed at a segment that ends a line, never at the newest segment (its rejected draft may still arrive
    as a ghost), and once it holds at least ``MIN_BLOCK_SEGMENTS`` segments. While streaming, the last block has a fixed
    height with up to ``ROOM_LINES`` blank lines below its text.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.closed: list[int] = []  # segment index where each closed block ends
        self.tail = ProvenanceBlock(classes="provenance-block")
        self._shown: tuple[bool, int, int] | None = None  # (ghosts shown, first segment, end of segments shown)

    def compose(self) -> ComposeResult:
        yield self.tail

    def show(self, segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool, first: int,
             end: int, *, streaming: bool = False) -> None:
        """Show ``segments[first:end]``; ghosts are keyed by index in ``segments``."""
        if self._shown is None or self._shown[:2] != (show_ghosts, first) or self._shown[2] > end:
            self._reset()
        start = self.closed[-1] if self.closed else first
        mounted = False
        while (stop := self._block_end(segments, ghosts, start, end)) is not None:
            block = ProvenanceBlock(self._block(segments, ghosts, show_ghosts, start, stop, end),
                                    classes="provenance-block")
            self.mount(block, before=self.tail)
            self.closed.append(stop)
            start, mounted = stop, True
        text = self._block(segments, ghosts, show_ghosts, start, end, end)
        self._shown = (show_ghosts, first, end)
        width = self.tail.size.width
        if not streaming or not width:
            self.tail.styles.height = None
            self.tail.update(text)
            return
        self.tail.update(text, layout=False)
        needed = self.tail.get_content_height(self.size, self.size, width)
        room = self.tail.styles.height
        if mounted or room is None or room.unit is not Unit.CELLS or needed > room.value:
            self.tail.styles.height = needed + ROOM_LINES

    def _reset(self) -> None:
        for block in list(self.query(ProvenanceBlock)):
            if block is not self.tail:
                block.remove()
        self.closed = []

    @staticmethod
    def _block_end(segments: list[tuple[str, str]], ghosts: dict[int, str], start: int, end: int) -> int | None:
        # A ghost after a line end would start the next line: such a segment does not end a block.
        for i in range(start + MIN_BLOCK_SEGMENTS - 1, end - 1):
            if segments[i][0].endswith("\n") and i not in ghosts:
                return i + 1
        return None

    @staticmethod
    def _block(segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool, start: int, stop: int,
               end: int) -> Text:
        text = provenance_text(segments[start:stop], ghosts, show_ghosts, offset=start)
        if stop < end:
            text.right_crop(1)  # the line end: the next block starts on the next line anyway
        return text


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


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user-message")


class ReplyView(ResizedInPlace, Vertical):
    """A reply: provenance colours while streaming; after it finishes, optionally rendered Markdown."""

    def __init__(self, *, show_ghosts: bool = False) -> None:
        super().__init__(classes="reply")
        self.segments: list[tuple[str, str]] = []
        self.tokens: list[int] = []
        self.ghosts: dict[int, str] = {}
        self.show_ghosts = show_ghosts
        self.markdown = False
        self.finish_reason: str | None = None
        self.think_text = ProvenanceBlocks(classes="think-text")
        self.think_box = Collapsible(self.think_text, title="thinking", collapsed=False, classes="think")
        self.body = ProvenanceBlocks(classes="reply-body")
        self.rendered = Markdown(classes="reply-markdown")
        self.status_line = Static(classes="reply-status")
        self._answer_from: int | None = None  # index of the first answer segment, once the thinking is known

    def compose(self) -> ComposeResult:
        yield self.think_box
        yield self.body
        yield self.rendered
        yield self.status_line

    def on_mount(self) -> None:
        self.think_box.display = False
        self.rendered.display = False
        self.status_line.display = False
        self.refresh_view()

    @property
    def text(self) -> str:
        return "".join(piece for piece, _ in self.segments)

    def add(self, events: list[object]) -> None:
        for event in events:
            if isinstance(event, TokenEmitted):
                self.segments.append((event.text, event.kind.value))
                self.tokens.append(event.token)
            elif isinstance(event, DraftRejected) and self.segments:
                # Shown right where it was rejected: after the last accepted token, before the correction.
                index = len(self.segments) - 1
                self.ghosts[index] = self.ghosts.get(index, "") + event.text
        self.refresh_view()

    def load(self, segments: list[tuple[str, str]], ghosts: list[tuple[int, str]], finish_reason: str | None) -> None:
        self.segments = list(segments)
        self.ghosts = dict(ghosts)
        self._answer_from = None
        self.finish(finish_reason)

    def finish(self, finish_reason: str | None) -> None:
        self.finish_reason = finish_reason
        if self._answer_start():
            self.think_box.collapsed = True
        self.refresh_view()

    def set_ghosts(self, show: bool) -> None:
        self.show_ghosts = show
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
        if not self.is_mounted:
            return
        first = self._answer_start()
        self.think_box.display = first > 0
        streaming = self.finish_reason is None
        if first:
            self.think_text.show(self.segments, self.ghosts, self.show_ghosts, 0, first,
                                 streaming=streaming and first == len(self.segments))
        self.body.display = not self.markdown
        self.rendered.display = self.markdown
        if self.markdown:
            self.rendered.update("".join(piece for piece, _ in self.segments[first:]))
        else:
            self.body.show(self.segments, self.ghosts, self.show_ghosts, first, len(self.segments),
                           streaming=streaming and first < len(self.segments))
        if self.finish_reason in ("cancelled", "context_full", "length"):
            label = {"cancelled": "⏹ cancelled", "context_full": "context full", "length": "stopped at the token limit"}
            self.status_line.update(Text(label[self.finish_reason], style="italic dim"))
            self.status_line.display = True
        else:
            self.status_line.display = False

    def code_blocks(self) -> list[str]:
        return CODE_BLOCK.findall(self.text)
