"""What a terminal can throw at the app, in a real one (tmux) and through Pilot: resize storms while a reply streams,
a 1 MB paste, bytes that are not UTF-8, a message of control characters, replies whose characters span tokens."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time

import cassettes
import pytest
from helpers import ask, endless_profile, ready, SIZE, start_long_reply, wait_until
from specchat.app.chat_app import make_app
from specchat.app.chat.prompt import PromptInput
from specchat.app.chat.reply import ReplyView
from specchat.chats.store import Store

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


CONTROLS = b"\x01\x02\x07\x1b[31m\x08\x7f\x1b]0;title\x07"


class Pane:
    def __init__(self, command: str, size: tuple[int, int] = (120, 40)) -> None:
        self.session = f"specchat-abuse-{time.time_ns()}"
        # Without COLUMNS and LINES: a tmux server started from pytest has them (80 and 24) in its environment, and
        # Textual would believe them over the pane's real size.
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", str(size[0]), "-y", str(size[1]),
                        f"env -u COLUMNS -u LINES {command}; echo APP-EXIT=$?; sleep 60"], check=True)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def wait_for(self, condition, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.screen()):
            assert time.monotonic() < deadline, self.screen()
            time.sleep(0.2)

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", self.session, *(["-l"] if literal else []), *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


def wait_for_replies(db, count: int, timeout: float = 120) -> None:
    """Until the app has saved ``count`` finished replies."""
    deadline = time.monotonic() + timeout
    while True:
        if db.exists():
            with sqlite3.connect(db) as conn:
                (done,) = conn.execute("SELECT COUNT(*) FROM messages WHERE role = 'assistant' AND finish_reason IS NOT"
                                       " NULL").fetchone()
            if done >= count:
                return
        assert time.monotonic() < deadline, f"fewer than {count} replies saved"
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_app_in_a_real_terminal_survives_abuse_and_stores_clean_text(settings, tmp_path):
    data = tmp_path / "data"
    db = data / "specchat" / "chats.sqlite3"
    # Loops not stopped: the third reply runs to the 1,024-token cap and is still streaming when the quit key comes
    # (with loops stopped it ended by itself, "loop", before it on a fast minute).
    command = (f"env HOME={tmp_path / 'home'} XDG_CONFIG_HOME={tmp_path / 'config'} XDG_DATA_HOME={data}"
               f" {sys.executable} -m specchat chat --profile {endless_profile()}")
    pane = Pane(command)
    try:
        pane.wait_for(lambda s: "ACTIVE" in s)
        # Bytes that are not UTF-8 between typed text (a Latin-1 terminal, line noise): they become U+FFFD.
        pane.keys("caf", literal=True)
        pane.keys("-H", "e9", "ff", "fe")
        pane.keys(" au lait", literal=True)
        pane.keys("Enter")
        wait_for_replies(db, 1)
        # A 1 MB bracketed paste: refused with a message, the app goes on.
        big = tmp_path / "big.txt"
        big.write_text("lorem ipsum " * 90_000)
        pane.tmux("load-buffer", "-b", "big", str(big))
        pane.tmux("paste-buffer", "-p", "-b", "big", "-t", pane.session)
        pane.wait_for(lambda s: "paste of" in s, 60)
        # A pasted message of control characters only, an escape sequence among them.
        controls = tmp_path / "controls.txt"
        controls.write_bytes(CONTROLS)
        pane.tmux("load-buffer", "-b", "controls", str(controls))
        pane.tmux("paste-buffer", "-p", "-b", "controls", "-t", pane.session)
        pane.keys("Enter")
        wait_for_replies(db, 2)
        # A long reply with a storm of resizes while it streams.
        pane.keys("Write a very long story about a dragon and a knight.", literal=True)
        pane.keys("Enter")
        time.sleep(1.0)
        rng = random.Random(7)
        for _ in range(100):
            pane.tmux("resize-window", "-t", pane.session, "-x", str(rng.randint(40, 200)), "-y", str(rng.randint(10, 60)))
            time.sleep(0.02)
        pane.tmux("resize-window", "-t", pane.session, "-x", "120", "-y", "40")
        time.sleep(1.0)
        pane.keys("C-q")
        pane.wait_for(lambda s: "APP-EXIT=" in s, 60)
        assert "APP-EXIT=0" in pane.screen() and "Traceback" not in pane.screen()
    finally:
        pane.close()
    store = Store(db)
    (chat,) = store.conversations()
    messages = store.messages(chat.id)
    store.close()
    users = [m.content for m in messages if m.role == "user"]
    assert users[0] == "caf\ufffd\ufffd\ufffd au lait"
    assert users[1] and "\x1b" not in users[1]  # stored as the prompt showed it: no escape that could drive a terminal
    assert users[-1] == "Write a very long story about a dragon and a knight."
    replies = [m for m in messages if m.role == "assistant"]
    assert len(replies) == 3 and replies[-1].finish_reason == "interrupted"
    for m in replies:
        assert m.content == "".join(text for text, _ in m.segments)


@pytest.mark.recorded(pace=0.04)
async def test_a_resize_storm_while_streaming_keeps_record_view_and_store_equal(settings):
    settings.max_tokens = 160
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await start_long_reply(pilot)
        rng = random.Random(3)
        storm = 0
        while app.busy is not None and storm < 60:  # every resize lands while the reply streams
            await pilot.resize_terminal(rng.randint(40, 200), rng.randint(10, 60))
            await pilot.pause(0.01)
            storm += 1
        # played at the cassette's pace (the real engine, recording or with cassettes off, ends the reply sooner)
        assert storm >= 10 or cassettes.MODE != "play", f"the reply ended after {storm} resizes"
        await pilot.resize_terminal(*SIZE)
        await wait_until(pilot, lambda: app.busy is None)
        record = app.session.last_reply
        view = list(app.query(ReplyView))[-1]
        assert view.segments == record.segments and view.text == record.text
        stored = Store(settings.db_path).messages(app.session.id)[-1]
        assert [tuple(s) for s in stored.segments] == record.segments and stored.content == record.text


async def test_replies_whose_characters_span_tokens_are_stored_whole(settings):
    """Byte-level tokens split a multi-byte character; the reply's text must join them, never show U+FFFD."""
    settings.max_tokens = 64
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        app.query_one(PromptInput)
        reply = await ask(pilot, "Répète exactement : « Ça coûte 5 € — très cher ! » 日本語 😀")
        tokens = app.backend.engine.messages[-1].tokens
        pieces = [app.backend.engine.target.piece(t) for t in tokens]
        assert any(not _is_whole_utf8(p) for p in pieces), "the reply has no split character to check"
        joined = b"".join(pieces).decode("utf-8", "replace")
        assert reply.text == joined.rstrip() or reply.text == joined
        assert "\ufffd" not in reply.text


