"""Snapshots of every main screen state, made deterministic with a recorded reply (which carries its own timings).

The real-model path is covered by test_app.py; here the app loads no model and replays events recorded from a real
run of the bundled pair (tests/fixtures/recorded_reply.json). Update after a deliberate UI change with
``pytest tests/app/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.color import Color as RichColor, ColorSystem
from textual.app import App, ComposeResult
from textual.color import Color
from textual.widgets import Static

from helpers import arrive
from recorded import load
from specchat.app.chat_app import SpecchatApp, make_app
from specchat.chats.replies import Activity
from specchat.app.settings import Settings
from specchat.app.sidebar.sidebar import LABEL_WIDTH, MemorySnapshot, ProfileInfo, Sidebar
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
        app.chat_view.chat_log.mount_turn(app.session.add_user(prompt))
        app.chat_view.chat_log.mount_turn(app.session.add_reply(""))
        await pilot.pause()
        app.jobs.busy = None if finished else Activity.GENERATING
        arrive(app, events)
        await pilot.pause()
        app.chat_view.sidebar.redraw()
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
    from specchat.app.screens.modals import ProfileScreen

    await pilot.press("f2")
    for _ in range(600):
        screen = pilot.app.screen
        if isinstance(screen, ProfileScreen) and screen.absent is not None and screen.drafts_listed:
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("the profile picker did not finish looking for models within 30 s")
    await pilot.pause()


@pytest.fixture
def server_found(llama_server, monkeypatch) -> None:
    """The picker shows each profile's memory plan, and a llama-server profile's depends on the server found (its
    build: CPU-only here): the tests' own, whatever this machine's user cache holds or the test order built."""
    from specchat.backends.server_build import ENV

    monkeypatch.setenv(ENV, str(llama_server))


@pytest.mark.usefixtures("server_found")
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
        app.chat_view.chat_log.show_turns()
        await pilot.pause()
        await pilot.press("alt+up", "alt+up")
        app.chat_view.sidebar.redraw()
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


async def long_chat(pilot, replies: int = 12) -> None:
    """The recorded question and reply, ``replies`` times: a chat longer than the screen, shown from its end."""
    prompt, events = load()
    app: SpecchatApp = pilot.app
    for _ in range(replies):
        app.session.add_user(prompt)
        app.session.add_reply("").add(events)
    app.chat_view.chat_log.show_turns()
    for _ in range(3):  # mounted, laid out, scrolled to its end
        await pilot.pause()


async def test_a_resize_keeps_the_end_of_the_chat_in_view(tmp_path):
    app = snapshot_app(tmp_path)
    async with app.run_test(size=(150, 45)) as pilot:
        await long_chat(pilot)
        chat = app.chat_view.chat_log
        assert 0 < chat.max_scroll_y == chat.scroll_y
        for size in ((70, 30), (150, 45), (100, 20)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            assert chat.scroll_y == chat.max_scroll_y, size  # the newest lines are where the reader left them


async def test_a_resize_after_a_streamed_reply_keeps_its_end_in_view(tmp_path):
    app = snapshot_app(tmp_path)
    async with app.run_test(size=(150, 45)) as pilot:
        await long_chat(pilot)
        await replay(finished=True)(pilot)
        for _ in range(3):
            await pilot.pause()
        chat = app.chat_view.chat_log
        assert 0 < chat.max_scroll_y == chat.scroll_y
        for size in ((70, 30), (150, 45), (100, 20)):
            await pilot.resize_terminal(*size)
            for _ in range(3):
                await pilot.pause()
            assert chat.scroll_y == chat.max_scroll_y, size


async def test_a_chat_that_fitted_shows_its_end_when_a_resize_makes_it_overflow(tmp_path):
    """A new chat's one reply fits at 130×40; at 50×12 it overflows: its newest lines are shown, not its top."""
    app = snapshot_app(tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await replay(finished=True)(pilot)
        chat = app.chat_view.chat_log
        assert chat.max_scroll_y == 0
        await pilot.resize_terminal(50, 12)
        for _ in range(3):
            await pilot.pause()
        assert 0 < chat.max_scroll_y == chat.scroll_y


def eight_bit(colour: Color) -> tuple[int, int, int]:
    """``colour`` as a 256-colour terminal (tmux's default) shows it."""
    return tuple(RichColor.from_rgb(colour.r, colour.g, colour.b).downgrade(ColorSystem.EIGHT_BIT).get_truecolor())


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2's contrast ratio (3 is its least for the parts of a control)."""
    def luminance(rgb: tuple[int, int, int]) -> float:
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


async def test_scrollbars_read_as_scrollbars_in_a_256_colour_terminal(tmp_path):
    """In tmux the default thumb (dark teal on black) vanished but for its sub-cell ends, two columns wide: ▆▆ and
    ▄▄ beside the sidebar's lines and inside the chat, moving as it scrolled."""
    app = snapshot_app(tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await long_chat(pilot)
        for widget in (app.chat_view.chat_log, app.chat_view.sidebar):
            styles = widget.styles
            assert styles.scrollbar_size_vertical == 1
            track = app.screen.styles.background + styles.scrollbar_background
            thumb = track + styles.scrollbar_color
            assert contrast(eight_bit(thumb), eight_bit(track)) >= 3, widget


async def test_the_legend_and_the_key_bar_fit_70_columns(tmp_path):
    """At 70 columns the legend was cut to "abc rejected" and the key bar to "esc Canc▏", F1 off the screen."""
    app = snapshot_app(tmp_path)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.pause()
        shown = str(app.query_one("#legend", Static).render())
        assert all(word in shown for word in ("accepted", "correction", "bonus", "target", "rejected"))
        assert len(shown) <= app.query_one("#legend").content_size.width
        help_key = next(key for key in app.query("FooterKey") if key.description == "Help")
        palettes = app.query("FooterKey.-command-palette")  # docked right, over whatever runs under it
        assert help_key.region.right <= min([NARROW[0], *(palette.region.x for palette in palettes)])


SIZES = {"150": (150, 45), "70": (70, 30)}  # as a newcomer tried them in tmux


@pytest.mark.parametrize("size", SIZES)
def test_help_scrolled_to_its_end(snap_compare, tmp_path, size):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], press=["f1", "end"])


