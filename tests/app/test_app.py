"""The real Textual app over the real bundled model pair, driven through Pilot."""

from __future__ import annotations

import dataclasses

import json
import shutil
import time

import pytest
from rich.text import Text
from textual import events
from textual.widgets._markdown import MarkdownFence

from specchat.app.chat_app import SpecchatApp, make_app
from specchat.app.screens.modals import ABScreen, HelpScreen, ProfileScreen
from specchat.app.chat.prompt import PromptInput
from specchat.app.chat.reply import ProvenanceLines, ReplyView, provenance_text
from specchat.engine.events import TokenEmitted, TokenKind
from specchat.chats.store import Store
from helpers import (FOLLOW_UP, HELD_LONG_STORY, arrive, ask, kept_messages, models_freed, noticed, notices, plain_text, ready, SIZE,
                     start_long_reply, wait_until)


pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


def sidebar_text(app: SpecchatApp) -> str:
    return app.chat_view.sidebar.plain


@pytest.mark.recorded
async def test_reply_streams_in_colour_with_live_telemetry(settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        view = await ask(pilot, "List three fruits.")
        kinds = {kind for _, kind in view.segments}
        assert {"accepted", "corrected"} <= kinds  # the Q2_K self-draft is right about half the time
        assert view.text == kept_messages(app.backend)[-1].content
        t = app.telemetry
        assert t.reply.drafted > 0 and 0 < t.reply.accepted < t.reply.drafted
        assert t.plain_tps and t.ttft is not None and t.n_ctx == 4096
        text = sidebar_text(app)
        assert "ACTIVE" in text and f"reply {t.reply.acceptance_rate:.0%}" in text and f"{t.reply.drafted}" in text
        assert "no GPU" in text and "target weights" in text and "/ 4096" in text
        # The body is coloured segment by segment.
        styles = {str(span.style) for span in view.body.content.spans}
        assert "green" in styles and "#ffaf00" in styles


async def test_escape_cancels_and_keeps_the_partial_reply(settings, make_engine):
    settings.max_tokens = 400
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await start_long_reply(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.busy is None)
        view = app.chat_view.chat_log.last_reply
        assert view.finish_reason == "cancelled" and 8 <= len(view.segments) < 400
        assert "cancelled" in plain_text(view.status_line)
        assert kept_messages(app.backend)[-1].finish_reason == "cancelled"
        stored = Store(settings.db_path).messages(app.session.id)
        assert stored[-1].finish_reason == "cancelled" and stored[-1].content == view.text
        follow = await ask(pilot, FOLLOW_UP)  # the chat goes on from the kept partial reply
        assert follow.finish_reason in ("stop", "length", "loop")
        assert follow.tokens == plain_reply(make_engine, app, FOLLOW_UP)


@pytest.mark.recorded
async def test_opening_and_closing_the_profile_picker_keeps_no_widgets_alive(settings):
    """Found measuring the storm's memory: each footer recompose left its keys alive through Textual's watcher list
    (Textualize/textual#6666), 28 widgets each time the picker opened and closed."""
    import gc

    def live_footer_keys() -> int:
        gc.collect()
        return sum(type(o).__name__ == "FooterKey" for o in gc.get_objects())

    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        counts = []
        for _ in range(6):  # the leak was 28 widgets each open and close: 4 cycles after the baseline show it
            await pilot.press("f2")
            await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen))
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, ProfileScreen))
            await pilot.pause(0.1)
            counts.append(live_footer_keys())
        assert counts[-1] <= counts[1], counts


@pytest.mark.recorded
async def test_a_profile_name_typed_in_full_is_the_one_enter_picks(settings):
    """F2, "tiny", Enter picked server-tiny (first in the list, alphabetically, and matching "tiny"): the name typed in
    full comes first, then names it begins, then the rest — each still matching every word typed."""
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        picked: list[object] = []
        screen = ProfileScreen(None, "server-tiny")
        app.push_screen(screen, picked.append)
        await wait_until(pilot, lambda: app.screen is screen)
        for key in "tiny":
            await pilot.press(key)
        listing = screen.query_one("#profile-list")
        shown = [listing.get_option_at_index(i).id for i in range(listing.option_count)]
        assert shown[0] == "profile:tiny" and "profile:server-tiny" in shown
        assert listing.highlighted_option.id == "profile:tiny"
        await pilot.press("enter")
        await wait_until(pilot, lambda: picked)
        assert picked == [("profile", "tiny")]
        screen = ProfileScreen(None, "tiny")
        app.push_screen(screen, picked.append)
        await wait_until(pilot, lambda: app.screen is screen)
        for key in "ngram":
            await pilot.press(key)
        shown = [listing.id for listing in (screen.query_one("#profile-list").get_option_at_index(i)
                                            for i in range(screen.query_one("#profile-list").option_count))]
        assert shown[:2] == ["profile:ngram", "profile:ngram-draft"]  # the exact name, then those it begins
        await pilot.press("escape")