def _is_whole_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("command", [["ask", "--json", "--max-tokens", "4", "-"], ["repl", "--max-tokens", "4"],
                                     ["ask", "--json", "--max-tokens", "4", "caf\udce9 au lait"]])
def test_bytes_that_are_not_utf8_from_a_pipe_or_an_argument(command, tmp_path, user_cache):
    """A Latin-1 file piped in, or a Latin-1 argument (Python keeps its byte as a lone surrogate): U+FFFD, an answer."""
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data")}
    result = subprocess.run([sys.executable, "-m", "specchat", *[os.fsencode(arg) for arg in command]],
                            input=b"caf\xe9 au lait\n", capture_output=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert b"Traceback" not in result.stderr
    if command[0] == "ask":
        summary = json.loads(result.stdout.decode().splitlines()[-1])
        assert summary["type"] == "summary" and summary["generated"] > 0


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_an_edit_typed_in_a_real_terminal_is_stored_as_typed(tmp_path, user_cache):
    """Seen once: Alt+Up ×2, Alt+E, End, Backspace, " and their moons?", Enter stored "…solar system. and their
    moons", as if a key raced the prompt being filled. Typed key by key nothing races: Alt+E fills the prompt before
    End and Backspace reach it. Keys that follow Alt+E within 100 ms (tmux's send-keys, a fast roll) do go wrong, in
    Textual's parser: see the next test."""
    data = tmp_path / "data"
    db = data / "specchat" / "chats.sqlite3"
    command = (f"env HOME={tmp_path / 'home'} XDG_CONFIG_HOME={tmp_path / 'config'} XDG_DATA_HOME={data}"
               f" {sys.executable} -m specchat chat --profile tiny")
    pane = Pane(command, size=(150, 45))
    try:
        pane.wait_for(lambda s: "ACTIVE" in s)
        pane.keys("List the planets of the solar system.", literal=True)
        pane.keys("Enter")
        wait_for_replies(db, 1)
        for key in ("M-Up", "M-Up", "M-e", "End", "BSpace", *" and their moons?", "Enter"):
            pane.keys(key, literal=len(key) == 1)
            time.sleep(0.15)  # a person's pace: past Textual's 100 ms wait to tell Alt+E from Esc, then E
        pane.wait_for(lambda s: "their moons?" in s and "esc Cancel" in s)
        time.sleep(1.0)  # the edited message sent, its reply answered and saved
        pane.keys("C-q")
        pane.wait_for(lambda s: "APP-EXIT=" in s, 60)
    finally:
        pane.close()
    with sqlite3.connect(db) as conn:
        users = [text for (text,) in conn.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id")]
    assert users == ["List the planets of the solar system and their moons?"]  # sent in its place (versions kept)


@pytest.mark.xfail(strict=True, reason="Textual 8.2.8's XTermParser reissues Alt+E (ESC e) as '^' and 'e' when the"
                                       " next escape sequence arrives in the same read; fixed upstream, this fails:"
                                       " drop the mark")
def test_alt_e_followed_in_the_same_read_by_end_is_still_alt_e():
    """What tmux sends for `send-keys M-Up M-Up M-e End BSpace` in one write (the newcomer's edit in one burst): Alt+E
    is reported only once no other byte follows ESC e within ESCDELAY (100 ms); another ESC sooner reissues it as
    "^e", so the prompt is never filled and End, Backspace and the typed text edit "^e"."""
    from textual._xterm_parser import XTermParser  # the parser itself: no public API parses bytes

    keys = [event.key for event in XTermParser().feed("\x1b[1;3A\x1b[1;3A\x1be\x1b[4~\x7f") if hasattr(event, "key")]
    assert keys == ["alt+up", "alt+up", "alt+e", "end", "backspace"]


@pytest.mark.recorded
async def test_an_empty_prompt_squeezed_to_nothing_still_draws(settings):
    """Narrowing a wide terminal lays the chat out once beside the sidebar before the sidebar collapses: the prompt is
    then a few columns wide, and Textual's TextArea cannot wrap its placeholder into no width (a crash, found by the
    resize storm)."""
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        assert app.query_one(PromptInput).text == ""
        for width in (40, 41, 42, 43):
            await pilot.resize_terminal(width, 20)
            await pilot.pause()
            await pilot.resize_terminal(*SIZE)
            await pilot.pause()
        assert app.is_running and app.query_one(PromptInput).content_size.width > 0
