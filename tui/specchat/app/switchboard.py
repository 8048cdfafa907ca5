"""The chat screen's main row — the chat column and the sidebar — and the profile in use: loading one, the quick
toggles (speculation, the previous profile, a favourite, the sidebar's advice, the draft length), the picker, A/B,
and what each switch's result shows.

The chat controller makes each choice and switches on the worker thread; this starts the job and shows what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message

from ..chats.ab import ABResult
from ..chats.choice import Choice
from ..chats.controller import ChatController
from ..chats.replies import Activity
from ..chats.switcher import Switched
from ..engine import phases
from ..errors import SpecchatError
from ..profiles.favourites import favourite
from .chat.column import ChatColumn
from .jobs import Jobs
from .keymap import BoundKeys
from .priority import settle_garbage
from .screens.modals import ABScreen, ProfileScreen
from .settings import Settings, remember_profile
from .sidebar.live import LiveSidebar


class Switchboard(Horizontal):
    class ProfileLoaded(Message):
        def __init__(self, switched: Switched) -> None:
            super().__init__()
            self.switched = switched

    class LoadPhaseBegun(Message):
        """A load began a phase (``engine/phases.py``): loading a model, deriving the demo draft, timing verify
        batches, measuring plain decoding… — what it is doing now, and how far where that is known."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class LoadFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ABFinished(Message):
        def __init__(self, result: ABResult | None, error: str = "") -> None:
            super().__init__()
            self.result, self.error = result, error  # no result: cancelled, or the error says why

    def __init__(self, controller: ChatController, jobs: Jobs, keys: BoundKeys, settings: Settings) -> None:
        super().__init__(id="main")
        self.controller, self.jobs, self.settings = controller, jobs, settings
        self.sidebar = LiveSidebar(controller, jobs, keys, settings.memory)
        self.column = ChatColumn(controller, jobs, keys, settings.max_paste_chars, self.sidebar.reply_drawn)

    def compose(self) -> ComposeResult:
        yield self.column
        yield self.sidebar

    # -- switching -----------------------------------------------------------------------------------------------------

    def start_load(self, name: str, draft: Path | None = None) -> None:
        self.start_switch(Choice(name, draft), f"loading {Path(name).stem}…")

    def start_switch(self, choice: Choice, status: str) -> None:
        if self.jobs.busy is not None:  # one job at a time: a message sent between two loads would meet the wrong one
            why = "a profile is still loading" if self.jobs.busy is Activity.LOADING else \
                "wait for the reply to finish (or press Esc)"
            self.notify(f"{why} before switching profiles", severity="warning")
            return
        switcher = self.controller.switcher

        def job() -> None:
            try:
                with phases.told(lambda line: self.post_message(self.LoadPhaseBegun(line))):
                    switched = switcher.switch(choice)
            except SpecchatError as exc:
                self.post_message(self.LoadFailed(str(exc)))
                return
            self.post_message(self.ProfileLoaded(switched))

        self.jobs.run(Activity.LOADING, status, job)

    def _toggle(self, make: Callable[[], Choice], status: str) -> None:
        """A quick toggle: a new choice from the one in use, switched with the least reload."""
        try:
            choice = make()
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.start_switch(choice, status)

    def action_toggle_speculation(self) -> None:
        self._toggle(self.controller.switcher.speculation_toggled, "switching speculation…")

    def action_previous_profile(self) -> None:
        self._toggle(self.controller.switcher.previous_profile, "back to the previous profile…")

    def action_favourite(self, number: int) -> None:
        try:
            name = favourite(self.settings.settings_file, number)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning", timeout=10)
            return
        self.start_load(name)

    def action_suggested_profile(self) -> None:
        tip = self.controller.advice()
        if tip is None:
            self.notify("nothing to suggest: F7 follows the sidebar's advice, given when a reply is measured slower"
                        " than plain decoding", severity="information")
        elif tip.suggestion is None:
            self.action_toggle_speculation()
        else:
            self.start_load(tip.suggestion)

    def action_draft_longer(self) -> None:
        self._toggle(lambda: self.controller.switcher.draft_cap(1), "a longer draft…")

    def action_draft_shorter(self) -> None:
        self._toggle(lambda: self.controller.switcher.draft_cap(-1), "a shorter draft…")

    def on_switchboard_profile_loaded(self, message: ProfileLoaded) -> None:
        switched = message.switched
        before = self.controller.choice
        notes = self.controller.switcher.profile_switched(switched)
        remember_profile(self.settings.last_profile, switched.choice.profile)  # the next start opens it
        self.sidebar.sample_memory()
        settle_garbage()
        if switched.action != "loaded":  # the first load needs no announcement; switches do
            self.notify(switched.announcement(before))
        for note in notes:
            self.notify(note, severity="warning", timeout=15)
        self.jobs.done()  # the sidebar redrawn, the memory just sampled with it
        self.column.send_waiting()

    def on_switchboard_load_phase_begun(self, message: LoadPhaseBegun) -> None:
        if self.jobs.busy is Activity.LOADING:  # the load's status line says what takes this long
            self.jobs.say(message.line)

    def on_switchboard_load_failed(self, message: LoadFailed) -> None:
        self.controller.switcher.switch_failed()
        self.notify(message.error, severity="error", timeout=20)
        self.sidebar.sample_memory()
        self.jobs.set(None, "load failed — previous profile kept" if self.controller.backend else "no model loaded")
        self.column.send_waiting()

    def action_profiles(self) -> None:
        backend, profile = self.controller.backend, self.controller.profile
        current = backend.config.target.path if backend else None
        self.app.push_screen(ProfileScreen(current, profile.name if profile else None), self._profile_chosen)

    def _profile_chosen(self, choice: tuple[str, object] | None) -> None:
        if choice is None:
            return
        kind, value = choice
        profile = self.controller.profile
        if kind == "profile":
            self.start_load(str(value))
        elif kind == "draft" and profile is not None:
            self.start_load(str(profile.path), Path(str(value)))

    # -- A/B -----------------------------------------------------------------------------------------------------------

    def action_ab_compare(self) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        try:
            comparison = self.controller.compare()
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        switcher = self.controller.switcher

        def job() -> None:
            try:
                result = comparison.run()
            except SpecchatError as exc:  # e.g. a remote server, whose speculation cannot be switched off from here
                switcher.refresh_facts()
                self.post_message(self.ABFinished(None, str(exc)))
                return
            switcher.refresh_facts()  # a managed server was restarted twice: another pid, another port
            self.post_message(self.ABFinished(result))

        self.jobs.run(Activity.COMPARING, "A/B: rerunning without speculation… (Esc stops it)", job)

    def on_switchboard_abfinished(self, message: ABFinished) -> None:
        if message.error:
            self.notify(message.error, severity="warning", timeout=15)
        elif message.result is None:
            self.notify("A/B cancelled")
        else:
            self.controller.compared(message.result)
            self.app.push_screen(ABScreen(message.result))
        self.sidebar.sample_memory()
        self.jobs.done()