@pytest.mark.recorded
async def test_the_profile_picker_closed_before_its_draft_search_ends(settings, monkeypatch):
    """Found by the storm (benchmarks/stress/storms.py, round 161): Enter in the picker before the draft search in its
    thread had finished, and the search's result reached a screen no longer there — the app died."""
    import threading

    searching = threading.Event()
    original = ProfileScreen._drafts

    def slow_drafts(screen):
        searching.set()
        time.sleep(1.0)  # many GGUFs in the model folders
        return original(screen)

    monkeypatch.setattr(ProfileScreen, "_drafts", slow_drafts)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await pilot.press("f2")
        await wait_until(pilot, searching.is_set)
        # What the storm met: the search ended while the closing screen's widgets were being removed.
        await app.screen.query_one("#draft-list").remove()
        await pilot.pause(1.5)
        assert app.is_running
        profiles = app.screen.query_one("#profile-list")
        profiles.highlighted = next(i for i in range(profiles.option_count)
                                    if profiles.get_option_at_index(i).id == "profile:ngram")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")
        assert not isinstance(app.screen, ProfileScreen)
        assert (await ask(pilot, "Name a colour.")).finish_reason


def plain_reply(make_engine, app: SpecchatApp, text: str) -> list[int]:
    """In-process plain decoding's reply to ``text`` after the app's chat so far (the last exchange left out when it
    is ``text``'s): what a greedy reply of the app must equal, token for token."""
    turns = app.session.turns
    if len(turns) >= 2 and turns[-2].text == text:
        turns = turns[:-2]
    from specchat.chats.session import engine_messages

    engine = make_engine("none", system_prompt=app.session.system_prompt)
    engine.apply(dataclasses.replace(engine.config, loop=app.backend.config.loop))  # (test_repetition.py checks the rule)
    engine.restore(engine_messages(turns, app.session.system_prompt, app.backend.target_id))
    return [e.token for e in engine.reply(text, max_tokens=app.settings.max_tokens) if isinstance(e, TokenEmitted)]


async def test_switch_profile_mid_chat(settings, tmp_path, monkeypatch, draft_path, make_engine):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shutil.copy(draft_path, shelf / "another-draft.gguf")
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(shelf))
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Name a colour.")
        target, cache = app.backend.engine.target, list(app.backend.engine.ctx.cached)

        # Parameter-only: the ngram preset keeps the same target and context size.
        await pilot.press("f2")
        assert isinstance(app.screen, ProfileScreen)
        profiles = app.screen.query_one("#profile-list")
        profiles.highlighted = next(i for i in range(profiles.option_count) if profiles.get_option_at_index(i).id == "profile:ngram")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")
        assert app.backend.engine.config.spec.method == "ngram" and app.backend.engine.target is target
        assert app.backend.engine.ctx.cached[: len(cache)] == cache  # the target kept its KV cache
        second = await ask(pilot, "And another one?")
        assert second.tokens == plain_reply(make_engine, app, "And another one?")

        # A draft model from the picker's draft list: only the draft loads.
        await pilot.press("f2")
        drafts = app.screen.query_one("#draft-list")
        await wait_until(pilot, lambda: any("another-draft" in str(drafts.get_option_at_index(i).id)
                                            for i in range(drafts.option_count)))  # the search runs in a thread
        index = next(i for i in range(drafts.option_count) if "another-draft" in str(drafts.get_option_at_index(i).id))
        drafts.focus()
        drafts.highlighted = index
        await pilot.press("enter")
        # The notice comes with the load's end (the backend is swapped on the worker a moment before): waited for,
        # so that a fast reload cannot be judged before it is said.
        await wait_until(pilot, lambda: app.busy is None and app.backend.engine.draft_model is not None
                         and any("draft reloaded" in n for n in notices(app)))
        assert app.backend.engine.draft_model.path.name == "another-draft.gguf" and app.backend.engine.target is target

        # A profile whose models are missing: one message, the previous profile stays.
        app.chat_view.switchboard.start_load("qwen3-8b-1.7b")
        await wait_until(pilot, lambda: app.busy is None)
        assert app.backend.engine.target is target and app.profile.name == "ngram"
        await noticed(pilot, "not found")
        assert (await ask(pilot, "Still working?")).tokens == plain_reply(make_engine, app, "Still working?")


