"""The conformance suite's promises through both front ends, on every backend kind: the REPL (its real command, lines
piped in, the chats read back from its SQLite store) and the app (through Pilot) — and switching between every pair
of backend kinds both ways, with the badge and the sidebar's backend line telling the truth and no server left
running."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backend_kinds import (
    KINDS,
    MULTIBYTE,
    SYSTEM,
    TURNS,
    Servers,
    alive,
    llama_servers_running,
    write_profile,
)
from specchat.app.chat_app import make_app
from specchat.app.chat.reply import ProvenanceLines, ReplyView
from helpers import ask as ask_in_app, FOLLOW_UP, LIMIT, loop_cut, LOOPS, plain_text, SIZE, wait_until
from specchat.chats.store import Store

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


def stored_replies(db) -> list[list]:
    store = Store(db)
    try:
        return [[m for m in store.messages(chat.id) if m.role == "assistant"] for chat in store.conversations()]
    finally:
        store.close()


def assert_equal(kind: str, replies, expected) -> None:
    assert [r.content for r in replies] == [text for _, text in expected]
    if kind != "remote-openai":
        assert [r.tokens for r in replies] == [ids for ids, _ in expected]


def repl(tmp_path, profile, lines: list[str], max_tokens: int = 40) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data")}
    return subprocess.run([sys.executable, "-m", "specchat", "repl", "--profile", str(profile), "--max-tokens",
                           str(max_tokens)], input="\n".join(lines) + "\n", env=env, capture_output=True, text=True,
                          timeout=600)


def spans_several_bytes(replies) -> bool:
    """Every multibyte prompt's plain reply holds characters of two bytes or more (CJK, emoji, accents)."""
    return all(any(len(c.encode()) > 1 for c in text) for _, text in replies)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_turns_and_multibyte_replies_in_the_repl(kind, tmp_path, user_cache, llama_server, servers, plain):
    """Three turns, then CJK, emoji and accented text in the same chat, each plain decoding's reply. Found through
    llama-server: the second turn never saw the first reply (its ids were not kept); characters spelled over several
    byte tokens came through as a row of U+FFFD."""
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    texts = TURNS + MULTIBYTE
    result = repl(tmp_path, profile, list(texts))
    assert result.returncode == 0, result.stderr
    (replies,) = stored_replies(tmp_path / "data" / "specchat" / "chats.sqlite3")
    expected = plain.chat(texts, as_text=kind == "remote-openai")
    assert spans_several_bytes(expected[len(TURNS):])  # else "no U+FFFD" would prove nothing
    assert_equal(kind, replies, expected)
    assert "\ufffd" not in result.stdout
    for _, text in expected:
        assert text in result.stdout


async def ask(pilot, text: str):
    """One question through the app's prompt; the reply's record once it is done."""
    await ask_in_app(pilot, text)
    return pilot.app.session.last_reply


@pytest.mark.parametrize("kind", KINDS)
async def test_greedy_turns_and_multibyte_replies_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    """Three turns, then CJK, emoji and accented text in the same chat: each reply plain decoding's, and on screen
    whole (no U+FFFD where a character spans tokens)."""
    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 40
    texts = TURNS + MULTIBYTE
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        replies = [await ask(pilot, text) for text in texts]
        shown = [plain_text(view.query_one(ProvenanceLines)) for view in app.query(ReplyView)]  # as drawn
    expected = plain.chat(texts, as_text=kind == "remote-openai")
    assert spans_several_bytes(expected[len(TURNS):])
    assert [r.text for r in replies] == [text for _, text in expected]
    if kind != "remote-openai":
        assert [r.tokens for r in replies] == [ids for ids, _ in expected]
    assert len(shown) == len(texts) and not any("\ufffd" in text for text in shown)
    for (_, text), on_screen in zip(expected, shown):
        assert " ".join(text.split()) == " ".join(on_screen.split())  # the whole reply, as drawn (wrapped)


def every_switch(kinds: tuple[str, ...]) -> list[str]:
    """A walk through ``kinds`` that takes every ordered pair once (an Euler circuit of the complete graph)."""
    left = {a: [b for b in kinds if b != a] for a in kinds}
    walk, stack = [], [kinds[0]]
    while stack:
        here = stack[-1]
        if left[here]:
            stack.append(left[here].pop())
        else:
            walk.append(stack.pop())
    return walk[::-1]


