"""The chat list (Ctrl+L): every stored chat, and a search of what was said in them, the hits highlighted.

Typing in the search field lists the messages of every chat holding the words (chats/search.py: accents and case
aside, the last word also as the start of one); Enter on a hit opens its chat at that message. An empty field lists
the chats. Renaming the chat on screen goes through the chat session, so the title it keeps is the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from ...chats.search import Hit
from ...chats.store import Store, StoreError
from .modals import CLOSE, ConfirmScreen, _Modal

T = TypeVar("T")
HIT_STYLE = "bold reverse"
MAX_HITS = 100


class ChatOptions(OptionList):
    """The chats or hits; its letter keys act on the highlighted one (in the search field, letters are text)."""

    BINDINGS = [
        Binding("r", "screen.rename", "Rename", id="chat_rename", tooltip="Rename the highlighted chat"),
        Binding("d", "screen.delete", "Delete", id="chat_delete", tooltip="Delete the highlighted chat"),
        Binding("e", "screen.export", "Export", id="chat_export", tooltip="Export the highlighted chat to Markdown and JSON"),
        Binding("slash", "screen.to_search", "Search", id="chat_search", tooltip="Back to the search field"),
    ]


class ConversationsScreen(_Modal):
    """Dismissed with ("open", chat id, message position or None, version or None, the words searched) or
    ("export", chat id, None, None, "")."""

    BINDINGS = CLOSE + [Binding("down", "to_list", "To the list", id="chat_list_down", show=False,
                                tooltip="From the search field to the chats (or hits) below it")]

    def __init__(self, store: Store, rename: Callable[[int, str], None], current: int | None) -> None:
        super().__init__()
        self.store, self.rename, self.current = store, rename, current
        self.hits: list[Hit] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="conversations", classes="dialog"):
            yield Label("Chats — type to search what was said · ↓ the list: Enter opens, r rename, d delete,"
                        " e export, / search", id="chats-help")
            yield Input(placeholder="search every chat (accents and case aside)…", id="chat-search")
            yield ChatOptions(id="chat-list")
            yield Input(placeholder="new title, then Enter", id="rename")

    def on_mount(self) -> None:
        self.query_one("#rename", Input).display = False
        self._reload()

    @property
    def words(self) -> str:
        return self.query_one("#chat-search", Input).value.strip()

    def _reload(self) -> None:
        options = self.query_one("#chat-list", OptionList)
        options.clear_options()
        words = self.words
        if not words:
            self.hits = []
            for c in self._stored(self.store.conversations) or []:
                marker = "  (this chat)" if c.id == self.current else ""
                options.add_option(Option(Text.assemble((c.title or "(untitled)", "bold"), (f"  {c.profile}", "dim"),
                                                        (marker, "dim")), id=f"chat-{c.id}"))
            return
        self.hits = self._stored(lambda: self.store.search(words, MAX_HITS)) or []
        for n, hit in enumerate(self.hits):
            if n:
                options.add_option(None)  # a rule between hits of two lines each
            options.add_option(Option(hit_line(hit, words), id=f"hit-{n}"))
        if not self.hits:
            options.add_option(Option(Text(f"no message holds {words!r}", style="dim"), id="none", disabled=True))

    def _stored(self, call: Callable[[], T]) -> T | None:
        """A store call; one that fails (a damaged database, a full disk) is one line, not a traceback."""
        try:
            return call()
        except StoreError as exc:
            self.notify(str(exc), severity="error", timeout=15)
            return None

    @on(Input.Changed, "#chat-search")
    def searched(self, _event: Input.Changed) -> None:
        self._reload()

    @on(Input.Submitted, "#chat-search")
    def search_submitted(self, _event: Input.Submitted) -> None:
        self.action_to_list()

    def action_to_search(self) -> None:
        self.query_one("#chat-search", Input).focus()

    def action_to_list(self) -> None:
        options = self.query_one("#chat-list", OptionList)
        if options.option_count:
            options.highlighted = options.highlighted or 0
            options.focus()

    def _highlighted(self) -> tuple[int, int | None, int | None] | None:
        """The highlighted chat's id and, for a hit, the message's position in it and the version it is in."""
        options = self.query_one("#chat-list", OptionList)
        if options.highlighted is None:
            return None
        key = options.get_option_at_index(options.highlighted).id or ""
        if key.startswith("chat-"):
            return int(key.removeprefix("chat-")), None, None
        if key.startswith("hit-"):
            hit = self.hits[int(key.removeprefix("hit-"))]
            return hit.chat_id, hit.position, hit.ordinal
        return None

    @on(OptionList.OptionSelected)
    def open(self, _event: OptionList.OptionSelected) -> None:
        chosen = self._highlighted()
        if chosen is not None:
            self.dismiss(("open", *chosen, self.words))

    def action_rename(self) -> None:
        if self._highlighted() is not None:
            field = self.query_one("#rename", Input)
            field.display = True
            field.focus()

    @on(Input.Submitted, "#rename")
    def renamed(self, event: Input.Submitted) -> None:
        chosen = self._highlighted()
        if chosen is not None and event.value.strip():
            self._stored(lambda: self.rename(chosen[0], event.value.strip()))
        event.input.display = False
        event.input.value = ""
        self._reload()
        self.query_one("#chat-list").focus()

    def action_delete(self) -> None:
        chosen = self._highlighted()
        if chosen is None:
            return
        if chosen[0] == self.current:
            self.notify("this is the chat on screen — start a new one (ctrl+n) or open another first, then delete it",
                        severity="warning")
            return
        chat = self._stored(lambda: self.store.get(chosen[0]))
        if chat is not None:
            self.app.push_screen(ConfirmScreen(f"Delete the chat {chat.title!r}, every message and version of it?"),
                                 lambda yes: self._delete(chat.id) if yes else None)

    def _delete(self, chat_id: int) -> None:
        self._stored(lambda: self.store.delete(chat_id))
        self._reload()

    def action_export(self) -> None:
        chosen = self._highlighted()
        if chosen is not None:
            self.dismiss(("export", chosen[0], None, None, ""))


def hit_line(hit: Hit, words: str) -> Text:
    """A hit as one option: its chat's title, the message's number and role, its text around the match, highlighted."""
    excerpt, spans = hit.excerpt(words, 90)
    text = Text.assemble((hit.title or "(untitled)", "bold"), (f"  {hit.where}\n", "dim"))
    start = len(text)
    text.append(excerpt)
    for a, b in spans:
        text.stylize(HIT_STYLE, start + a, start + b)
    return text
