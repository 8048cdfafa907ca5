"""Snapshots of every main screen state, made deterministic with a recorded reply (which carries its own timings).

The real-model path is covered by test_app.py; here the app loads no model and replays events recorded from a real
run of the bundled pair (tests/fixtures/recorded_reply.json). Update after a deliberate UI change with
``pytest tests/app/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from recorded import load
from specchat.app.chat_app import SpecchatApp, make_app
from specchat.app.engine_thread import Activity
from specchat.app.settings import Settings
from specchat.app.widgets.sidebar import LABEL_WIDTH, MemorySnapshot, ProfileInfo, Sidebar
from specchat.engine.events import ReplyFinished, ThreadsAdjusted
from specchat.engine.reference import PlainReference
from specchat.telemetry.live import LiveTelemetry
from specchat.telemetry.memory import GpuUnavailable

WIDE = (130, 40)
NARROW = (70, 30)


pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


def snapshot_app(tmp_path: Path) -> SpecchatApp:
    # A fixed keymap path: the help screen shows it. tiny: the profile the recorded reply was made under.
    settings = Settings(profile="tiny", db_path=None, keymap=Path("~/.config/specchat/keymap.toml"),
                        exports=tmp_path / "exports", autoload=False,
                        resume=False,
                        memory=lambda _pid: (GpuUnavailable("no NVIDIA driver (NVML library not found)"), 512_000_000))
    return make_app(settings)


def replay(*, finished: bool):
    prompt, events = load()
    if not finished:
        events = [e for e in events if not isinstance(e, ReplyFinished)][: len(events) // 2]

    async def run_before(pilot) -> None:
        app: SpecchatApp = pilot.app
        app.mount_turn(app.session.add_user(prompt))
        app.mount_turn(app.session.add_reply(""))
        await pilot.pause()
        app.busy = None if finished else Activity.GENERATING
        app.post_message(SpecchatApp.EventsArrived(events))
        await pilot.pause()
        app.refresh_sidebar()
        await pilot.pause()

    return run_before


def test_empty(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE)


def test_streaming(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=replay(finished=False))


def test_finished_with_ghosts(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=replay(finished=True), press=["ctrl+g"])


def test_finished_as_markdown(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=replay(finished=True), press=["f3"])


async def picker_settled(pilot) -> None:
    """F2, then until the picker has looked for every profile's models and for drafts (threads of its own)."""
    from specchat.app.screens import ProfileScreen

    await pilot.press("f2")
    for _ in range(600):
        screen = pilot.app.screen
        if isinstance(screen, ProfileScreen) and screen.absent is not None and screen.drafts_listed:
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("the profile picker did not finish looking for models within 30 s")
    await pilot.pause()


def test_profile_picker(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=picker_settled)


def test_help(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, press=["f1"])


def test_narrow_terminal(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=NARROW, run_before=replay(finished=True))


def versions_and_selection():
    """The recorded reply, then the same question answered again (a second version), the first reply selected."""
    prompt, events = load()

    async def run_before(pilot) -> None:
        app: SpecchatApp = pilot.app
        session = app.session
        session.add_user(prompt)
        session.add_reply("").add(events)
        session.branch(1)
        session.add_reply("").add(events)
        app.show_turns()
        await pilot.pause()
        await pilot.press("alt+up", "alt+up")
        app.refresh_sidebar()
        await pilot.pause()

    return run_before


def test_versions_of_a_reply(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=versions_and_selection())


async def searched(pilot) -> None:
    from specchat.chats.session import ChatSession
    from specchat.chats.store import Store
    from helpers import finished_reply

    app: SpecchatApp = pilot.app
    store = Store(pilot.app.settings.exports.parent / "search.sqlite3")
    for title, messages in (("Decodificación", ("¿Cómo funciona la decodificación especulativa?",
                                                "Un modelo pequeño propone el código y el grande lo verifica.")),
                            ("Gatos", ("写一首关于猫的诗", "猫是一种动物。")),
                            ("Código", ("Escribe código de ejemplo.", "```python\nprint('código')\n```"))):
        session = ChatSession(store, "tiny", None, lambda line, error: None)
        session.add_user(messages[0])
        finished_reply(session, messages[1])
    app.session.store = store
    await pilot.press("ctrl+l")
    await pilot.pause()
    app.screen.query_one("#chat-search").value = "codigo"
    await pilot.pause()


def test_search_in_the_chat_list(snap_compare, tmp_path):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=WIDE, run_before=searched)


class SidebarAlone(App):
    """The sidebar filling a terminal, slower than plain on a busy machine: its two warnings wrap."""

    CSS = "Sidebar { width: 100%; border-left: solid $panel-lighten-2; padding: 0 1; overflow-x: hidden; }"
    ADVICE = ("the draft (88 MB) costs about as much to run as the target (105 MB) saves — F7: ngram (drafts from the"
              " chat itself, no second model)")

    def compose(self) -> ComposeResult:
        yield Sidebar()

    def on_mount(self) -> None:
        _, events = load()
        telemetry = LiveTelemetry(reference=PlainReference.measured(60.0, 0, 0.0, False, "measured before the chat"))
        telemetry.consume([*events, ThreadsAdjusted(1, 2, 1.4, 2)])
        memory = MemorySnapshot(GpuUnavailable("no NVIDIA driver (NVML library not found)"), 512_000_000, {})
        self.query_one(Sidebar).show(telemetry, ProfileInfo("tiny", "draft", advice=self.ADVICE), memory)


def hanging(lines: list[str], first: str) -> list[str]:
    """The line that starts with ``first`` (after the grid's label column) and the lines it wrapped into."""
    start = next(i for i, line in enumerate(lines) if line[LABEL_WIDTH:].startswith(first))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * LABEL_WIDTH)), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("columns", [40, 60])
def test_sidebar_warnings_wrap_under_their_first_line(snap_compare, columns):
    """The advice and the busy-machine warning start under the value column; their next lines started at the edge."""
    assert snap_compare(SidebarAlone(), terminal_size=(columns, 40))


@pytest.mark.parametrize("columns", [40, 60])
async def test_sidebar_warnings_hang_as_text(columns):
    async with SidebarAlone().run_test(size=(columns, 40)) as pilot:
        await pilot.pause()
        lines = pilot.app.query_one(Sidebar).plain.split("\n")
    advice, busy = hanging(lines, "the draft (88 MB)"), hanging(lines, "⚠ busy machine")
    assert len(advice) > 1 and len(busy) > 1  # both did wrap at this width
    for wrapped, text in ((advice, SidebarAlone.ADVICE), (busy, "⚠ busy machine: others use 1.4 of 2 cores")):
        assert " ".join(" ".join(line.split()) for line in wrapped).startswith(text)  # nothing lost in the wrap