# In the switching walks, in-process decodes plainly (INACTIVE, method none) and the servers draft (ACTIVE): a badge or
# method line left over from the kind before is seen.
WALK_METHOD = {"in-process": "none", "managed": "draft", "remote-llama": "draft", "remote-openai": "draft"}


def walk_profiles(tmp_path, llama_server, servers) -> dict:
    profiles = {kind: write_profile(tmp_path, kind, binary=llama_server, servers=servers) for kind in KINDS}
    for kind, method in WALK_METHOD.items():
        profiles[kind].write_text(profiles[kind].read_text().replace('method = "draft"', f'method = "{method}"'))
    return profiles


def where_says(kind: str, where: str, servers: Servers) -> bool:
    return {"in-process": where.startswith("in-process"), "managed": where.startswith("llama-server pid"),
            "remote-llama": where == f"remote {servers.url(2048)} (llama.cpp)",
            "remote-openai": where == f"remote {servers.url(2048)} (openai)"}[kind]


async def test_switching_between_every_pair_of_backend_kinds_in_the_app(tmp_path, settings, llama_server, servers):
    """F2 from in-process to a server kept the in-process engine (the badge said otherwise); server → in-process
    left a backend with an empty URL."""
    profiles = walk_profiles(tmp_path, llama_server, servers)
    walk = every_switch(KINDS)
    before = llama_servers_running()
    settings.profile, settings.max_tokens = str(profiles[walk[0]]), 8
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        for step, kind in enumerate(walk):
            if step:
                app.chat_view.switchboard.start_load(str(profiles[kind]))
                await wait_until(pilot, lambda: app.busy is None)
            where = app.backend.where
            assert where_says(kind, where, servers), (kind, where)
            shown = " ".join(app.chat_view.sidebar.plain.split())  # the sidebar wraps long lines
            # The backend line names what runs, and the method and badge are that backend's own.
            assert " ".join(where.split()) in shown and f"method {WALK_METHOD[kind]}" in shown, shown
            badge = "INACTIVE" if WALK_METHOD[kind] == "none" else "ACTIVE"
            assert f" {badge} " in f" {shown} " and f" {'ACTIVE' if badge == 'INACTIVE' else 'INACTIVE'} " not in f" {shown} "
            managed = llama_servers_running() - before - servers.pids()
            assert len(managed) == (kind == "managed"), (kind, managed)  # never two, never one left behind
            reply = await ask(pilot, "Say hi.")
            assert reply.finish_reason in ("stop", "length", "loop") and reply.text
    assert not (llama_servers_running() - before - servers.pids())


def test_switching_between_every_pair_of_backend_kinds_in_the_repl(tmp_path, user_cache, llama_server, servers):
    from specchat.repl.commands import run_command
    from prompt_toolkit.data_structures import Size
    from prompt_toolkit.output.vt100 import Vt100_Output
    from specchat.repl import ReplSettings, make_repl
    import io

    profiles = walk_profiles(tmp_path, llama_server, servers)
    walk = every_switch(KINDS)
    before = llama_servers_running()
    out = io.StringIO()
    wide = Vt100_Output(io.StringIO(), lambda: Size(rows=30, columns=400), term="xterm-256color")
    shell = make_repl(ReplSettings(str(profiles[walk[0]]), color=False, max_tokens=8), output=wide, text_out=out,
                      interactive=False)
    try:
        assert shell._start()
        for step, kind in enumerate(walk):
            if step:
                run_command(shell, f"/profile {profiles[kind]}")
                assert out.getvalue().rstrip().endswith(f"· {shell.backend.where}")  # the REPL says where it runs
            assert where_says(kind, shell.backend.where, servers), (kind, shell.backend.where)
            toolbar = shell._toolbar()[0][1]  # what the REPL's toolbar and status line show
            badge = "INACTIVE" if WALK_METHOD[kind] == "none" else "ACTIVE"
            assert f" {WALK_METHOD[kind]} · {badge} · " in toolbar, toolbar
            managed = llama_servers_running() - before - servers.pids()
            assert len(managed) == (kind == "managed"), (kind, managed)
            shell.answer("Say hi.")
            assert shell.session.last_reply.finish_reason in ("stop", "length", "loop")
        assert "specchat:" not in out.getvalue(), out.getvalue()
    finally:
        shell.close()
    assert not (llama_servers_running() - before - servers.pids())
    assert all(not alive(pid) for pid in llama_servers_running() - before - servers.pids())


