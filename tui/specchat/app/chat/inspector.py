"""The token inspector: a cursor over the chat's reply tokens and a panel saying what decided the one under it.

It reads only the reply's record (its trace: ``chats/replay.token_lines``), so a reopened chat is inspected as it was
live. Arrow keys move the cursor (←/→ a token, ↑/↓ a reply, Home/End), Esc gives the keyboard back to the prompt.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.widgets import Static

from ...chats.replay import copy_source, judgement_of, token_lines
from ..keymap import INSPECTOR_BINDINGS
from .reply import COPIED, SELECTED, ReplyView, UserMessage



class Inspector(Static, can_focus=True):
    BINDINGS = INSPECTOR_BINDINGS

    def __init__(self, turns: Callable[[], list[ReplyView | UserMessage]], on_close: Callable[[], None]) -> None:
        super().__init__(id="inspector")
        self._turns, self._on_close = turns, on_close
        self.view: ReplyView | None = None
        self.index = 0
        self.copy_shown: ReplyView | UserMessage | None = None  # where the n-gram draft's source is underlined
        self.display = False

    def open(self, view: ReplyView, index: int | None = None) -> None:
        """Inspect token ``index`` of ``view`` (its last when None) and take the keyboard."""
        count = len(view.segments)
        if not count:
            return
        self._select(view, count - 1 if index is None else max(0, min(index, count - 1)))
        self.display = True
        self.focus()

    def _select(self, view: ReplyView, index: int) -> None:
        self._unmark()
        self.view, self.index = view, index
        view.mark({index: SELECTED})
        view.scroll_visible()
        self._show_copy(view, index)
        self.update(self.describe())

    def _show_copy(self, view: ReplyView, index: int) -> None:
        """Underline, in the chat, the earlier text an n-gram draft copied this token's draft from (not a copy from
        another chat: nothing here to underline)."""
        judgement = judgement_of(view.record, index)
        if judgement is None or not judgement.copied or judgement.remembered or judgement.origin is not None:
            return
        turns = self._turns()
        turns = turns[: turns.index(view) + 1] if view in turns else [view]
        texts = [t.text if isinstance(t, UserMessage) else "".join(p for p, _ in t.segments[: index if t is view
                                                                                           else None])
                 for t in turns]
        found = copy_source(texts, judgement.copied)
        if found is None:
            return
        turn, start, end = found
        target = turns[turn]
        if isinstance(target, UserMessage):
            target.mark(start, end)
        else:
            marks, seen = dict(target.marks), 0
            for i, (piece, _) in enumerate(target.segments):
                if seen < end and seen + len(piece) > start:
                    marks.setdefault(i, COPIED)
                seen += len(piece)
            target.mark(marks)
        self.copy_shown = target

    def _unmark(self) -> None:
        for shown in (self.view, self.copy_shown):
            if isinstance(shown, UserMessage) and shown.is_attached:
                shown.mark()
            elif shown is not None and shown.is_attached:
                shown.mark({})
        self.copy_shown = None

    def describe(self) -> Text:
        assert self.view is not None
        lines = token_lines(self.view.record, self.index)
        text = Text(f"token {self.index + 1} of {len(self.view.segments)} · ", style="dim")
        text.append(lines[0], style="bold")
        for line in lines[1:]:
            text.append("\n" + line)
        return text

    def action_move(self, delta: int) -> None:
        if self.view is not None:
            self._select(self.view, max(0, min(self.index + delta, len(self.view.segments) - 1)))

    def action_edge(self, end: int) -> None:
        if self.view is not None:
            self._select(self.view, 0 if end == 0 else len(self.view.segments) - 1)

    def action_reply(self, delta: int) -> None:
        views = [v for v in self._turns() if isinstance(v, ReplyView) and v.segments]
        if self.view not in views:
            return
        i = views.index(self.view) + delta
        if 0 <= i < len(views):
            self._select(views[i], len(views[i].segments) - 1)

    def action_close(self) -> None:
        self._unmark()
        self.view = None
        self.display = False
        self._on_close()
