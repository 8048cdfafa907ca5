"""The app's changes to the chat itself: a selected message, its versions ("‹ 2/3 ›"), editing and sending it again,
forking, deleting, and copying one of a reply's code blocks.

A mixin of ``SpecchatApp``; the chat controller does the work (the REPL's /edit, /branch, /fork and /delete call the
same methods), this module only says what is selected and redraws. Nothing here runs while a reply streams.
"""

from __future__ import annotations

from ..chats.records import ReplyRecord, UserTurn
from ..errors import SpecchatError
from .host import MixinBase
from .screens import CodeBlockScreen, ConfirmScreen
from .widgets.prompt import PromptInput
from .widgets.reply import code_blocks


class EditingActions(MixinBase):
    """Mixed into ``SpecchatApp`` (its ``conversation``, ``controller``, ``busy``, views and ``notify``)."""

    selected: int | None = None  # the selected turn (alt+up / alt+down)
    editing: int | None = None  # the user turn whose text the prompt holds, to send in its place
    edit_sent: int | None = None  # the turn the exchange in progress edits (an edit refused stays one)
    _before_edit = ""  # what the prompt held before the edit, given back by Esc

    # -- selection ---------------------------------------------------------------------------------------------------

    def action_select_message(self, step: int) -> None:
        turns = self.session.turns
        if not turns:
            self.notify("no messages yet — ask something first", severity="warning")
            return
        if self.selected is None:
            self.selected = len(turns) - 1 if step < 0 else None
        else:
            self.selected += step
            self.selected = None if self.selected >= len(turns) else max(self.selected, 0)
        self.show_selection()

    def _still_selected(self) -> int | None:
        """The selected turn, while the chat still has it (turns go with a deletion, a version shown, a refusal)."""
        if self.selected is not None and self.selected >= len(self.session.turns):
            self.selected = None
        return self.selected

    def show_selection(self) -> None:
        turns = self.session.turns
        self._still_selected()
        for i, turn in enumerate(turns):
            view = self.view_of(turn)
            if view is not None:
                view.set_class(i == self.selected, "selected")
                # Marked in words as well as in colour: a title on the border the selection adds.
                view.border_title = f"▶ selected · {self.binding_key('edit_message')} edit" \
                    f" · {self.binding_key('fork_chat')} fork · {self.binding_key('delete_message')} delete" \
                    if i == self.selected else None
                if i == self.selected:
                    view.scroll_visible(animate=False)

    def forget_selection(self) -> None:
        """Another chat is shown: no message of this one stays selected, an edit of one is left as it was."""
        self.cancel_edit()
        self.selected = None

    def _chosen(self, user_only: bool = False) -> int | None:
        """The selected turn, else the last one (the last of the user's with ``user_only``)."""
        turns = self.session.turns
        selected = self._still_selected()
        if selected is not None and (not user_only or isinstance(turns[selected], UserTurn)):
            return selected
        candidates = [i for i, t in enumerate(turns) if not user_only or isinstance(t, UserTurn)]
        return candidates[-1] if candidates else None

    def _idle_or_say(self) -> bool:
        why = self.why_busy()
        if why:
            self.notify(why, severity="warning")
        return why is None

    # -- versions, edit, fork, delete ---------------------------------------------------------------------------------

    def action_version(self, step: int) -> None:
        if not self._idle_or_say():
            return
        session = self.session
        index = self._still_selected()
        if index is None:  # the last message that has versions
            index = next((i for i in range(len(session.turns) - 1, -1, -1) if session.alternatives(i)), None)
        if index is None:
            self.notify("no message has another version — edit one (alt+e) or regenerate a reply (ctrl+r)",
                        severity="warning")
            return
        try:
            shown, count = self.controller.session.step_alternative(index, step)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.selected = index
        self.show_turns()
        self.notify(f"message {index + 1}: version {shown} of {count}")

    def action_edit_message(self) -> None:
        if not self._idle_or_say():
            return
        index = self._chosen(user_only=True)
        if index is None:
            self.notify("nothing of yours to edit yet — ask something first", severity="warning")
            return
        prompt = self.query_one(PromptInput)
        if self.editing is None:
            self._before_edit = prompt.text
        self.editing = index
        prompt.load_text(self.session.turns[index].text)
        prompt.move_cursor(prompt.document.end)
        prompt.focus()
        self.status = (f"editing message {index + 1}: Enter sends it in its place (the old version is kept), Esc leaves"
                       " it as it was")

    def send_edit(self, text: str) -> bool:
        """The prompt's text sent in place of the message being edited; False when no edit is in progress."""
        index, self.editing = self.editing, None
        if index is None:
            return False
        self.edit_sent = index
        try:
            exchange = self.controller.edit(index, text)
        except SpecchatError as exc:  # e.g. a file that cannot be attached: still an edit, to change
            self.editing = index
            self.notify(str(exc), severity="warning", timeout=10)
            self.query_one(PromptInput).load_text(text)
            return True
        self.status = ""
        self.selected = None
        self.show_selection()
        self.start_exchange(exchange)
        return True

    def cancel_edit(self) -> bool:
        """Esc while editing: the prompt holds what it held before; False when no edit is in progress."""
        if self.editing is None:
            return False
        self.query_one(PromptInput).load_text(self._before_edit)
        self.editing, self.status = None, ""
        return True

    def action_fork_chat(self) -> None:
        if not self._idle_or_say():
            return
        index = self._chosen()
        if index is None:
            self.notify("nothing to fork yet — ask something first", severity="warning")
            return
        before = self.session.title
        try:
            self.controller.fork(index)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.forget_selection()
        self.show_turns()
        self.refresh_sidebar()
        private = " — private, as the chat it came from: never drafted from in another chat" \
            if self.session.private else ""
        self.notify(f"new chat with messages 1 … {index + 1} of {before!r} (which is kept as it was){private}")

    def action_delete_message(self) -> None:
        if not self._idle_or_say():
            return
        index = self._chosen()
        if index is None:
            self.notify("no message to delete", severity="warning")
            return
        after = len(self.session.turns) - index - 1
        question = f"Delete message {index + 1}" + (f" and the {after} after it?" if after else "?")
        self.push_screen(ConfirmScreen(question), lambda yes: self._delete(index) if yes else None)

    def _delete(self, index: int) -> None:
        if not self._idle_or_say():
            return
        try:
            self.controller.delete_from(index)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.selected = None
        self.show_turns()
        self.refresh_sidebar()
        self.notify(f"deleted from message {index + 1} on")

    # -- copying -----------------------------------------------------------------------------------------------------

    def action_copy_code(self) -> None:
        turns = self.session.turns
        chosen = self._chosen()
        index = chosen if chosen is not None and isinstance(turns[chosen], ReplyRecord) \
            else next((i for i in range(len(turns) - 1, -1, -1) if isinstance(turns[i], ReplyRecord)), None)
        blocks = code_blocks(turns[index].text) if index is not None else []
        if not blocks:
            self.notify("this reply has no code block" if index is not None else "no reply yet", severity="warning")
        elif len(blocks) == 1:
            self._copy_block(blocks[0])
        else:
            self.push_screen(CodeBlockScreen(blocks), lambda chosen: self._copy_block(chosen) if chosen else None)

    def _copy_block(self, block: str) -> None:
        self.copy_to_clipboard(block)
        lines = block.count("\n") + (not block.endswith("\n"))
        self.notify(f"code block copied to the clipboard ({lines} line{'s' * (lines != 1)})")
