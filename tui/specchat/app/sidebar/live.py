"""The chat screen's sidebar: what it shows of the profile in use, the worker's job, the live telemetry and the
memory last sampled — all read from the chat controller, never kept apart from it.
"""

from __future__ import annotations

from collections.abc import Callable

from ...chats.controller import ChatController
from ...profiles import Profile
from ...telemetry.memory import GpuMemory, GpuUnavailable
from ..jobs import Jobs
from ..keymap import BoundKeys
from .sidebar import MemorySnapshot, ProfileInfo, Sidebar

MemoryReader = Callable[[int | None], tuple[GpuMemory | GpuUnavailable, int | None]]


class LiveSidebar(Sidebar):
    def __init__(self, controller: ChatController, jobs: Jobs, keys: BoundKeys, memory: MemoryReader) -> None:
        super().__init__()
        self.controller, self.jobs, self.keys, self.memory = controller, jobs, keys, memory
        self.named: Profile | None = None  # the profile asked for, shown until its models are loaded
        self.memory_snapshot: MemorySnapshot | None = None

    def redraw(self) -> None:
        facts = self.controller.facts
        named = self.controller.profile or self.named
        name = named.name if named else self.controller.session.profile or "(no profile)"
        method = self.controller.switcher.method if facts or not named else named.method
        tip = self.controller.advice()
        said = ""
        if tip is not None:
            key = self.keys.of("suggested_profile")
            said = f"{tip.why} — {key}: {tip.suggestion or 'speculation off'} ({tip.does})"
        profile = ProfileInfo(name, method, self.jobs.status, facts.where if facts else "", said)
        self.show(self.controller.telemetry, profile, self.memory_snapshot)

    def sample_memory(self) -> None:
        """Memory as it is now: after a load, a reply, an A/B (of the model server where one holds the models)."""
        facts = self.controller.facts
        pid = facts.pid if facts else None
        self.memory_snapshot = MemorySnapshot(*self.memory(pid), dict(facts.model_bytes) if facts else {},
                                              "this process" if pid is None else f"server pid {pid}",
                                              bool(facts and facts.cpu_only))

    def reply_drawn(self, ended: bool) -> None:
        """The reply on screen moved on; over, what it took of memory is read too."""
        if ended:
            self.sample_memory()
        self.redraw()
