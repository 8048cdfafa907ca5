"""``specchat repl``: prompt-toolkit's pipe input driving the real REPL on the bundled model pair, and the command in a
real terminal (tmux)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import HELD_LONG_STORY, CTRL_D, endless_profile, run_repl, signal_once_streaming
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from specchat import paths
from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.app.chat.reply import ReplyView
from specchat.chats.store import Store
from specchat.chats.store_rows import StoredMessage
from specchat.colours import PROVENANCE
from specchat.engine.events import TokenKind
from specchat.repl.commands import PromptCompleter
from specchat.repl.shell import ReplSettings

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")

# Any SGR sequence that sets a colour: 30–37/90–97 and 40–47/100–107, or 38;…/48;… (256 colours and true colour).
COLOUR_SGR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")


@pytest.fixture
def repl_settings(tmp_path, user_cache) -> ReplSettings:
    return ReplSettings("tiny", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history", max_tokens=32)


def saved_chats(db: Path) -> list[list[StoredMessage]]:
    """Every chat in the store, oldest first, read back with the store's own query."""
    store = Store(db)
    try:
        return [store.messages(chat.id) for chat in reversed(store.conversations())]
    finally:
        store.close()


def saved_replies(db: Path) -> list[StoredMessage]:
    (chat,) = saved_chats(db)
    return [m for m in chat if m.role == "assistant"]


def sgr(colour: str) -> str:
    """The escape prompt-toolkit writes for a Rich colour of the palette, as a regular expression."""
    if colour.startswith("#"):
        r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
        return rf"38;2;{r};{g};{b}m"
    return r"3[0-7]m|9[0-7]m"


@pytest.mark.recorded
def test_two_turns_with_a_profile_switch_between_them_saved_with_their_colours(repl_settings):
    keys = "Name two planets.\r/profile ngram\rAnd one more?\r" + CTRL_D
    repl, terminal, _ = run_repl(repl_settings, keys)
    assert "profile ngram: nothing reloaded" in terminal  # tiny → ngram drops the drafter: nothing reloads
    (chat,) = saved_chats(repl_settings.db_path)
    assert [m.content for m in chat if m.role == "user"] == ["Name two planets.", "And one more?"]
    replies = [m for m in chat if m.role == "assistant"]
    assert len(replies) == 2 and all(r.finish_reason in ("stop", "length", "loop") for r in replies)
    assert replies[0].telemetry["method"] == "draft" and replies[1].telemetry["method"] == "ngram"
    assert replies[0].telemetry["accepted"] > 0
    # Each reply streamed into the scrollback in its provenance colours, then a one-line summary stayed.
    accepted_colour = PROVENANCE[TokenKind.ACCEPTED].style
    assert re.search(sgr(accepted_colour), terminal)
    for reply in replies:
        for piece, _kind in reply.segments:
            assert piece.strip() == "" or piece in terminal
    assert terminal.count("[draft n_max") == 1 and terminal.count("[ngram") == 1


def test_every_llama_cpp_call_runs_on_one_thread(repl_settings, monkeypatch):
    """llama.cpp (OpenMP) keeps a team of compute threads per calling thread: loading on one thread and decoding on
    another gave two teams fighting for the cores, and the draft's one-token decodes ran at half speed."""
    from specchat.engine.llama import Context, Model

    threads: set[str] = set()
    for cls, name in ((Model, "__init__"), (Context, "__init__"), (Context, "decode")):
        original = getattr(cls, name)

        def recorded(self, *args, _original=original, **kwargs):
            threads.add(threading.current_thread().name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, recorded)
    # Loading, the plain reference, two replies, a switch that reloads the draft, /ab and /retry.
    run_repl(repl_settings, "Name a colour.\r/profile ngram\rAnd a fruit?\r/ab\r/profile tiny\r/retry\r" + CTRL_D)
    assert len(threads) == 1, threads


@pytest.mark.recorded
def test_slash_commands_complete_and_an_unknown_one_gets_a_did_you_mean(repl_settings):
    completer = PromptCompleter.__new__(PromptCompleter)
    completer.repl = None

    def complete(text: str) -> list[str]:
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]

    assert complete("/pro") == ["/profile"]
    assert "ngram" in complete("/profile ng") and "tiny" not in complete("/profile ng")
    assert complete("hello /pro") == []
    # Tab completes in the prompt itself: "/pro" + Tab, then " basel" + Tab.
    _, terminal, _ = run_repl(repl_settings, "/pro", "\t", " basel", "\t", "\r/ghsts\r" + CTRL_D)
    assert "profile baseline: nothing reloaded" in terminal
    assert "unknown command /ghsts — did you mean /ghosts?" in terminal


@pytest.mark.recorded
def test_non_ascii_digits_are_usage_lines_and_the_repl_goes_on(repl_settings):
    """"²" is a digit to str.isdigit() and not a number to int(): each command says its usage, none ends the REPL."""
    keys = "Name two planets.\r/open ²\r/fav ²\r/draft ²\r/replay ²\r/open 1²\r/ghosts\r" + CTRL_D
    _, terminal, _ = run_repl(repl_settings, keys)
    assert terminal.count("usage: /open N") == 2 and "usage: /fav [N]" in terminal
    assert "usage: /replay [STEP]" in terminal
    assert "/draft N, /draft auto" in terminal
    assert "ghosts on" in terminal  # the command after them still ran


