"""Secondary screens, one modal per action: help, profile picker, A/B comparison, system prompt; a question, a code
block to pick. (The chat list and its search: chat_list.py.)"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from ...errors import SpecchatError
from ...profiles import Profile, available_profiles, load_profile
from ...profiles.plan import plan
from ...profiles.presence import absent_models
from ...chats.ab import ABResult
from ..keymap import ALL_BINDINGS, INSPECTOR_BINDINGS, REPLAY_BINDINGS, BoundKeys

CLOSE = [Binding("escape", "dismiss_screen", "Close", id="close_modal", tooltip="Close this dialog")]


class _Modal(ModalScreen):
    BINDINGS = CLOSE

    def action_dismiss_screen(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    BINDINGS = CLOSE + [Binding("f1", "dismiss_screen", "Close", id="close_help", show=False)]

    def __init__(self, keymap: Path, keys: BoundKeys) -> None:
        super().__init__()
        self.keymap, self.keys = keymap, keys

    def compose(self) -> ComposeResult:
        table = Table(expand=True, show_edge=False)
        table.add_column("key", style="bold")
        table.add_column("does")
        table.add_column("id", style="dim")
        favourites = [b for b in ALL_BINDINGS if (b.id or "").startswith("favourite_")]
        for binding in ALL_BINDINGS:
            if binding in favourites[1:]:
                continue
            if binding is favourites[0]:  # nine keys of one kind: one row
                keys = [self.keys.of(b.id) for b in favourites]
                as_made = keys == [b.key for b in favourites]  # alt+1 … alt+9, or the keys a keymap gave them
                table.add_row(f"{keys[0]} … {keys[-1]}" if as_made else " ".join(keys), Text("Favourite profiles 1–9 ([favourites] profiles = [...] in settings.toml)"),
                              f"{favourites[0].id} … {favourites[-1].id}")
                continue
            key = self.keys.of(binding.id)
            table.add_row(key, binding.tooltip or binding.description, binding.id)
        for where, bindings in (("inspector", INSPECTOR_BINDINGS), ("replay", REPLAY_BINDINGS)):
            for binding in bindings:
                table.add_row(self.keys.of(binding.id), f"{where}: {binding.tooltip}", binding.id)
        note = Text(f"\nRemap any key in {self.keymap}, e.g.\n", style="dim")
        note.append('[keys]\nab_compare = "f10"\n', style="")
        # Longer than a terminal is tall: it scrolls (↑ ↓, PgUp PgDn, Home End), and says how it closes.
        with VerticalScroll(id="help", classes="dialog") as scroll:
            scroll.border_title = "keys — ↑ ↓ PgUp PgDn scroll · Esc or F1 closes"
            yield Static(table)
            yield Static(note)

    def on_mount(self) -> None:
        self.query_one("#help").focus()


class ProfileScreen(_Modal):
    """Pick a profile (type to filter; each with its method and backend, and marked when its models are not on this
    machine), or a draft for the current target (compatible drafts first, each other one with its reason)."""

    BINDINGS = CLOSE + [Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False)]

    def __init__(self, target: Path | None, current: str | None) -> None:
        super().__init__()
        self.target = target
        self.current = current
        self.profiles: list[tuple[str, Profile | None, str]] = []  # name, profile, why it cannot be loaded
        for name in available_profiles():
            try:
                self.profiles.append((name, load_profile(name), ""))
            except SpecchatError as exc:
                self.profiles.append((name, None, f"invalid: {exc}"))
        self.absent: dict[str, str] | None = None  # name → what of its models is missing; None while looking
        self.plans: dict[str, tuple[str, bool]] = {}  # name → its memory plan in a line, and whether it warns
        self.drafts_listed = False
        self.wanted = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="profiles", classes="dialog"):
            yield Label("Profiles (● in use) — type to filter, Enter switches; only what changed reloads")
            search = Input(placeholder="filter: a name, a method, a backend", id="profile-filter")
            search.cursor_blink = False  # as the prompt's: a steady cursor (a blink is a frame, and a snapshot's coin)
            yield search
            yield OptionList(*self._profile_options(), id="profile-list")
            yield Label("Drafts for the current target")
            yield OptionList(Option(Text("looking through your model folders…", style="dim"), disabled=True),
                             id="draft-list")

    def _ranked(self) -> list[tuple[str, Profile | None, str]]:
        """The profiles in the order a typed filter ranks them: the name typed in full, then names it begins, then
        names holding every word typed, then the rest (whose method, backend or description holds them)."""
        wanted = self.wanted.lower()
        words = wanted.split()

        def rank(entry: tuple[str, Profile | None, str]) -> int:
            name = entry[0].lower()
            if name == wanted:
                return 0
            if wanted and name.startswith(wanted):
                return 1
            return 2 if words and all(word in name for word in words) else 3

        return sorted(self.profiles, key=rank)

    def _profile_options(self) -> list[Option]:
        options = []
        for name, profile, problem in self._ranked():
            backend = profile.backend_kind.label if profile else ""
            shown = f"{name} {profile.method if profile else ''} {backend} {profile.description if profile else ''}"
            if not all(word in shown.lower() for word in self.wanted.lower().split()):  # every word typed
                continue
            problem = problem or (self.absent or {}).get(name, "")
            # The profile in use is marked first on its line: a mark after the description is cut off by the dialog.
            label = Text("● ", style="bold green") if name == self.current else Text("  ")
            if profile is None:
                label.append_text(Text.assemble((name, "bold"), ("  " + problem, "red")))
            else:
                label.append_text(Text.assemble((f"{name:<20}", "bold"), f"{profile.method:<6} ",
                                                (f"{backend:<13}", "cyan"), (profile.description, "dim")))
                if problem:
                    label.append(f"  ✗ {problem}", style="red")
                if name in self.plans:  # where it would run, against the GPU and the build that are here
                    line, warns = self.plans[name]
                    label.append(f"\n    {line}", style="#ffaf00" if warns else "dim")
            options.append(Option(label, id=f"profile:{name}", disabled=bool(problem)))
        return options or [Option(Text(f"no profile matches {self.wanted!r}", style="dim"), disabled=True)]

    def _show_profiles(self, *, best_first: bool = False) -> None:
        """The list again; the highlight stays where it was, or with ``best_first`` (a new filter) goes to the best
        match — Enter then picks the profile typed, not the one that was highlighted before."""
        listing = next(iter(self.query("#profile-list").results(OptionList)), None)
        if listing is None:  # closing
            return
        kept = listing.highlighted_option
        highlighted = kept.id if kept is not None and not best_first else None
        listing.clear_options()
        listing.add_options(self._profile_options())
        options = [listing.get_option_at_index(i) for i in range(listing.option_count)]
        ids = [option.id for option in options]
        enabled = [i for i, option in enumerate(options) if not option.disabled]
        if highlighted in ids and not options[ids.index(highlighted)].disabled:
            listing.highlighted = ids.index(highlighted)
        elif enabled:
            listing.highlighted = enabled[0]

    @on(Input.Changed, "#profile-filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.wanted = event.value.strip()
        self._show_profiles(best_first=True)

    @on(Input.Submitted, "#profile-filter")
    def filter_submitted(self, _event: Input.Submitted) -> None:
        """Enter in the filter chooses the highlighted profile, as Enter in the list does."""
        option = self.query_one("#profile-list", OptionList).highlighted_option
        if option is not None and not option.disabled and option.id:
            self.dismiss(("profile", option.id.partition(":")[2]))
        else:
            self.notify("no profile to switch to — change the filter (a profile marked ✗ cannot load here)",
                        severity="warning")

    def action_move(self, step: int) -> None:
        listing = self.query_one("#profile-list", OptionList)
        if step > 0:
            listing.action_cursor_down()
        else:
            listing.action_cursor_up()

    @work(thread=True, exclusive=True, group="models")
    def _check_models(self) -> None:
        """Whether each profile's models are here, and its memory plan: a look through the model folders and GGUF
        headers, never on the UI thread."""
        absent = {name: absent_models(profile) for name, profile, _ in self.profiles if profile is not None}
        plans = {}
        for name, profile, _ in self.profiles:
            if profile is None:
                continue
            try:
                memory = plan(profile)
            except SpecchatError:  # a file that cannot be read: the model check above names it
                continue
            plans[name] = (memory.summary(), memory.warns)
        self.app.call_from_thread(self._models_checked, absent, plans)

    def _models_checked(self, absent: dict[str, str], plans: dict[str, tuple[str, bool]]) -> None:
        self.absent, self.plans = absent, plans
        self._show_profiles()

    def on_mount(self) -> None:
        listing = self.query_one("#profile-list", OptionList)
        ids = [listing.get_option_at_index(i).id for i in range(listing.option_count)]
        if f"profile:{self.current}" in ids:  # the profile in use is where the list opens, in view
            listing.highlighted = ids.index(f"profile:{self.current}")
        self._check_models()
        self._find_drafts()

    @work(thread=True, exclusive=True, group="drafts")
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
        self.drafts_listed = True

    def _drafts(self) -> list[Option]:
        if self.target is None:
            return [Option(Text("load a target first", style="dim"), disabled=True)]
        from ...profiles import models
        from ...profiles.drafts import draft_candidates
        from ...profiles.embedded import draft_path

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


class ConfirmScreen(_Modal):
    """A yes-or-no question before something that cannot be undone; dismissed with True for yes."""

    BINDINGS = CLOSE + [Binding("y", "answer(True)", "Yes", id="confirm_yes", tooltip="Yes, do it"),
                        Binding("n", "answer(False)", "No", id="confirm_no", tooltip="No, leave everything as it is")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm", classes="dialog"):
            yield Label(self.question)
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n, Esc)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class CodeBlockScreen(_Modal):
    """A reply's code blocks, one line each (its language and first line): the one chosen is dismissed with."""

    def __init__(self, blocks: list[str]) -> None:
        super().__init__()
        self.blocks = blocks

    def compose(self) -> ComposeResult:
        with Vertical(id="code-blocks", classes="dialog"):
            yield Label(f"This reply has {len(self.blocks)} code blocks — Enter copies the one highlighted")
            options = []
            for n, block in enumerate(self.blocks, start=1):
                lines = block.splitlines() or [""]
                first = next((line.strip() for line in lines if line.strip()), "(empty)")
                options.append(Option(Text.assemble((f"{n}  ", "bold"), first[:80],
                                                    (f"  {len(lines)} line{'s' * (len(lines) != 1)}", "dim")),
                                      id=str(n - 1)))
            yield OptionList(*options, id="code-list")

    @on(OptionList.OptionSelected)
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.blocks[int(event.option.id)])