@pytest.mark.recorded
async def test_restart_finds_the_chat_with_its_colours_and_exports(settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        await ready(pilot)
        first = await ask(pilot, "Name two planets.")
        segments, tokens = list(first.segments), list(first.tokens)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        views = list(app.query(ReplyView))
        assert len(views) == 1 and views[0].segments == segments
        await ask(pilot, "And one more?")
        assert kept_messages(app.backend)[-3].tokens == tokens  # the backend went on from the generated tokens
        await pilot.press("ctrl+e")
        await pilot.pause(0.2)
        exported = sorted(settings.exports.iterdir())
        assert [p.suffix for p in exported] == [".json", ".md"]
        data = json.loads(exported[0].read_text())
        reply = data["messages"][1]
        assert [tuple(s) for s in reply["segments"]] == segments and reply["telemetry"]["drafted"] > 0
        assert "Name two planets." in exported[1].read_text()


async def test_a_reopened_chat_keeps_its_profile_until_the_one_asked_for_is_loaded(settings):
    """The last chat reopens under the profile it was stored with; the one asked for becomes its profile once it is
    loaded, saved with the chat's next message. (Named after the chat reopened, the asked one hid that switch from the
    store: the row kept the old name.)"""
    store = Store(settings.db_path)
    chat = store.create("a chat under ngram", "ngram", None)
    store.close()
    async with make_app(dataclasses.replace(settings, autoload=False)).run_test(size=SIZE) as pilot:
        app = pilot.app
        await pilot.pause()
        assert app.session.id == chat and app.session.profile == "ngram"
        app.chat_view.switchboard.start_load("tiny")
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        assert app.session.profile == "tiny"
        await ask(pilot, "Hi!")
        assert Store(settings.db_path).get(chat).profile == "tiny"


@pytest.mark.recorded
async def test_ab_compare_reruns_without_speculation(settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "What is two plus two?")
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))
        result = app.screen.result
        assert result.identical is True  # greedy: speculation never changes the output
        assert result.plain["method"] == "none" and result.plain["decode_tps"]
        assert result.spec["method"] == "draft" and result.spec["drafted"] > 0
        assert app.backend.config.spec.method == "draft"  # the profile is back as it was
        assert "A/B plain run of 'What is two plus two?'" in app.telemetry.plain_source
        # Another chat, another prompt: the reference still names the prompt it was measured on ("A/B plain run of
        # this prompt" there vouched for a run that never was).
        await pilot.press("escape", "ctrl+n")
        await ask(pilot, "Name a colour.")
        assert "A/B plain run of 'What is two plus two?'" in app.telemetry.plain_source


@pytest.mark.recorded
async def test_help_lists_every_binding_and_keys_can_be_remapped(settings):
    settings.keymap.write_text('[keys]\nab_compare = "f9"\nhelp = "f10"\n')
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await pilot.press("f10")
        assert isinstance(app.screen, HelpScreen)
        help_text = plain_text(app.screen.query("Static").first())
        for binding_id in ("cancel", "profiles", "toggle_ghosts", "ab_compare", "send", "newline", "history_previous",
                           "toggle_speculation", "previous_profile", "draft_longer", "draft_shorter"):
            assert binding_id in help_text
        assert "f9" in help_text and "f10" in help_text
        await pilot.press("escape")
        await ask(pilot, "Say yes.")
        await pilot.press("f9")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))


async def test_command_palette_opens_the_profile_picker(settings):
    settings.autoload = False
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"Profiles")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen), timeout=10)


async def test_prompt_input_keys(settings):
    settings.autoload = False
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        prompt = app.query_one(PromptInput)
        await pilot.press("h", "i", "ctrl+j", "y", "o")
        assert prompt.text == "hi\nyo"
        await pilot.press("enter")  # no model loaded: the text stays, with a message
        assert prompt.text == "hi\nyo"
        prompt.clear()
        await pilot.press("enter")  # an empty prompt sends nothing
        assert not list(app.query(ReplyView)) and app.busy is None
        prompt.prompts = ["first", "second"]
        prompt._recall = 2
        await pilot.press("up")
        assert prompt.text == "second"
        await pilot.press("up")
        assert prompt.text == "first"
        await pilot.press("down")
        assert prompt.text == "second"
        prompt.post_message(events.Paste("x" * (settings.max_paste_chars + 1)))
        await pilot.pause(0.1)
        assert prompt.text == "second"
        await noticed(pilot, "paste of")


@pytest.mark.recorded
async def test_narrow_terminal_collapses_the_sidebar(settings):
    async with make_app(settings).run_test(size=(70, 30)) as pilot:
        app = await ready(pilot)
        assert not app.chat_view.sidebar.display
        view = await ask(pilot, "Hi!")
        assert view.segments
        await pilot.resize_terminal(140, 40)
        await pilot.pause(0.1)
        assert app.chat_view.sidebar.display


