"""The specchat Textual app: presentation over the chat flow the REPL uses too (``chats``: the controller, the
switcher, the replies). Data flows one way: backend → events → records and telemetry → widgets. Every call into the
backend runs on ``chats.replies.Replies``' worker thread; a reply comes up a frame at a time to the chat column.

The app owns what lives as long as the process — the settings, the chat controller, the worker, the job in flight,
the keys — and the chat view (``chat_view.py``) is made of regions that own the rest: the switchboard (the
profile in use), the chat column (a reply's life), the chat log (the turns and the selection), the prompt (an edit in
progress), the sidebar (what it shows).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, ComposeResult, SystemCommand
from textual.message import Message
from textual.screen import Screen

from ..backends import Backend
from ..chats.controller import ChatController
from ..chats.replies import Activity, Replies
from ..chats.session import ChatSession
from ..errors import SpecchatError
from ..profiles import Profile, load_profile
from ..telemetry.live import LiveTelemetry
from .chat_database import ChatDatabase
from .chat_view import ChatView
from .jobs import Jobs
from .keymap import APP_BINDINGS, BoundKeys, load_keymap
from .priority import lower_ui_priority
from .screens.modals import HelpScreen
from .settings import Settings
from .terminal_input import tolerate_invalid_utf8

EXIT_WAIT_S = 60.0  # every long operation stops when cancelled; this only bounds a backend that hangs outright


class SpecchatApp(App):
    CSS_PATH = "specchat.tcss"
    BINDINGS = APP_BINDINGS
    TITLE = "specchat"

    class EngineFailed(Message):
        """An engine job raised; the worker thread goes on with the next one."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.controller = ChatController(None, self.settings.profile, self._store_problem,
                                         max_tokens=self.settings.max_tokens)
        self.replies = Replies(self.controller, lambda error: self.post_message(self.EngineFailed(error)))
        self.jobs = Jobs(self.replies, lambda: self.chat_view.sidebar.redraw())
        self.keys = BoundKeys(self)
        self.chat_view = ChatView(self.controller, self.jobs, self.keys, self.settings)

    def compose(self) -> ComposeResult:
        yield self.chat_view

    # -- what tests and the CLI read -----------------------------------------------------------------------------------

    @property
    def session(self) -> ChatSession:
        return self.controller.session

    @property
    def backend(self) -> Backend | None:
        return self.controller.backend

    @property
    def profile(self) -> Profile | None:
        return self.controller.profile

    @property
    def telemetry(self) -> LiveTelemetry:
        return self.controller.telemetry

    @property
    def busy(self) -> Activity | None:
        """What the worker thread is doing for the UI (None: nothing)."""
        return self.jobs.busy

    @property
    def engine_running(self) -> bool:
        """Whether the worker is still busy (a backend that hung): then nothing may free its models."""
        return self.replies.working

    # -- the process -----------------------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.replies.start()
        lower_ui_priority()
        try:
            self.keys.remapped = load_keymap(self.settings.keymap)
            self.set_keymap(self.keys.remapped)
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        # The chat to start on (its view is mounted by now, composed before the app mounts): the profile asked for,
        # named in the sidebar until it loads — and the last chat reopened, which keeps the profile it was stored with.
        database = ChatDatabase(self, self.settings, self.controller, self.replies, self.chat_view.chat_log.show_turns)
        database.open()
        try:
            named = load_profile(self.settings.profile)  # shown until its models are loaded
            self.chat_view.sidebar.named = named
            self.session.profile = named.name
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=15)
        database.resume()
        if self.settings.start_note:
            self.notify(self.settings.start_note, severity="warning", timeout=15)
        if self.settings.autoload:
            self.chat_view.switchboard.start_load(self.settings.profile)
        self.chat_view.sidebar.redraw()

    def _store_problem(self, line: str, error: bool) -> None:
        self.notify(line, severity="error" if error else "information", timeout=20 if error else 8)

    def on_specchat_app_engine_failed(self, message: EngineFailed) -> None:
        self.chat_view.column.streaming(False)
        self.notify(f"the engine stopped: {message.error}", severity="error", timeout=20)
        self.jobs.done()

    async def action_on(self, region: str, action: str) -> None:
        """A key's action, carried out by the region of the chat view that owns it (``keymap.py`` names it)."""
        await self.run_action(action, self.chat_view.region_named(region))

    async def action_quit(self) -> None:
        self.exit()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.keymap, self.keys))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        switchboard, column = self.chat_view.switchboard, self.chat_view.column
        yield SystemCommand("Profiles", "Switch profile or draft model (F2)", switchboard.action_profiles)
        yield SystemCommand("Speculation on/off", "Off for the next messages, or back on (Ctrl+T)",
                            switchboard.action_toggle_speculation)
        yield SystemCommand("Previous profile", "Back to the profile before the last switch (F4)",
                            switchboard.action_previous_profile)
        yield SystemCommand("Draft longer", "One draft token more per step (F6)", switchboard.action_draft_longer)
        yield SystemCommand("Draft shorter", "One draft token less per step (F5)", switchboard.action_draft_shorter)
        yield SystemCommand("A/B compare", "Rerun the last prompt without speculation", switchboard.action_ab_compare)
        yield SystemCommand("Toggle ghosts", "Show rejected draft tokens", self.chat_view.chat_log.action_toggle_ghosts)
        yield SystemCommand("Inspect tokens", "What decided each token of a reply (F8)", column.action_inspect)
        yield SystemCommand("Replay a reply", "Step through a reply's drafts and verifications (F9)",
                            column.action_replay)
        yield SystemCommand("Export chat", "Export this chat to Markdown and JSON", self.chat_view.action_export)

    def on_unmount(self) -> None:
        """Quitting, mid-reply or not: what the reply produced is kept, marked interrupted; the backend closes on the
        worker, after what it was doing (``Replies.close``)."""
        self.replies.close(EXIT_WAIT_S)


def make_app(settings: Settings | None = None) -> SpecchatApp:
    """The app factory used by ``specchat`` and by the tests."""
    tolerate_invalid_utf8()
    return SpecchatApp(settings)
