"""The app's profile switches: loading one, the quick toggles (speculation, the previous profile, a favourite, the
sidebar's advice, the draft length), the picker, and what a switch's result shows.

A mixin of ``SpecchatApp``; the chat controller makes each choice and switches on the worker thread, this module
only starts the job and shows what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..chats.choice import Choice
from ..errors import SpecchatError
from ..engine import phases
from ..profiles.favourites import favourite
from .settings import remember_profile
from ..chats.replies import Activity
from .priority import settle_garbage
from .host import MixinBase
from .screens import ProfileScreen

if TYPE_CHECKING:
    from .chat_app import SpecchatApp


class SwitchingActions(MixinBase):
    """Mixed into ``SpecchatApp`` (its ``controller``, ``busy``, ``run_job``, ``notify`` and sidebar)."""

    def start_load(self, name: str, draft: Path | None = None) -> None:
        self.start_switch(Choice(name, draft), f"loading {Path(name).stem}…")

    def start_switch(self, choice: Choice, status: str) -> None:
        if self.busy is not None:  # one job at a time: a message sent between two loads would meet the wrong backend
            why = "a profile is still loading" if self.busy is Activity.LOADING else \
                "wait for the reply to finish (or press Esc)"
            self.notify(f"{why} before switching profiles", severity="warning")
            return
        controller = self.controller

        def job() -> None:
            try:
                with phases.told(lambda line: self.post_message(self.LoadPhaseBegun(line))):
                    switched = controller.switcher.switch(choice)
            except SpecchatError as exc:
                self.post_message(self.LoadFailed(str(exc)))
                return
            self.post_message(self.ProfileLoaded(switched))

        self.run_job(Activity.LOADING, status, job)

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

    def on_specchat_app_profile_loaded(self, message: SpecchatApp.ProfileLoaded) -> None:
        switched = message.switched
        before = self.controller.choice
        notes = self.controller.switcher.profile_switched(switched)
        remember_profile(self.settings.last_profile, switched.choice.profile)  # the next start opens it
        self.sample_memory()
        settle_garbage()
        if switched.action != "loaded":  # the first load needs no announcement; switches do
            self.notify(switched.announcement(before))
        for note in notes:
            self.notify(note, severity="warning", timeout=15)
        self.job_done()
        self.send_waiting()

    def on_specchat_app_load_phase_begun(self, message: SpecchatApp.LoadPhaseBegun) -> None:
        if self.busy is Activity.LOADING:  # the load's status line says what takes this long
            self.set_job(Activity.LOADING, message.line)

    def on_specchat_app_load_failed(self, message: SpecchatApp.LoadFailed) -> None:
        self.controller.switcher.switch_failed()
        self.notify(message.error, severity="error", timeout=20)
        self.sample_memory()
        self.set_job(None, "load failed — previous profile kept" if self.backend else "no model loaded")
        self.send_waiting()

    def action_profiles(self) -> None:
        current = self.backend.config.target.path if self.backend else None
        self.push_screen(ProfileScreen(current, self.profile.name if self.profile else None), self._profile_chosen)

    def _profile_chosen(self, choice: tuple[str, object] | None) -> None:
        if choice is None:
            return
        kind, value = choice
        if kind == "profile":
            self.start_load(str(value))
        elif kind == "draft" and self.profile is not None:
            self.start_load(str(self.profile.path), Path(str(value)))
