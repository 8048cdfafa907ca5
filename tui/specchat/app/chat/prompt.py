"""The multi-line prompt: Enter sends, Ctrl+J (or Alt+Enter) inserts a newline, Up/Down recall earlier prompts, Tab
completes an ``@file`` to attach."""

from __future__ import annotations

import os
from pathlib import Path

from textual import events
from textual.message import Message
from textual.strip import Strip
from textual.widgets import TextArea

from ...chats.attachments import candidates, mention_before
from ..keymap import INPUT_BINDINGS


class PromptInput(TextArea):
    BINDINGS = INPUT_BINDINGS

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class FilesFound(Message):
        """Tab found several files for the ``@word`` before the cursor (completed as far as they agree)."""

        def __init__(self, word: str, found: list[str]) -> None:
            super().__init__()
            self.word, self.found = word, found

    class PasteRefused(Message):
        def __init__(self, size: int, limit: int) -> None:
            super().__init__()
            self.size, self.limit = size, limit

    def __init__(self, *, max_paste: int, **kwargs) -> None:
        super().__init__(id="prompt", soft_wrap=True, show_line_numbers=False,
                         placeholder="Type a message · Enter sends · Ctrl+J new line · F1 every key", **kwargs)
        self.cursor_blink = False
        self.prompts: list[str] = []
        self._recall = 0
        self._max_paste = max_paste
        self.editing: int | None = None  # the user turn whose text the prompt holds, to send in its place
        self.edit_sent: int | None = None  # the turn the exchange in progress edits (an edit refused stays one)
        self._before_edit = ""  # what the prompt held before the edit, given back by Esc

    def render_line(self, y: int) -> Strip:
        # A layout pass can squeeze the prompt to no width (the sidebar collapses only after the resize that calls for
        # it), and TextArea cannot wrap its placeholder into zero columns.
        if self.content_size.width < 1:
            return Strip.blank(self.size.width)
        return super().render_line(y)

    def _submit(self) -> None:
        text = self.text
        if not text.strip():
            return  # an empty prompt sends nothing
        self.prompts.append(text)
        self._recall = len(self.prompts)
        self.clear()
        self.post_message(self.Submitted(text))

    WAITING = "waiting for the model to load — sent then · Esc withdraws it"

    @property
    def waiting(self) -> bool:
        """A message sent while the model loads, held here (read-only, so marked) until it is ready."""
        return self.has_class("waiting")

    def hold(self, text: str) -> None:
        self.load_text(text)
        self.read_only = True
        self.border_title = self.WAITING
        self.add_class("waiting")

    def release(self) -> str:
        """The message held, taken out of the waiting state (it stays in the prompt)."""
        self.read_only = False
        self.border_title = None
        self.remove_class("waiting")
        return self.text

    def begin_edit(self, index: int, text: str) -> None:
        """The prompt holds message ``index``'s text, to send in its place."""
        if self.editing is None:
            self._before_edit = self.text
        self.editing = index
        self.load_text(text)
        self.move_cursor(self.document.end)
        self.focus()

    def take_edit(self) -> int | None:
        """The message being edited, now being sent (None: no edit in progress): the exchange edits it."""
        self.edit_sent, self.editing = self.editing, None
        return self.edit_sent

    def cancel_edit(self) -> bool:
        """Esc while editing: the prompt holds what it held before; False when no edit is in progress."""
        if self.editing is None:
            return False
        self.load_text(self._before_edit)
        self.editing = None
        return True

    def action_submit(self) -> None:
        if self.waiting:
            return  # sent once the model is loaded
        self._submit()

    def action_complete(self) -> None:
        row, column = self.cursor_location
        mention = mention_before(self.document.get_line(row)[:column])
        if mention is None:
            self.screen.focus_next()
            return
        found = candidates(mention, Path.cwd())
        common = os.path.commonprefix(found) if found else ""
        if len(common) > len(mention):
            self.insert(common[len(mention):])
        if len(found) != 1:
            self.post_message(self.FilesFound(f"@{mention}", found))

    def action_newline(self) -> None:
        self.insert("\n")

    def action_history_previous(self) -> None:
        if self.cursor_location[0] > 0 or not self.prompts:
            self.action_cursor_up()
            return
        self._recall = max(self._recall - 1, 0)
        self._show(self.prompts[self._recall])

    def action_history_next(self) -> None:
        if self.cursor_location[0] < self.document.line_count - 1 or not self.prompts:
            self.action_cursor_down()
            return
        self._recall = min(self._recall + 1, len(self.prompts))
        self._show(self.prompts[self._recall] if self._recall < len(self.prompts) else "")

    def _show(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    # Textual runs a subclass's handlers before its base classes' and prevent_default() skips the rest, so these see
    # keys and pastes before TextArea's own handling does.

    def on_key(self, event: events.Key) -> None:
        # TextArea turns Enter into a newline; a key bound here, after any keymap, skips that and reaches its binding.
        active = self.screen.active_bindings.get(event.key)
        if active is not None and active.node is self:
            event.prevent_default()

    def on_paste(self, event: events.Paste) -> None:
        if len(event.text) > self._max_paste:
            event.prevent_default()
            event.stop()
            self.post_message(self.PasteRefused(len(event.text), self._max_paste))