@pytest.mark.recorded(holds=HELD_LONG_STORY)
def test_ctrl_c_mid_reply_keeps_the_partial_reply_marked_cancelled(repl_settings):
    repl_settings.max_tokens = 400
    keys = "Write a very long story about a dragon and a knight.\rSay yes.\r" + CTRL_D
    _, terminal, _ = run_repl(repl_settings, keys, during=signal_once_streaming(signal.SIGINT))  # Ctrl+C
    replies = saved_replies(repl_settings.db_path)
    assert replies[0].finish_reason == "cancelled" and 8 <= len(replies[0].segments) < 400
    assert replies[0].content == "".join(piece for piece, _ in replies[0].segments) and "cancelled" in terminal
    assert replies[1].finish_reason in ("stop", "length", "loop")  # the REPL went on after the cancelled reply


@pytest.mark.recorded
def test_no_color_prints_plain_text_and_the_summary(repl_settings):
    repl_settings.color = False
    _, terminal, text = run_repl(repl_settings, "Name two planets.\r" + CTRL_D)
    (reply,) = saved_replies(repl_settings.db_path)
    assert "\x1b" not in text
    lines = text.splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("[draft n_max"))
    assert reply.content in "\n".join(lines[:summary])  # the reply, then its summary
    assert all(line.startswith("slower than plain: ") for line in lines[summary + 1:])  # then at most the advice
    assert not COLOUR_SGR.search(terminal)  # the prompt's own drawing has no colour either