@pytest.mark.recorded
async def test_message_larger_than_the_context_is_refused_with_a_message(settings, tmp_path):
    profile = tmp_path / "small.toml"
    profile.write_text('[target]\nmodel = "embedded:target"\nn_ctx = 96\n[draft]\nmethod = "ngram"\n')
    settings.profile = str(profile)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        app.query_one(PromptInput).load_text("please summarise this " * 40)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and any("context holds 96" in n for n in notices(app)))
        assert not list(app.query(ReplyView))
        assert (await ask(pilot, "Hi")).segments  # the chat goes on


@pytest.mark.recorded
async def test_a_damaged_database_is_kept_aside_and_a_new_one_saves_the_chat(settings):
    damaged = b"this is not a sqlite database" * 100
    settings.db_path.write_bytes(damaged)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        await ready(pilot)
        (aside,) = settings.db_path.parent.glob("chats.sqlite3.damaged-*")
        assert aside.read_bytes() == damaged  # kept as it was, for recovery
        shown = await noticed(pilot, str(aside))
        assert any(str(settings.db_path) in n and str(aside) in n and ".recover" in n for n in shown), shown
        reply = await ask(pilot, "Hello?")
    assert Store(settings.db_path).messages(1)[1].content == reply.text  # the new database saves the chat


