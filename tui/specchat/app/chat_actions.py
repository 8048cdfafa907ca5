"""The app's actions on the chat as a whole: a new one, another opened from the chat list (at the message a search
found), one renamed, exported, or given a system prompt.

A mixin of ``SpecchatApp``; the chat controller opens, renames and exports, this module asks and redraws.
"""

from __future__ import annotations

from ..chats.store import StoreError
from ..errors import Refused, SpecchatError, one_line
from .chat_list import ConversationsScreen
from .host import MixinBase
from .screens import SystemPromptScreen


class ChatActions(MixinBase):
    """Mixed into ``SpecchatApp`` (its ``controller``, ``session``, ``busy``, views and ``notify``)."""

    def action_new_chat(self) -> None:
        if self.busy is not None:
            return
        try:
            self.controller.new_chat()
        except Refused as exc:  # the store fails: this chat's unsaved turns stay on screen
            self.notify(one_line(exc), severity="error")
            return
        self.forget_selection()
        self.show_turns()
        self.refresh_sidebar()

    def action_conversations(self) -> None:
        if self.session.store is None:
            self.notify("chats are not being saved (no database) — nothing to list", severity="warning")
            return
        self.push_screen(ConversationsScreen(self.session.store, self._rename, self.session.id),
                         self._conversation_chosen)

    def _rename(self, chat_id: int, title: str) -> None:
        """A chat renamed in the list: the one on screen through its session (which keeps the title it shows)."""
        if chat_id == self.session.id:
            self.controller.rename(title)
            self.refresh_sidebar()
        else:
            self.session.store.rename(chat_id, title)

    def _conversation_chosen(self, choice: tuple[str, int, int | None, int | None, str] | None) -> None:
        if choice is None:
            return
        if self.busy is not None:
            self.notify(f"{self.why_busy()} — then open or export it from the list (ctrl+l)", severity="warning")
            return
        action, conversation_id, position, version, words = choice
        if action == "open":
            self.open_conversation(conversation_id)
            if position is not None and words and self.session.id == conversation_id:
                try:  # the search may have found it in a version not shown, or in one nested inside that version
                    position = self.controller.session.show_hit(position, version, words)
                except SpecchatError as exc:
                    self.notify(str(exc), severity="warning")
                self.show_turns()
            if position is not None and position < len(self.session.turns):
                self.selected = position  # the message the search found
                self.show_selection()
        elif action == "export":
            self._export(conversation_id)

    def open_conversation(self, conversation_id: int) -> None:
        try:
            self.controller.open_chat(conversation_id)
        except (StoreError, Refused, OSError) as exc:
            self.notify(one_line(exc), severity="error")
            return
        self.forget_selection()
        self.show_turns()
        self.refresh_sidebar()

    def action_export(self) -> None:
        self._export(None)

    def _export(self, chat_id: int | None) -> None:
        try:
            md_path, json_path = self.controller.export(self.settings.exports, chat_id)
        except (SpecchatError, OSError) as exc:
            self.notify(f"cannot export to {self.settings.exports}: {one_line(exc)}", severity="warning")
            return
        self.notify(f"exported to {md_path} and {json_path.name}")

    def action_system_prompt(self) -> None:
        self.push_screen(SystemPromptScreen(self.session.system_prompt or ""), self._system_prompt_set)

    def _system_prompt_set(self, text: str | None) -> None:
        if text is None or self.busy is not None:
            return
        self.controller.set_system_prompt(text)
        self.notify("system prompt set for this chat")