async def test_help_scrolls_to_its_last_key_and_says_how_it_closes(tmp_path):
    """F1's help ended at alt+e at 150×45: PageDown, Down and End changed nothing, Esc was never said."""
    from specchat.app.screens.modals import HelpScreen

    app = snapshot_app(tmp_path)
    async with app.run_test(size=SIZES["150"]) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        help_view = app.screen.query_one("#help")
        assert isinstance(app.screen, HelpScreen) and help_view.max_scroll_y > 0
        assert "Esc" in str(help_view.border_title)
        await pilot.press("end")
        await pilot.pause()
        assert help_view.scroll_y == help_view.max_scroll_y
        await pilot.press("pageup")
        await pilot.pause()
        assert help_view.scroll_y < help_view.max_scroll_y
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def picker_over_tiny(pilot) -> None:
    """The picker with tiny in use (as once its models loaded; the snapshots load none)."""
    from specchat.profiles import load_profile

    pilot.app.controller.switcher.profile = load_profile("tiny")
    await picker_settled(pilot)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.usefixtures("server_found")
def test_profile_picker_marks_the_profile_in_use(snap_compare, tmp_path, size):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=picker_over_tiny)


async def test_profile_picker_marks_the_current_profile_and_ranks_names_first(tmp_path):
    """Typing "tin" listed profiles whose descriptions mention drafting above tiny, and nothing marked tiny in use."""
    app = snapshot_app(tmp_path)
    async with app.run_test(size=SIZES["70"]) as pilot:
        await picker_over_tiny(pilot)
        listing = app.screen.query_one("#profile-list")
        assert listing.highlighted_option.id == "profile:tiny"  # opened where the profile in use is, in view
        await pilot.press("t", "i", "n")
        await pilot.pause()
        options = app.screen.query_one("#profile-list").options
        shown = [str(option.prompt) for option in options]
        assert shown[0].startswith("● tiny"), shown[:3]
        assert not any(line.startswith("●") for line in shown[1:])
        in_name = ["tin" in line.removeprefix("● ").split()[0] for line in shown]
        assert in_name == sorted(in_name, reverse=True) and not all(in_name)  # names first, then descriptions


@pytest.mark.parametrize("size", SIZES)
def test_a_message_selected(snap_compare, tmp_path, size):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=versions_and_selection())


async def test_the_selected_message_is_marked_by_more_than_colour(tmp_path):
    app = snapshot_app(tmp_path)
    async with app.run_test(size=SIZES["70"]) as pilot:
        await versions_and_selection()(pilot)
        selected = [view for view in app.chat_view.chat_log.children if view.border_title]
        assert len(selected) == 1 and str(selected[0].border_title).startswith("▶ selected")
        assert "edit" in str(selected[0].border_title)


@pytest.mark.parametrize("size", SIZES)
def test_first_start_says_what_to_type(snap_compare, tmp_path, size):
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size])


async def test_an_empty_chat_says_what_to_type_and_where_the_keys_are(tmp_path):
    from specchat.app.chat.prompt import PromptInput

    app = snapshot_app(tmp_path)
    async with app.run_test(size=SIZES["70"]) as pilot:
        await pilot.pause()
        placeholder = str(app.query_one(PromptInput).placeholder)
        assert "Enter sends" in placeholder and "F1" in placeholder


def test_a_reply_that_drafted_nothing_has_no_heading_over_an_empty_sparkline():
    from specchat.app.sidebar.sidebar import _acceptance

    nothing_drafted = LiveTelemetry()
    shown = _acceptance(nothing_drafted).plain.split("\n")
    assert shown[-1] == "per drafting step –"
    _, events = load()
    drafted = LiveTelemetry()
    drafted.consume(events)
    shown = _acceptance(drafted).plain.split("\n")
    assert shown[-2].startswith("acceptance by step") and set(shown[-1]) <= set(" ▁▂▃▄▅▆▇█") and shown[-1].strip()