@pytest.mark.recorded
async def test_unwritable_database_location(settings, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data dir should be")
    settings.db_path = blocker / "chats.sqlite3"
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        assert app.session.store is None
        assert (await ask(pilot, "Hello?")).segments


def test_app_runs_in_a_real_terminal_session(settings):
    """`specchat chat` starts the app in a real terminal and Ctrl+Q quits it."""
    import subprocess
    import sys

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    session = f"specchat-test-{time.time_ns()}"
    command = f"XDG_CONFIG_HOME={settings.keymap.parent} {sys.executable} -m specchat chat; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "140", "-y", "40", command], check=True)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ("accepted draft" in screen() and "Quit" in screen()):
            time.sleep(0.3)
        assert "accepted draft" in screen() and "Quit" in screen()
        subprocess.run(["tmux", "send-keys", "-t", session, "C-q"], check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "accepted draft" in screen():
            time.sleep(0.3)
        after = screen()
        assert "accepted draft" not in after and "Traceback" not in after
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@pytest.mark.recorded
async def test_reply_lines_show_every_segment_once_in_its_colour(settings):
    """A streamed reply is wrapped a paragraph at a time and drawn line by line; the lines on screen are exactly the
    whole reply wrapped at once, in its colours, with ghosts off and on."""
    settings.max_tokens = 160
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        view = await ask(pilot, "Write a Python function that sorts a list, with a docstring and three comments.")
        assert view.ghosts, "the self-draft is rejected somewhere in a reply this long"
        assert "\n" in view.text, "a reply of several paragraphs"
        for ghosts in (False, True):
            whole = provenance_text(view.segments, view.ghosts, ghosts, clickable=True)  # finished: click to inspect
            assert styled_chars(view.body.content) == styled_chars(whole)
            expected = whole.wrap(app.console, view.body.size.width)
            assert view.body.size.height == len(expected)
            assert drawn(view.body) == [line.plain.rstrip() for line in expected]
            assert any(segment.style.color and segment.style.color.name == "green"
                       for y in range(len(expected)) for segment in view.body.render_line(y))
            await pilot.press("ctrl+g")  # ghosts on: the reply is drawn again, rejected drafts in place
            await pilot.pause()


def drawn(widget: ProvenanceLines) -> list[str]:
    """The lines the widget hands the compositor, as text."""
    return [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]


def styled_chars(text: Text) -> list[tuple[str, str]]:
    """Each character with its style; line ends left out (a paragraph ends where a line does)."""
    styles = [""] * len(text.plain)
    for span in text.spans:
        styles[span.start : span.end] = [str(span.style)] * (span.end - span.start)
    return [(char, style) for char, style in zip(text.plain, styles) if char != "\n"]


@pytest.mark.recorded
async def test_markdown_toggle_renders_the_finished_reply_with_its_code_highlighted(settings):
    settings.max_tokens = 120
    async with make_app(settings).run_test(size=SIZE) as pilot:
        await ready(pilot)
        view = await ask(pilot, "Write a Python function that returns the square of a number.")
        code = view.code_blocks()
        assert code, "the bundled model answers this with a fenced code block"
        await pilot.press("f3")
        await wait_until(pilot, lambda: view.rendered is not None and bool(view.rendered.query(MarkdownFence)))
        await pilot.pause(0.1)
        assert view.rendered.display and not view.body.display
        assert view.rendered.size.height > 0 and view.size.height >= view.rendered.size.height
        assert view.rendered.query(MarkdownFence).first().code.strip() == code[0].strip()
        await pilot.press("f3")  # back to the provenance colours
        await pilot.pause(0.1)
        assert view.body.display and not view.rendered.display and view.body.size.height > 0


@pytest.mark.recorded(pace=0.02)
async def test_stream_is_followed_only_while_the_reader_is_at_the_bottom(settings):
    settings.max_tokens = 300
    async with make_app(settings).run_test(size=(100, 24)) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Write a long story about a lighthouse keeper.")
        assert app.chat_view.chat_log.max_scroll_y > 0 and app.chat_view.chat_log.scroll_y == app.chat_view.chat_log.max_scroll_y  # followed to the end
        app.query_one(PromptInput).load_text("Tell me another long story, about a fisherman.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.chat_view.chat_log.last_reply.segments) >= 20)
        app.chat_view.chat_log.scroll_home(animate=False)  # the reader scrolls up to read the first story
        await pilot.pause(0.1)
        assert app.busy is not None  # still streaming while the reader is up there
        await wait_until(pilot, lambda: app.busy is None, timeout=120)
        await pilot.pause(0.3)
        assert app.chat_view.chat_log.scroll_y == 0  # never pulled back down
        app.chat_view.chat_log.scroll_end(animate=False)  # back at the bottom: following again
        second = app.chat_view.chat_log.last_reply
        app.query_one(PromptInput).load_text("And a third one.")
        await pilot.press("enter")  # (the reply may not have begun when the key returns)
        await wait_until(pilot, lambda: app.chat_view.chat_log.last_reply is not second and app.busy is None
                         and app.chat_view.chat_log.last_reply.finish_reason, timeout=120)
        await pilot.pause(0.3)
        assert app.chat_view.chat_log.scroll_y == app.chat_view.chat_log.max_scroll_y


async def test_thinking_is_shown_while_streaming_and_folded_when_done(settings):
    """Qwen3-style <think> replies (the bundled model never thinks, so the events are made here)."""
    settings.autoload = False
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        app.chat_view.chat_log.mount_turn(app.session.add_user("A fruit?"))
        record = app.session.add_reply("")
        app.chat_view.chat_log.mount_turn(record)
        await pilot.pause()
        view = app.chat_view.chat_log.last_reply
        pieces = ["<think>", "\n", "The user", " wants", " a", " fruit", ".", "\n", "</think>", "\n\n", "Apple", "."]
        tokens = [TokenEmitted(i, text, TokenKind.TARGET, i, 0.01 * i) for i, text in enumerate(pieces)]
        arrive(app, tokens[:6])
        await pilot.pause(0.1)
        assert view.think_box.display and not view.think_box.collapsed  # still thinking: shown, open
        assert "wants a" in view.think_text.content.plain
        arrive(app, tokens[6:])
        await pilot.pause(0.1)
        record.finish_reason = "stop"  # as a ReplyFinished event would set it
        view.refresh_view()
        await pilot.pause(0.1)
        assert view.think_box.collapsed
        answer = view.body.content.plain
        assert answer.strip() == "Apple." and "think" not in answer


# -- what the screen shows must be true (issue #10) ------------------------------------------------------------------


def ghosts_sit_between_accepted_and_correction(segments, ghosts) -> None:
    """A rejected draft tail was proposed after the step's last accepted token and replaced by the correction: its
    ghost sits right after that token and right before the correction (or at the end, when the correction ended the
    reply)."""
    assert ghosts
    for index in dict(ghosts):
        assert index + 1 == len(segments) or segments[index + 1][1] == "corrected", (index, segments[index:index + 2])


@pytest.mark.recorded
async def test_ghosts_sit_where_the_draft_was_rejected_in_the_view_and_in_a_reopened_chat(settings):
    settings.max_tokens = 120
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        view = await ask(pilot, "List five countries in Europe and their capitals.")
        ghosts_sit_between_accepted_and_correction(view.segments, view.ghosts)
        assert any(view.segments[i][1] == "accepted" for i in view.ghosts), "a step with accepted and rejected tokens"
        saved = list(view.segments), dict(view.ghosts)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        reopened = list(app.query(ReplyView))[-1]
        assert (reopened.segments, reopened.ghosts) == saved
        ghosts_sit_between_accepted_and_correction(reopened.segments, reopened.ghosts)


@pytest.mark.recorded(holds=HELD_LONG_STORY)
async def test_quitting_while_a_reply_streams_saves_the_partial_reply(settings):
    settings.max_tokens = 400
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await start_long_reply(pilot)
        chat = app.session.id
        await pilot.press("ctrl+q")
    # The engine's step in progress ended and the models were freed before the app returned: a model freed by the
    # interpreter's shutdown under a step still decoding on a daemon thread is a segfault (exit 139, seen once).
    assert not app.replies.working and models_freed(app.backend)
    stored = Store(settings.db_path).messages(chat)
    assert [m.role for m in stored] == ["user", "assistant"]
    # Every token the engine produced is saved, those of the step that ended after Ctrl+Q too (they stayed in memory
    # only when quitting marked the reply saved before the engine had finished its step).
    kept = kept_messages(app.backend)[-1]
    assert (stored[-1].content, stored[-1].tokens) == (kept.content, kept.tokens)
    assert stored[-1].finish_reason == "interrupted" and len(stored[-1].segments) >= 8
    assert stored[-1].content == "".join(text for text, _ in stored[-1].segments)
    async with make_app(settings).run_test(size=SIZE) as pilot:  # reopened: the partial reply, marked
        app = await ready(pilot)
        view = list(app.query(ReplyView))[-1]
        assert view.text == stored[-1].content and "interrupted" in plain_text(view.status_line)
        await ask(pilot, "Go on.")
        assert kept_messages(app.backend)[-3].content == stored[-1].content


@pytest.mark.recorded
async def test_a_refused_message_leaves_no_trace_and_regenerate_replaces_the_right_reply(settings, tmp_path):
    profile = tmp_path / "small.toml"
    profile.write_text('[target]\nmodel = "embedded:target"\nn_ctx = 160\n[draft]\nmethod = "ngram"\n')
    settings.profile = str(profile)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Hi")
        big = "please summarise this " * 40
        app.query_one(PromptInput).load_text(big)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and any("context holds" in n for n in notices(app)))
        assert app.query_one(PromptInput).text == big  # given back to edit, not lost
        store = Store(settings.db_path)
        assert [m.role for m in store.messages(app.session.id)] == ["user", "assistant"]
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.busy is None and len(list(app.query(ReplyView))) == 1)
        roles = [m.role for m in store.messages(app.session.id)]
        assert roles == ["user", "assistant"] == [m.role for m in kept_messages(app.backend) if m.role != "system"]
        assert store.messages(app.session.id)[0].content == "Hi"


@pytest.mark.recorded
async def test_restored_token_ids_follow_the_target_model_not_the_profile_name(settings, tmp_path, target_path):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        await ready(pilot)
        first = await ask(pilot, "Name two planets.")
        tokens = list(first.tokens)
    settings.profile = "ngram"  # another profile, the same target: the generated ids are reused
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "And a third?")
        assert kept_messages(app.backend)[-3].tokens == tokens
    other = tmp_path / "other-target.gguf"
    from gguf_fixtures import write_variant

    write_variant(target_path, other, set_keys={"general.name": "another model"})
    user_tiny = tmp_path / "config" / "specchat" / "profiles" / "tiny.toml"
    user_tiny.parent.mkdir(parents=True)
    user_tiny.write_text(f'[target]\nmodel = "{other}"\n[draft]\nmethod = "none"\n')
    settings.profile = "tiny"  # the same profile name, another target: the ids are not fed to it
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "And a fourth?")
        assert app.backend.config.target.path == other
        first_reply = next(m for m in kept_messages(app.backend) if m.role == "assistant")
        assert first_reply.tokens is None  # re-tokenized from its text for this other model
        assert first_reply.content == "".join(text for text, _ in first.segments)


