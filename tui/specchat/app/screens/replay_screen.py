"""A stored reply replayed step by step: the text as far as the step, the step's tokens marked, its draft and verdict
in words, and the sidebar's figures as they were then — all from the reply's trace (``chats/replay``)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...chats.records import ReplyRecord
from ...chats.replay import Replay, step_lines
from ..keymap import REPLAY_BINDINGS
from ..chat.reply import SELECTED, ProvenanceLines
from ..sidebar.sidebar import ProfileInfo, Sidebar

NOT_KEPT = "not kept with a stored reply (the live sidebar measured it)"


class ReplayScreen(Screen):
    BINDINGS = REPLAY_BINDINGS

    def __init__(self, record: ReplyRecord, profile: str, title: str) -> None:
        super().__init__()
        self.record, self.profile, self.title_line = record, profile, title
        self.replay = Replay.of(record.trace)
        self.index = 0
        self._ends: list[int] = []  # after each step, how many of the reply's tokens are shown
        shown = 0
        for step in self.replay.steps:
            shown += len(step.tokens)
            self._ends.append(shown)

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield Static(id="replay-title")
                with VerticalScroll(id="chat"):
                    yield ProvenanceLines(classes="reply-body", id="replay-text")
                yield Static(id="replay-step")
            yield Sidebar()
        yield Footer()

    def on_mount(self) -> None:
        self.show_step(0)

    def show_step(self, index: int) -> None:
        self.index = index
        steps = self.replay.steps
        start = self._ends[index - 1] if index else 0
        end = self._ends[index]
        self.query_one("#replay-title", Static).update(Text(
            f"{self.title_line} · step {steps[index].number} of {steps[-1].number} · ← → step, Home End, Esc back",
            style="dim"))
        text = self.query_one("#replay-text", ProvenanceLines)
        text.show(self.record.segments, self.replay.ghosts_until(index), True, 0, end,
                  marks=dict.fromkeys(range(start, end), SELECTED))
        self.query_one("#replay-step", Static).update(Text("\n".join(step_lines(self.replay, index))))
        telemetry = self.replay.telemetry_at(index)
        telemetry.unmeasured = NOT_KEPT  # "vs plain" and the chat's counters are the live sidebar's, not the reply's
        method = telemetry.speculation.method if telemetry.speculation else "–"
        self.query_one(Sidebar).show(telemetry, ProfileInfo(self.profile, method, "replay"), None)

    def action_step(self, delta: int) -> None:
        self.show_step(max(0, min(self.index + delta, len(self.replay.steps) - 1)))

    def action_edge(self, end: int) -> None:
        self.show_step(0 if end == 0 else len(self.replay.steps) - 1)

    def action_close(self) -> None:
        self.dismiss()
