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
    TURNS,
    Servers,
    alive,
    llama_servers_running,
    write_profile,
)
from specchat.app.chat_app import make_app
from test_app import SIZE, wait_until
from test_app import ask as ask_in_app
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


@pytest.mark.parametrize("kind", KINDS)
def test_three_greedy_turns_in_the_repl(kind, tmp_path, user_cache, llama_server, servers, plain):
    """Found through llama-server: the second turn never saw the first reply (its ids were not kept)."""
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    result = repl(tmp_path, profile, list(TURNS))
    assert result.returncode == 0, result.stderr
    (replies,) = stored_replies(tmp_path / "data" / "specchat" / "chats.sqlite3")
    assert_equal(kind, replies, plain.chat(TURNS))


@pytest.mark.parametrize("kind", ["in-process", "managed", "remote-llama"])
def test_multibyte_replies_are_whole_in_the_repl(kind, tmp_path, user_cache, llama_server, servers, plain):
    """Characters spelled over several byte tokens came through llama-server as a row of U+FFFD."""
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    result = repl(tmp_path, profile, list(MULTIBYTE))
    assert result.returncode == 0, result.stderr
    (replies,) = stored_replies(tmp_path / "data" / "specchat" / "chats.sqlite3")
    expected = plain.chat(MULTIBYTE)
    assert_equal(kind, replies, expected)
    assert "\ufffd" not in result.stdout
    for _, text in expected:
        assert text in result.stdout


async def ask(pilot, text: str):
    """One question through the app's prompt; the reply's record once it is done."""
    await ask_in_app(pilot, text)
    return pilot.app.conversation.last_reply


@pytest.mark.parametrize("kind", KINDS)
async def test_three_greedy_turns_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        replies = [await ask(pilot, text) for text in TURNS]
    expected = plain.chat(TURNS)
    assert [r.text for r in replies] == [text for _, text in expected]
    if kind != "remote-openai":
        assert [r.tokens for r in replies] == [ids for ids, _ in expected]


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


def where_says(kind: str, where: str, servers: Servers) -> bool:
    return {"in-process": where.startswith("in-process"), "managed": where.startswith("llama-server pid"),
            "remote-llama": where == f"remote {servers.url(2048)} (llama.cpp)",
            "remote-openai": where == f"remote {servers.url(2048)} (openai)"}[kind]


async def test_switching_between_every_pair_of_backend_kinds_in_the_app(tmp_path, settings, llama_server, servers):
    """F2 from in-process to a server kept the in-process engine (the badge said otherwise); server → in-process
    left a backend with an empty URL."""
    profiles = {kind: write_profile(tmp_path, kind, binary=llama_server, servers=servers) for kind in KINDS}
    walk = every_switch(KINDS)
    before = llama_servers_running()
    settings.profile, settings.max_tokens = str(profiles[walk[0]]), 8
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        for step, kind in enumerate(walk):
            if step:
                app.start_load(str(profiles[kind]))
                await wait_until(pilot, lambda: app.busy is None)
            where = app.backend.where
            assert where_says(kind, where, servers), (kind, where)
            shown = " ".join(app.sidebar.plain.split())  # the sidebar wraps long lines
            assert " ".join(where.split()) in shown and " ACTIVE " in f" {shown} "
            managed = llama_servers_running() - before - servers.pids()
            assert len(managed) == (kind == "managed"), (kind, managed)  # never two, never one left behind
            reply = await ask(pilot, "Say hi.")
            assert reply.finish_reason in ("stop", "length") and reply.text
    assert not (llama_servers_running() - before - servers.pids())


def test_switching_between_every_pair_of_backend_kinds_in_the_repl(tmp_path, user_cache, llama_server, servers):
    from specchat.repl.commands import run_command
    from specchat.repl.shell import Repl, ReplSettings
    import io

    profiles = {kind: write_profile(tmp_path, kind, binary=llama_server, servers=servers) for kind in KINDS}
    walk = every_switch(KINDS)
    before = llama_servers_running()
    out = io.StringIO()
    shell = Repl(ReplSettings(str(profiles[walk[0]]), color=False, max_tokens=8), text_out=out, interactive=False)
    try:
        assert shell._start()
        for step, kind in enumerate(walk):
            if step:
                run_command(shell, f"/profile {profiles[kind]}")
                assert out.getvalue().rstrip().endswith(f"· {shell.backend.where}")  # the REPL says where it runs
            assert where_says(kind, shell.backend.where, servers), (kind, shell.backend.where)
            managed = llama_servers_running() - before - servers.pids()
            assert len(managed) == (kind == "managed"), (kind, managed)
            shell.answer("Say hi.")
            assert shell.session.last_reply.finish_reason in ("stop", "length")
        assert "specchat:" not in out.getvalue(), out.getvalue()
    finally:
        shell.close()
    assert not (llama_servers_running() - before - servers.pids())
    assert all(not alive(pid) for pid in llama_servers_running() - before - servers.pids())