@pytest.mark.recorded
async def test_ab_compare_works_without_a_database_and_from_the_same_cache_state(settings):
    settings.db_path = None
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Say hello to the team.")
        await ask(pilot, "And to the night shift?")
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))
        spec, plain = app.screen.result.spec, app.screen.result.plain
        assert spec["method"] == "draft" and spec["drafted"] > 0
        # Both arms decoded the same prompt tokens: the plain run did not find the prompt already cached.
        assert plain["prefill_tokens"] == spec["prefill_tokens"] > 5
        assert app.screen.result.identical is True and plain["generated"] == spec["generated"]


@pytest.mark.recorded
async def test_sampled_ab_differences_are_not_flagged_as_a_failure(settings, tmp_path):
    profile = tmp_path / "sampled.toml"
    profile.write_text('[target]\nmodel = "embedded:target"\n[draft]\nmethod = "draft"\nmodel = "embedded:draft"\n'
                       '[sampling]\ntemperature = 0.9\nseed = 5\n')
    settings.profile = str(profile)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Tell me a story about a cat.")
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))
        shown = plain_text(app.screen.query_one("#ab-identical"))
        assert "sampled" in shown and "NO" not in shown


@pytest.mark.recorded
async def test_chat_counters_start_again_with_each_chat(settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "List three fruits.")
        assert app.telemetry.chat.drafted > 0
        await pilot.press("ctrl+n")
        await pilot.pause(0.2)
        assert app.telemetry.chat.drafted == 0 and app.telemetry.reply.drafted == 0
        assert "chat –" in sidebar_text(app)


