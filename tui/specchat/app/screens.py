"""Secondary screens, one modal per action: help, profile picker, A/B comparison, conversations, system prompt."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from ..errors import SpecchatError
from ..profiles import available_profiles, load_profile
from ..chats.store import Store, StoreError
from ..chats.ab import ABResult
from .keymap import ALL_BINDINGS

T = TypeVar("T")

CLOSE = [Binding("escape", "dismiss_screen", "Close", id="close_modal", tooltip="Close this dialog")]


class _Modal(ModalScreen):
    BINDINGS = CLOSE

    def action_dismiss_screen(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    BINDINGS = CLOSE + [Binding("f1", "dismiss_screen", "Close", id="close_help", show=False)]

    def __init__(self, keymap: Path) -> None:
        super().__init__()
        self.keymap = keymap

    def compose(self) -> ComposeResult:
        table = Table(title="Keys", expand=True, show_edge=False)
        table.add_column("key", style="bold")
        table.add_column("does")
        table.add_column("id", style="dim")
        active = {b.binding.id: key for key, b in self.app.screen_stack[0].active_bindings.items() if b.binding.id}
        for binding in ALL_BINDINGS:
            key = active.get(binding.id, binding.key)
            table.add_row(key, binding.tooltip or binding.description, binding.id)
        note = Text(f"\nRemap any key in {self.keymap}, e.g.\n", style="dim")
        note.append('[keys]\nab_compare = "f9"\n', style="")
        with Vertical(id="help", classes="dialog"):
            yield Static(table)
            yield Static(note)


class ProfileScreen(_Modal):
    """Pick a profile, or a draft for the current target (compatible drafts first, each other one with its reason)."""

    def __init__(self, target: Path | None, current: str | None) -> None:
        super().__init__()
        self.target = target
        self.current = current

    def compose(self) -> ComposeResult:
        options: list[Option] = []
        for name in available_profiles():
            try:
                profile = load_profile(name)
                label = Text.assemble((f"{name:<20}", "bold"), f"{profile.values['draft']['method']:<7}",
                                      (profile.description, "dim"))
            except SpecchatError as exc:
                label = Text.assemble((name, "bold"), ("  invalid: " + str(exc), "red"))
            if name == self.current:
                label.append("  ← current", style="green")
            options.append(Option(label, id=f"profile:{name}"))
        with Vertical(id="profiles", classes="dialog"):
            yield Label("Profiles — Enter switches; only what changed reloads")
            yield OptionList(*options, id="profile-list")
            yield Label("Drafts for the current target")
            yield OptionList(Option(Text("looking through your model folders…", style="dim"), disabled=True),
                             id="draft-list")

    def on_mount(self) -> None:
        self._find_drafts()

    @work(thread=True, exclusive=True)
    def _find_drafts(self) -> None:
        """Reading every GGUF's vocabulary takes a while with many models: never on the UI thread."""
        drafts = self._drafts()
        self.app.call_from_thread(self._show_drafts, drafts)

    def _show_drafts(self, drafts: list[Option]) -> None:
        listing = next(iter(self.query("#draft-list").results(OptionList)), None)
        if listing is None:  # the picker closed while the search ran: its widgets are being removed
            return
        listing.clear_options()
        listing.add_options(drafts)

    def _drafts(self) -> list[Option]:
        if self.target is None:
            return [Option(Text("load a target first", style="dim"), disabled=True)]
        from ..profiles import models
        from ..profiles.drafts import draft_candidates
        from ..profiles.embedded import draft_path

        try:
            pool = models.discover() + [draft_path()]
            candidates = draft_candidates(self.target, pool)
        except SpecchatError as exc:
            return [Option(Text(str(exc), style="red"), disabled=True)]
        options = []
        for c in candidates:
            label = Text.assemble(("✓ " if c.compatible else "✗ ", "green" if c.compatible else "red"), c.path.name,
                                  (f"  {c.size / 1e9:.2f} GB", "dim"))
            if not c.compatible:
                label.append(f"  {c.problems[0]}", style="dim")
            options.append(Option(label, id=f"draft:{c.path}", disabled=not c.compatible))
        return options or [Option(Text("no smaller GGUF found in your model folders", style="dim"), disabled=True)]

    @on(OptionList.OptionSelected)
    def chosen(self, event: OptionList.OptionSelected) -> None:
        kind, _, value = (event.option.id or "").partition(":")
        self.dismiss((kind, value))


