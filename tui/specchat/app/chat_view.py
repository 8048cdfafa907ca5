"""The chat view, all the app's main screen holds: the main row (``switchboard.py``: the chat column and the
sidebar) over the footer, and the chats as a whole — a new one, one forked from this one, another opened from the
chat list (at the message a search found), one renamed, exported, or given a system prompt.

The chat controller opens, renames and exports; the view asks and redraws.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.events import Resize
from textual.widget import Widget
from textual.containers import Vertical

from ..chats.controller import ChatController
from ..chats.store import StoreError
from ..errors import Refused, SpecchatError, one_line
from .chat.column import ChatColumn
from .chat.log import ChatLog
from .footer import Footer
from .jobs import Jobs
from .keymap import BoundKeys
from .screens.chat_list import ConversationsScreen
from .screens.modals import SystemPromptScreen
from .settings import Settings
from .sidebar.live import LiveSidebar
from .switchboard import Switchboard


class ChatView(Vertical):
    def __init__(self, controller: ChatController, jobs: Jobs, keys: BoundKeys, settings: Settings) -> None:
        super().__init__(id="chat-view")
        self.controller, self.jobs, self.settings = controller, jobs, settings
        self.switchboard = Switchboard(controller, jobs, keys, settings)

    def compose(self) -> ComposeResult:
        yield self.switchboard
        yield Footer()

    def region_named(self, name: str) -> Widget:
        """The region whose id is ``name`` (``keymap.py``'s keys name the one that carries each out)."""
        return self if name == self.id else self.query_one(f"#{name}")

    @property
    def column(self) -> ChatColumn:
        return self.switchboard.column

    @property
    def chat_log(self) -> ChatLog:
        return self.switchboard.column.chat_log

    @property
    def sidebar(self) -> LiveSidebar:
        return self.switchboard.sidebar

    def on_mount(self) -> None:
        self.column.prompt.focus()
        self._apply_width(self.app.size.width)

    def on_resize(self, event: Resize) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        # A narrow terminal keeps the chat usable: the sidebar collapses instead of squeezing it.
        narrow = width < self.settings.sidebar_min_width
        self.sidebar.display = not narrow
        # Closer keys, and Ctrl+P's palette (still bound) off the bar: at 70 columns F1 stays on it.
        footer = self.query_one(Footer)
        footer.compact, footer.show_command_palette = narrow, not narrow

    def show_chat(self) -> None:
        """Another chat is on screen: no message of the last one stays selected, an edit of one is left as it was."""
        self.column.cancel_edit()
        self.chat_log.selected = None
        self.chat_log.show_turns()
        self.sidebar.redraw()

    def on_chat_log_changed(self) -> None:
        self.sidebar.redraw()

    # -- the chats -----------------------------------------------------------------------------------------------------

    def action_new_chat(self) -> None:
        if self.jobs.busy is not None:
            return
        try:
            self.controller.new_chat()
        except Refused as exc:  # the store fails: this chat's unsaved turns stay on screen
            self.notify(one_line(exc), severity="error")
            return
        self.show_chat()

    def action_conversations(self) -> None:
        store = self.controller.session.store
        if store is None:
            self.notify("chats are not being saved (no database) — nothing to list", severity="warning")
            return
        self.app.push_screen(ConversationsScreen(store, self._rename, self.controller.session.id),
                             self._conversation_chosen)

    def _rename(self, chat_id: int, title: str) -> None:
        """A chat renamed in the list: the one on screen through its session (which keeps the title it shows)."""
        session = self.controller.session
        if chat_id == session.id:
            self.controller.rename(title)
            self.sidebar.redraw()
        elif session.store is not None:
            session.store.rename(chat_id, title)

    def _conversation_chosen(self, choice: tuple[str, int, int | None, int | None, str] | None) -> None:
        if choice is None:
            return
        if self.jobs.busy is not None:
            self.notify(f"{self.jobs.why_busy()} — then open or export it from the list (ctrl+l)", severity="warning")
            return
        action, conversation_id, position, version, words = choice
        if action == "open":
            self.open_conversation(conversation_id)
            session = self.controller.session
            if position is not None and words and session.id == conversation_id:
                try:  # the search may have found it in a version not shown, or in one nested inside that version
                    position = session.show_hit(position, version, words)
                except SpecchatError as exc:
                    self.notify(str(exc), severity="warning")
                self.chat_log.show_turns()
            if position is not None and position < len(session.turns):
                self.chat_log.select(position)  # the message the search found
        elif action == "export":
            self._export(conversation_id)

    def open_conversation(self, conversation_id: int) -> None:
        try:
            self.controller.open_chat(conversation_id)
        except (StoreError, Refused, OSError) as exc:
            self.notify(one_line(exc), severity="error")
            return
        self.show_chat()

    def action_fork_chat(self) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        index = self.chat_log.chosen()
        if index is None:
            self.notify("nothing to fork yet — ask something first", severity="warning")
            return
        before = self.controller.session.title
        try:
            self.controller.fork(index)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.show_chat()
        private = " — private, as the chat it came from: never drafted from in another chat" \
            if self.controller.session.private else ""
        self.notify(f"new chat with messages 1 … {index + 1} of {before!r} (which is kept as it was){private}")

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
        self.app.push_screen(SystemPromptScreen(self.controller.session.system_prompt or ""),
                             self.system_prompt_set)

    def system_prompt_set(self, text: str | None) -> None:
        if text is None or self.jobs.busy is not None:
            return
        self.controller.set_system_prompt(text)
        self.notify("system prompt set for this chat")
