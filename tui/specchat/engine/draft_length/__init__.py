"""How many tokens a step drafts, behind one small interface: fixed by the profile (``FixedLength``), or chosen step
by step by ``n_max = "auto"`` (``auto_length.Adaptive``). A new draft-length policy is one class with this protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..drafters import Draft
from ..loop import StepOutcome


class DraftLength(Protocol):
    @property
    def in_use(self) -> int:
        """The draft length chosen last (the sidebar's "draft length"), at most the profile's cap."""
        ...

    @property
    def active(self) -> bool:
        """Whether it drafts at all now; ``reason`` says why not."""
        ...

    @property
    def reason(self) -> str:
        ...

    def plan(self, limit: int) -> tuple[int, Callable[[Draft], int] | None]:
        """The most draft tokens the next step may verify (at most ``limit``), and, for drafts whose length is chosen
        after seeing them (copies), how far to verify one (from its match length, and its own ``survival``)."""
        ...

    def copy_length(self, copy: Draft) -> int:
        """The combined methods: how far to verify ``copy`` (from its match length, and its own ``survival``)."""
        ...

    def model_length(self) -> int:
        """The combined method: how far the draft model drafts where nothing is copied."""
        ...

    def begin_reply(self) -> None:
        ...

    def observe(self, outcome: StepOutcome, depth: int, turned_down: Draft | None = None) -> None:
        """Learn from a step verified at context depth ``depth`` (``turned_down``: the combined method's copy that was
        not verified)."""
        ...

    def keep(self, quiet: bool = True) -> None:
        """Keep what was learned for the next process (at the end of each reply); the costs it timed only when
        ``quiet`` (no other process kept the cores busy meanwhile)."""
        ...


class FixedLength:
    """``n_max`` tokens at every step (fewer where the step has less room)."""

    active = True
    reason = ""

    def __init__(self, n_max: int) -> None:
        self.cap = n_max

    @property
    def in_use(self) -> int:
        return self.cap

    def plan(self, limit: int) -> tuple[int, Callable[[Draft], int] | None]:
        return min(self.cap, limit), None

    def copy_length(self, copy: Draft) -> int:
        return self.cap

    def model_length(self) -> int:
        return self.cap

    def begin_reply(self) -> None:
        """Nothing to learn."""

    def observe(self, outcome: StepOutcome, depth: int, turned_down: Draft | None = None) -> None:
        """Nothing to learn."""

    def keep(self, quiet: bool = True) -> None:
        """Nothing to keep."""