class ABScreen(_Modal):
    def __init__(self, result: ABResult) -> None:
        super().__init__()
        self.result = result

    def compose(self) -> ComposeResult:
        result = self.result
        table = Table(title=result.title, expand=True)
        table.add_column("")
        table.add_column(f"speculation ({result.spec.get('method', '?')})", justify="right")
        table.add_column("plain decoding", justify="right")
        speedup = result.speedup
        for label, spec, plain in result.rows():
            if label == "speed-up" and speedup is not None:
                table.add_row(label, Text(spec, style="green" if speedup >= 1 else "#ffaf00"), plain)
            else:
                table.add_row(label, spec, plain)
        style = "dim" if result.sampled else "green" if result.identical else "bold red"
        with Vertical(id="ab", classes="dialog"):
            yield Static(table)
            yield Static(Text.assemble("replies identical: ", (result.verdict, style)), id="ab-identical")
            yield Button("Close", id="ab-close")

    @on(Button.Pressed, "#ab-close")
    def close(self) -> None:
        self.dismiss(None)


class ConversationsScreen(_Modal):
    BINDINGS = CLOSE + [
        Binding("r", "rename", "Rename", id="chat_rename", tooltip="Rename the highlighted chat"),
        Binding("d", "delete", "Delete", id="chat_delete", tooltip="Delete the highlighted chat"),
        Binding("e", "export", "Export", id="chat_export", tooltip="Export the highlighted chat to Markdown and JSON"),
    ]

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        with Vertical(id="conversations", classes="dialog"):
            yield Label("Chats — Enter opens · r renames · d deletes · e exports")
            yield OptionList(id="chat-list")
            yield Input(placeholder="new title, then Enter", id="rename")

    def on_mount(self) -> None:
        self.query_one("#rename", Input).display = False
        self._reload()

    def _reload(self) -> None:
        options = self.query_one("#chat-list", OptionList)
        options.clear_options()
        for c in self._stored(self.store.conversations) or []:
            options.add_option(Option(Text.assemble((c.title, "bold"), (f"  {c.profile}", "dim")), id=str(c.id)))

    def _stored(self, call: Callable[[], T]) -> T | None:
        """A store call; one that fails (a damaged database, a full disk) is one line, not a traceback."""
        try:
            return call()
        except StoreError as exc:
            self.notify(str(exc), severity="error", timeout=15)
            return None

    def _highlighted(self) -> int | None:
        options = self.query_one("#chat-list", OptionList)
        if options.highlighted is None:
            return None
        return int(options.get_option_at_index(options.highlighted).id)

    @on(OptionList.OptionSelected)
    def open(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(("open", int(event.option.id)))

    def action_rename(self) -> None:
        if self._highlighted() is not None:
            field = self.query_one("#rename", Input)
            field.display = True
            field.focus()

    @on(Input.Submitted, "#rename")
    def renamed(self, event: Input.Submitted) -> None:
        chosen = self._highlighted()
        if chosen is not None and event.value.strip():
            self._stored(lambda: self.store.rename(chosen, event.value.strip()))
        event.input.display = False
        event.input.value = ""
        self._reload()
        self.query_one("#chat-list").focus()

    def action_delete(self) -> None:
        chosen = self._highlighted()
        if chosen is not None:
            self._stored(lambda: self.store.delete(chosen))
            self._reload()

    def action_export(self) -> None:
        chosen = self._highlighted()
        if chosen is not None:
            self.dismiss(("export", chosen))


class SystemPromptScreen(_Modal):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="system", classes="dialog"):
            yield Label("System prompt for this chat")
            area = TextArea(self.text, id="system-text")
            area.cursor_blink = False
            yield area
            with Horizontal():
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    @on(Button.Pressed, "#save")
    def save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text)

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
