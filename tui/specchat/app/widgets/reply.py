"""One message in the chat: a user prompt, or a reply coloured token by token by where each token came from."""

from __future__ import annotations

import re

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
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


def legend() -> Text:
    text = Text()
    for kind, label in (("accepted", "accepted draft"), ("corrected", "correction"), ("bonus", "bonus"), ("target", "target")):
        text.append("■ ", style=STYLES[kind] or "bold")
        text.append(label + "  ")
    text.append("abc", style=GHOST_STYLE)
    text.append(" rejected draft")
    return text


def provenance_text(segments: list[tuple[str, str]], ghosts: dict[int, str], show_ghosts: bool) -> Text:
    text = Text()
    for i, (piece, kind) in enumerate(segments):
        text.append(piece, style=STYLES.get(kind, ""))
        if show_ghosts and i in ghosts:
            text.append(ghosts[i], style=GHOST_STYLE)
    return text


def split_think(segments: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """Qwen3-style replies open with <think>…</think>: split them off so the thinking can be collapsed.

    Returns (thinking segments, answer segments, index of the first answer segment).
    """
    joined = "".join(piece for piece, _ in segments)
    if not joined.lstrip().startswith(THINK_OPEN):
        return [], segments, 0
    end = joined.find(THINK_CLOSE)
    if end < 0:
        return segments, [], len(segments)
    end += len(THINK_CLOSE)
    seen = 0
    for i, (piece, _) in enumerate(segments):
        seen += len(piece)
        if seen >= end:
            return segments[: i + 1], segments[i + 1 :], i + 1
    return segments, [], len(segments)


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user-message")


class ReplyView(Vertical):
    """A reply: provenance colours while streaming; after it finishes, optionally rendered Markdown."""

    def __init__(self, *, show_ghosts: bool = False) -> None:
        super().__init__(classes="reply")
        self.segments: list[tuple[str, str]] = []
        self.tokens: list[int] = []
        self.ghosts: dict[int, str] = {}
        self.show_ghosts = show_ghosts
        self.markdown = False
        self.finish_reason: str | None = None
        self.think_text = Static(classes="think-text")
        self.think_box = Collapsible(self.think_text, title="thinking", collapsed=False, classes="think")
        self.body = Static(classes="reply-body")
        self.rendered = Markdown(classes="reply-markdown")
        self.status_line = Static(classes="reply-status")

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
        self.finish(finish_reason)

    def finish(self, finish_reason: str | None) -> None:
        self.finish_reason = finish_reason
        if self.segments and split_think(self.segments)[0]:
            self.think_box.collapsed = True
        self.refresh_view()

    def set_ghosts(self, show: bool) -> None:
        self.show_ghosts = show
        self.refresh_view()

    def set_markdown(self, markdown: bool) -> None:
        self.markdown = markdown and self.finish_reason is not None
        self.refresh_view()

    def refresh_view(self) -> None:
        if not self.is_mounted:
            return
        think, answer, first = split_think(self.segments)
        self.think_box.display = bool(think)
        if think:
            self.think_text.update(provenance_text(think, self.ghosts, self.show_ghosts))
        shifted = {i - first: g for i, g in self.ghosts.items() if i >= first}
        self.body.display = not self.markdown
        self.rendered.display = self.markdown
        if self.markdown:
            self.rendered.update("".join(piece for piece, _ in answer))
        else:
            self.body.update(provenance_text(answer, shifted, self.show_ghosts))
        if self.finish_reason in ("cancelled", "context_full", "length"):
            label = {"cancelled": "⏹ cancelled", "context_full": "context full", "length": "stopped at the token limit"}
            self.status_line.update(Text(label[self.finish_reason], style="italic dim"))
            self.status_line.display = True
        else:
            self.status_line.display = False

    def code_blocks(self) -> list[str]:
        return CODE_BLOCK.findall(self.text)