async def test_a_crash_on_the_engine_thread_is_one_line_and_the_app_goes_on(settings, monkeypatch):
    from specchat.engine.core import Engine

    original = Engine.reply
    failed = []

    def reply_once_broken(self, *args, **kwargs):
        if not failed:
            failed.append(True)
            raise RuntimeError("simulated llama.cpp failure")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "reply", reply_once_broken)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        app.query_one(PromptInput).load_text("Hello?")
        await pilot.press("enter")  # (the reply may not have begun when the key returns: wait for what it says)
        await wait_until(pilot, lambda: any("simulated llama.cpp failure" in m for m in notices(app)), timeout=20)
        assert app.busy is None
        assert all("\n" not in m for m in notices(app) if "simulated llama.cpp failure" in m)
        assert (await ask(pilot, "Hello again?")).finish_reason in ("stop", "length", "loop")


async def test_every_engine_call_runs_on_the_engine_thread(settings, monkeypatch):
    import threading

    from specchat.engine.core import Engine

    threads: list[tuple[str, str]] = []
    for name in ("__init__", "apply", "restore", "reply", "new_chat", "plain_reference", "clear_cache"):
        original = getattr(Engine, name)

        def recorded(self, *args, _original=original, _name=name, **kwargs):
            threads.append((_name, threading.current_thread().name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Engine, name, recorded)
    settings.max_tokens = 8  # which thread each call runs on, not what the replies say
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Name a colour.")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.busy is None and app.chat_view.chat_log.last_reply.finish_reason)
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))
        await pilot.press("escape")
        app.chat_view.system_prompt_set("Be brief.")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: app.busy is None)
        app.chat_view.switchboard.start_load("ngram")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")
    assert {name for name, _ in threads} >= {"__init__", "reply", "restore", "apply"}
    assert {thread for _, thread in threads} == {"specchat-engine"}, threads


async def test_the_plain_reference_is_measured_through_the_engines_own_loop(settings, tmp_path, target_path):
    from gguf_fixtures import write_variant

    other = write_variant(target_path, tmp_path / "other.gguf", set_keys={"general.name": "another model"})
    profile = tmp_path / "other.toml"
    profile.write_text(f'[target]\nmodel = "{other}"\n[draft]\nmethod = "ngram"\n')
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        t = app.telemetry
        assert t.plain_tps and "plain run" in t.plain_source
        await ask(pilot, "Write a short story about a robot.")
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: isinstance(app.screen, ABScreen))
        await pilot.press("escape")
        assert "A/B" in t.plain_source
        app.chat_view.switchboard.start_load("ngram")  # the same target: the reference stays
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")
        assert "A/B" in t.plain_source
        app.chat_view.switchboard.start_load(str(profile))  # another target: the old reference means nothing for it
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "other")
        assert "plain run" in t.plain_source and t.plain_tps


# -- llama.cpp's server as the backend (issue #13) -----------------------------------------------------------------