def test_piped_lines_are_answered_one_by_one_and_reopen_in_the_app_with_their_colours(tmp_path, user_cache):
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([sys.executable, "-m", "specchat", "repl", "--profile", "tiny", "--max-tokens", "24"],
                            env=env, timeout=300,
                            input="Name two planets.\n\nName a colour.\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and result.stderr == ""
    summaries = [line for line in result.stdout.splitlines() if line.startswith("[draft n_max")]
    assert len(summaries) == 2  # two non-empty lines, two replies; no toolbar, no prompt

    db = tmp_path / "data" / "specchat" / "chats.sqlite3"
    replies = saved_replies(db)
    assert [r.content in result.stdout for r in replies] == [True, True]

    import asyncio

    async def reopen() -> list[list]:
        settings = Settings(db_path=db, keymap=tmp_path / "keymap.toml", exports=tmp_path / "exports",
                            last_profile=tmp_path / "last-profile")
        async with make_app(settings).run_test(size=(140, 45)) as pilot:
            deadline = time.monotonic() + 60
            while not pilot.app.query(ReplyView) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            return [list(view.segments) for view in pilot.app.query(ReplyView)]

    assert asyncio.run(reopen()) == [[tuple(s) for s in r.segments] for r in replies]
    assert any(kind == "accepted" for r in replies for _, kind in r.segments)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def test_repl_in_a_real_terminal_colours_cancels_and_quits(tmp_path, user_cache):
    """In a terminal: replies stream in colour (plain with NO_COLOR), Ctrl+C stops one, Ctrl+D quits."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    db = tmp_path / "data" / "specchat" / "chats.sqlite3"
    for no_color in (False, True):
        session = f"specchat-repl-{time.time_ns()}"
        env = f"HOME={tmp_path / 'home'} XDG_CONFIG_HOME={tmp_path / 'config'} XDG_DATA_HOME={tmp_path / 'data'}"
        env += " NO_COLOR=1" if no_color else ""
        tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
             f"env {env} {sys.executable} -m specchat repl --profile {endless_profile()} --max-tokens 400;"
             " echo REPL-EXIT=$?; sleep 30")  # loops not stopped: the story is still streaming at Ctrl+C

        def screen(escapes: bool = False) -> str:
            return tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", session)

        def wait_for(condition, timeout: float = 120) -> None:
            deadline = time.monotonic() + timeout
            while not condition(screen()):
                assert time.monotonic() < deadline, screen()
                time.sleep(0.2)

        try:
            wait_for(lambda s: "/help for commands" in s)
            tmux("send-keys", "-t", session, "-l", "Name two planets.")
            tmux("send-keys", "-t", session, "Enter")
            wait_for(lambda s: "[draft n_max" in s)
            reply = screen(escapes=True).split("›")[1]  # from the first prompt to the next
            assert bool(COLOUR_SGR.search(reply)) is not no_color, reply
            tmux("send-keys", "-t", session, "-l", "Write a very long story about a dragon and a knight.")
            tmux("send-keys", "-t", session, "Enter")
            time.sleep(1.5)
            tmux("send-keys", "-t", session, "C-c")
            wait_for(lambda s: "cancelled" in s)
            assert "^C" not in screen()  # the key is not echoed into the reply
            tmux("send-keys", "-t", session, "C-d")
            wait_for(lambda s: "REPL-EXIT=" in s, 30)
            assert "REPL-EXIT=0" in screen() and "Traceback" not in screen()
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    finishes = [[m.finish_reason for m in chat if m.role == "assistant"] for chat in saved_chats(db)]
    assert len(finishes) == 2 and all(f[0] in ("stop", "length", "loop") and f[1] == "cancelled" for f in finishes), finishes


@pytest.mark.recorded
def test_history_is_kept_across_runs_privately(repl_settings):
    run_repl(repl_settings, "/help\r" + CTRL_D)
    history = Path(repl_settings.history_path)
    assert "/help" in history.read_text() and (history.stat().st_mode & 0o777) == 0o600
    assert paths.repl_history().name == "repl-history"


@pytest.mark.recorded(holds=HELD_LONG_STORY)
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_the_terminal_closing_mid_reply_quits_with_the_partial_reply_saved_as_interrupted(repl_settings, signum):
    repl_settings.max_tokens = 400
    # "Say yes." is never answered: the REPL has quit.
    repl, _, _ = run_repl(repl_settings, "Write a very long story about a dragon and a knight.\rSay yes.\r" + CTRL_D,
                          during=signal_once_streaming(signum))
    (reply,) = saved_replies(repl_settings.db_path)
    assert reply.finish_reason == "interrupted" and len(reply.segments) >= 8
    # Every token the reply got is saved, the last step's too: a record changed after it was marked saved stayed in
    # memory only.
    kept = repl.session.last_reply
    assert (reply.content, reply.tokens, reply.finish_reason) == (kept.text, list(kept.tokens), kept.finish_reason)


def said_waiting(repl) -> threading.Event:
    """Set once the REPL says a message waits for the model: it then blocks on the load, where Ctrl+C withdraws it."""
    said = threading.Event()
    say = repl.say

    def noting(line: str, *args, **kwargs) -> None:
        if line.startswith("(waiting for the model to load"):
            said.set()
        say(line, *args, **kwargs)

    repl.say = noting
    return said


@pytest.mark.recorded
def test_a_message_typed_while_the_model_loads_waits_for_it_and_is_answered(repl_settings, user_cache, draft_path):
    """It was refused ("the model is still loading — try again"); a newcomer types at once."""
    from specchat.profiles import embedded

    for derived in user_cache.glob(draft_path.name + "*"):  # a first start: the draft is derived while it loads,
        derived.unlink()
    embedded._deriving.acquire()  # here as long as the test needs (another thread holds the derivation)
    released = threading.Event()

    def load_later(repl) -> None:
        said_waiting(repl).wait(60)  # the load ends once the message waits for it (not after a fixed 2 s)
        embedded._deriving.release()
        released.set()

    try:
        _, terminal, text = run_repl(repl_settings, "¿Qué es un faro? 灯塔\r", CTRL_D, during=load_later)
    finally:
        if not released.wait(10):
            embedded._deriving.release()
    assert "waiting for the model to load — the message is sent then" in terminal + text
    (chat,) = saved_chats(repl_settings.db_path)
    assert [m.content for m in chat if m.role == "user"] == ["¿Qué es un faro? 灯塔"]
    assert [m.finish_reason for m in chat if m.role == "assistant"][0] in ("stop", "length", "loop")


def test_ctrl_c_withdraws_a_message_waiting_for_the_model(repl_settings, user_cache, draft_path):
    from specchat.profiles import embedded

    for derived in user_cache.glob(draft_path.name + "*"):
        derived.unlink()
    embedded._deriving.acquire()
    released = threading.Event()

    def withdraw_then_load(repl) -> None:
        said_waiting(repl).wait(60)  # (a fixed 1.5 s sent it before the message was typed, under load)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C while the message waits
        time.sleep(1.0)
        embedded._deriving.release()
        released.set()

    try:
        _, terminal, text = run_repl(repl_settings, "Say hello.\r", "\x15" + CTRL_D, during=withdraw_then_load)
    finally:
        if not released.wait(10):
            embedded._deriving.release()
    assert "(withdrawn — it is back in the prompt; the model goes on loading)" in terminal + text
    assert saved_chats(repl_settings.db_path) == []  # never sent


@pytest.mark.recorded
def test_a_reply_that_drafted_nothing_reads_as_plain_decoding_in_the_repl(tmp_path, user_cache):
    """A busy start's reference (3 tok/s) made a plain reply read 25× "vs plain" (issue #47)."""
    from specchat.engine.reference import PlainReference

    settings = ReplSettings("baseline", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=40)
    busy = PlainReference.measured(3.0, 40, None, False, "a plain run beside a compile")

    def poison(repl) -> None:  # as soon as the start's own reference is in, the busy one replaces it
        deadline = time.monotonic() + 120
        while repl.telemetry.reference is None and time.monotonic() < deadline:
            time.sleep(0.01)
        repl.telemetry.reference = busy

    repl, terminal, _ = run_repl(settings, "Write a short story about a robot.\r", CTRL_D, during=poison)
    assert repl.telemetry.speedup() == 1.0 and repl.telemetry.reference is not busy
    assert "vs plain 1.00× nothing drafted" in terminal