def answer_after(plain, session, target_id: str, text: str, max_tokens: int):
    """Plain decoding's reply to ``text`` after ``session``'s turns up to the last exchange (a partial reply as kept)."""
    from specchat.chats.session import engine_messages

    index, _ = session.last_exchange()
    history = engine_messages(session.turns[:index], SYSTEM, target_id)
    return plain.answer(history, text, max_tokens=max_tokens)


@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_then_continue_then_regenerate_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    """Esc mid-reply keeps the partial reply; the next turn answers after it, and Ctrl+R answers that turn again —
    each equal to plain decoding after the chat as kept."""
    from helpers import start_long_reply

    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 200
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        await start_long_reply(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.busy is None)
        partial = app.session.last_reply
        assert partial.finish_reason == "cancelled" and 8 <= len(partial.segments) < 200
        follow = await ask(pilot, FOLLOW_UP)
        expected = answer_after(plain, app.session, app.backend.target_id, FOLLOW_UP, 200)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.busy is None and app.session.last_reply is not follow
                         and app.session.last_reply.finish_reason)
        again = app.session.last_reply
        assert len(app.session.turns) == 4 and app.session.turns[1] is partial
    assert [follow.text, again.text] == [expected[1]] * 2
    if kind != "remote-openai":
        assert [list(follow.tokens), list(again.tokens)] == [expected[0]] * 2


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_then_continue_then_retry_in_the_repl(kind, tmp_path, user_cache, llama_server, servers, plain):
    """Ctrl+C mid-reply, then the next turn and /retry, on the REPL's own loop."""
    import signal

    from specchat.repl.shell import ReplSettings
    from helpers import signal_once_streaming
    from helpers import CTRL_D, run_repl

    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    settings = ReplSettings(str(profile), db_path=tmp_path / "chats.sqlite3", max_tokens=200, color=False)
    keys = ["Write a very long story about a dragon and a knight.\r", f"{FOLLOW_UP}\r", "/retry\r", CTRL_D]
    shell, _, text = run_repl(settings, *keys, during=signal_once_streaming(signal.SIGINT))
    session = shell.session
    partial = session.turns[1]
    assert partial.finish_reason == "cancelled" and 8 <= len(partial.segments) < 200, text
    assert len(session.turns) == 4 and "specchat:" not in text, text
    expected = answer_after(plain, session, partial.target_id, FOLLOW_UP, 200)
    (replies,) = stored_replies(tmp_path / "chats.sqlite3")
    assert replies[0].finish_reason == "cancelled" and len(replies) == 2
    assert_equal(kind, [replies[1]], [expected])
    assert text.count(expected[1]) == 2, text  # printed twice: the next turn, and /retry's answer to it again


@pytest.mark.parametrize("kind", KINDS)
def test_a_reply_in_a_loop_stops_and_says_so_in_the_repl(kind, tmp_path, user_cache, llama_server, servers, plain):
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    result = repl(tmp_path, profile, [LOOPS[1]], max_tokens=LIMIT)
    assert result.returncode == 0, result.stderr
    ((reply,),) = stored_replies(tmp_path / "data" / "specchat" / "chats.sqlite3")
    assert reply.finish_reason == "loop" and "stopped in a loop: the same" in result.stdout
    ids, text = plain.chat(LOOPS[1:2], max_tokens=LIMIT, loop=False)[0]
    assert text.startswith(reply.content) and len(reply.content) < len(text)
    if kind != "remote-openai":
        n, span = loop_cut(ids, plain.piece)
        assert reply.tokens == ids[:n] and f"the same {span}-token span" in result.stdout


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reply_in_a_loop_stops_and_says_so_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = LIMIT
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        record = await ask(pilot, LOOPS[2])
        view = list(app.query(ReplyView))[-1]
        status = plain_text(view.status_line)
    ids, text = plain.chat(LOOPS[2:], max_tokens=LIMIT, loop=False)[0]
    assert record.finish_reason == "loop" and "↻ stopped in a loop: the same" in status
    assert "stop_on_loop = false" in status
    if kind != "remote-openai":
        n, span = loop_cut(ids, plain.piece)
        assert record.tokens == ids[:n] and f"the same {span}-token span" in status