async def test_the_chat_through_a_managed_llama_server(settings, llama_server, monkeypatch):
    """server-tiny: colours from the server's counters, the sidebar names the server, a server killed mid-reply
    leaves the partial reply (marked) and the next message starts it again, and quitting stops it."""
    import os
    import signal

    from specchat.backends.server_build import ENV

    monkeypatch.setenv(ENV, str(llama_server))
    settings.profile = "server-tiny"
    settings.max_tokens = 400  # the long reply is still streaming when the server is killed (48 raced the kill)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        view = await ask(pilot, "List five countries in Europe and their capitals.")
        assert {"accepted", "corrected"} <= {kind for _, kind in view.segments}
        pid = app.backend.pid
        assert f"llama-server pid {pid}" in sidebar_text(app)
        await pilot.press("ctrl+g")  # ghosts: the server only counts rejected drafts, and the app says so
        await noticed(pilot, "never which")
        await start_long_reply(pilot)
        os.kill(pid, signal.SIGKILL)
        await wait_until(pilot, lambda: app.busy is None)
        assert app.chat_view.chat_log.last_reply.finish_reason == "error" and len(app.chat_view.chat_log.last_reply.segments) >= 8
        await noticed(pilot, "stopped in the middle of the reply")
        again = await ask(pilot, "Hello again.")
        assert again.finish_reason in ("stop", "length", "loop") and app.backend.pid != pid
        running = app.backend.pid
    for _ in range(100):  # the engine thread closes the backend as the app ends
        try:
            os.kill(running, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the managed llama-server outlived the app")


class FirstStart:
    """A first start that loads until ``done()``: the embedded draft is not derived yet and another thread holds its
    derivation (a newcomer's first load takes seconds, here as long as the test needs)."""

    def __init__(self, user_cache, draft_path) -> None:
        from specchat.profiles import embedded

        for derived in user_cache.glob(draft_path.name + "*"):
            derived.unlink()
        self.lock = embedded._deriving
        self.lock.acquire()

    def done(self) -> None:
        if self.lock.locked():
            self.lock.release()


@pytest.mark.recorded
async def test_a_message_sent_while_the_model_loads_waits_and_is_sent_once_it_is_loaded(settings, user_cache,
                                                                                          draft_path):
    """It was refused ("the model is still loading — try again"); a newcomer presses Enter at once."""
    from specchat.chats.replies import Activity

    loading = FirstStart(user_cache, draft_path)
    app = make_app(settings)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(PromptInput)
        try:
            assert app.busy is Activity.LOADING
            prompt.load_text("Qué es un faro? ¿Y 灯塔?")
            await pilot.press("enter")
            await pilot.pause()
            assert app.busy is Activity.LOADING and prompt.waiting and prompt.read_only
            assert "Esc withdraws" in str(prompt.border_title) and not app.session.turns
        finally:
            loading.done()
        await wait_until(pilot, lambda: app.busy is None and app.chat_view.chat_log.last_reply is not None
                         and app.chat_view.chat_log.last_reply.finish_reason)
        assert app.session.turns[0].text == "Qué es un faro? ¿Y 灯塔?"
        assert not prompt.waiting and not prompt.read_only and prompt.text == ""
        assert Store(settings.db_path).messages(app.session.id)[0].content == "Qué es un faro? ¿Y 灯塔?"


@pytest.mark.recorded
async def test_esc_withdraws_a_message_waiting_for_the_model_and_keeps_it_in_the_prompt(settings, user_cache,
                                                                                       draft_path):
    from specchat.chats.replies import Activity

    loading = FirstStart(user_cache, draft_path)
    app = make_app(settings)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(PromptInput)
        try:
            prompt.load_text("Say hello.")
            await pilot.press("enter")
            await pilot.pause()
            assert prompt.waiting and app.busy is Activity.LOADING
            await pilot.press("escape")
            await pilot.pause()
            assert not prompt.waiting and not prompt.read_only and prompt.text == "Say hello."
        finally:
            loading.done()
        await ready(pilot)
        await pilot.pause()
        assert not app.session.turns and prompt.text == "Say hello."  # withdrawn: not sent when the load ended


@pytest.mark.recorded
async def test_the_profile_loaded_is_the_one_the_next_start_opens(settings):
    """F2 → tiny, Ctrl+Q, `specchat`: it was back to the default."""
    from specchat.app.settings import starting_profile
    from specchat.profiles import DEFAULT_PROFILE

    assert starting_profile(None, settings.last_profile) == (DEFAULT_PROFILE, "")  # nothing remembered yet
    app = make_app(settings)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
    assert settings.last_profile.read_text().strip() == "tiny"
    assert starting_profile(None, settings.last_profile) == ("tiny", "")
    assert starting_profile("ngram", settings.last_profile) == ("ngram", "")  # --profile still wins
    settings.last_profile.write_text("gone-since\n")
    profile, note = starting_profile(None, settings.last_profile)
    assert profile == DEFAULT_PROFILE and "the profile used last (gone-since) cannot be opened now" in note


@pytest.mark.recorded
async def test_the_sidebar_shows_a_reply_that_drafted_nothing_as_plain_decoding(settings):
    """A busy start's reference (3 tok/s) made a plain reply read "25.06× of 3 tok/s" (issue #47)."""
    from specchat.engine.reference import PlainReference

    settings.profile, settings.max_tokens = "baseline", 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        app.telemetry.reference = PlainReference.measured(3.0, 40, None, False, "a plain run beside a compile")
        await ask(pilot, "Write a short story about a robot.")
        await pilot.pause()
        shown = " ".join(app.chat_view.sidebar.plain.split())
        assert "vs plain 1.00× — nothing drafted" in shown
        assert "undrafted steps (the reference read 3 tok/s there)" in shown
