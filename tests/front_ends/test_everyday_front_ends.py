"""Everyday chatting in both front ends, on the in-process and the llama-server backends: editing a message and
moving between its versions, regenerating as a version, forking, deleting, renaming, searching every chat from the
chat list, copying any code block — the app through Pilot, the REPL through its real prompt, the results read back
from the SQLite file."""

from __future__ import annotations

import pytest

from backend_kinds import SYSTEM, write_profile
from specchat.app.chat_app import make_app
from specchat.app.screens.chat_list import HIT_STYLE, ConversationsScreen
from specchat.app.screens.modals import CodeBlockScreen, ConfirmScreen
from specchat.app.chat.prompt import PromptInput
from specchat.app.chat.reply import ReplyView, UserMessage
from specchat.chats.records import ReplyRecord
from specchat.chats.session import ChatSession
from specchat.chats.store import Store
from specchat.engine import Message
from specchat.repl.shell import ReplSettings
from helpers import ask, at_rest, CTRL_D, notices, plain_text, ready, run_repl, SIZE, wait_until

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")
KINDS = ("in-process", "managed")
FIRST, SECOND, EDITED = "Name two planets.", "Which one is larger?", "Name two rivers."


def stored(db, chat_id: int | None = None) -> ChatSession:
    store = Store(db)
    session = ChatSession(store, "", None, lambda line, error: None)
    session.open(chat_id if chat_id is not None else store.conversations()[0].id)
    return session


def texts(session) -> list[str]:
    return [turn.text for turn in session.turns]


def shown_messages(app) -> list[str]:
    return [view.text for view in app.query("UserMessage, ReplyView")]


def versions_shown(app) -> list[str]:
    """The "‹ k/n ›" line of every message on screen that has one."""
    found = []
    for view in app.query("UserMessage, ReplyView"):
        if isinstance(view, UserMessage) and view.versions is not None:
            found.append(view.versions.plain.split("  ")[0])
        elif isinstance(view, ReplyView) and view.query(".versions"):
            found.append(plain_text(view.query_one(".versions")).strip().split("  ")[0])
    return found


@pytest.mark.parametrize("kind", KINDS)
async def test_edit_regenerate_and_versions_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 32
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, FIRST)
        await ask(pilot, SECOND)
        before = texts(app.session)
        # alt+up twice selects the question before; alt+e puts it into the prompt, Esc leaves it as it was.
        await pilot.press("alt+up", "alt+up", "alt+up")
        assert app.chat_view.chat_log.selected == 1 and "selected" in list(app.query("UserMessage, ReplyView"))[1].classes
        await pilot.press("alt+up", "alt+e")
        prompt = app.query_one(PromptInput)
        assert app.chat_view.column.prompt.editing == 0 and prompt.text == FIRST
        await pilot.press("escape")
        assert app.chat_view.column.prompt.editing is None and prompt.text == "" and texts(app.session) == before
        await pilot.press("alt+e")
        prompt.load_text(EDITED)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.session.last_reply.finish_reason)
        ids, text = plain.chat((EDITED,), max_tokens=32)[0]
        assert texts(app.session) == [EDITED, text] and app.session.last_reply.tokens == ids
        assert shown_messages(app) == [EDITED, text] and versions_shown(app) == ["‹ 2/2 ›"]
        assert texts(stored(settings.db_path)) == [EDITED, text]
        # alt+left shows the version before, with everything that followed it; alt+right comes back.
        await pilot.press("alt+up", "alt+up", "alt+left")
        assert shown_messages(app) == before and versions_shown(app) == ["‹ 1/2 ›"]
        assert texts(stored(settings.db_path)) == before
        await pilot.press("escape", "ctrl+r")  # regenerate: the old answer is kept as a version
        await wait_until(pilot, lambda: app.busy is None and app.session.last_reply.finish_reason)
        assert versions_shown(app) == ["‹ 1/2 ›", "‹ 2/2 ›"] and texts(app.session) == before
        await pilot.press("alt+left")  # nothing selected: the last message that has versions
        assert versions_shown(app) == ["‹ 1/2 ›", "‹ 1/2 ›"] and stored(settings.db_path).alternatives(3) == (1, 2)
        # The search finds the edited question only in the version not shown; Enter shows that version.
        await pilot.press("ctrl+l")
        app.screen.query_one("#chat-search").value = "rivers"
        await pilot.pause()
        (hit,) = app.screen.hits
        assert hit.where == "a version of #1 not shown"
        await pilot.press("down", "enter")
        assert texts(app.session)[0] == EDITED and versions_shown(app) == ["‹ 2/2 ›"] and app.chat_view.chat_log.selected == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_fork_delete_rename_and_search_in_the_app(kind, tmp_path, settings, llama_server, servers, plain):
    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 24
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Écris une phrase avec « été ».")
        await ask(pilot, "写一首关于猫的诗")
        first_chat, before = app.session.id, texts(app.session)
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+f")  # fork at the first reply
        assert app.session.id != first_chat and texts(app.session) == before[:2]
        assert shown_messages(app) == before[:2]
        assert texts(stored(settings.db_path, first_chat)) == before  # the forked chat is as it was
        # The fork goes on where it was cut: its next reply is plain decoding's after its two messages.
        history = [Message("system", SYSTEM), Message("user", before[0]),
                   Message("assistant", before[1], list(app.session.turns[1].tokens))]
        follow = await ask(pilot, "写一首关于猫的诗")
        assert follow.tokens == plain.answer(history, "写一首关于猫的诗", max_tokens=24)[0]
        before = texts(app.session)
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+d")  # delete from the first reply on: asked first
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert texts(app.session) == before
        await pilot.press("alt+d", "y")
        assert texts(app.session) == before[:1] and shown_messages(app) == before[:1]
        assert texts(stored(settings.db_path, app.session.id)) == before[:1]
        # The chat list: renaming the chat on screen renames its session too; search finds words in every chat.
        await pilot.press("ctrl+l")
        screen = app.screen
        assert isinstance(screen, ConversationsScreen)
        await pilot.press("down", "r")
        screen.query_one("#rename").value = "Verano"
        await pilot.press("enter")
        assert app.session.title == "Verano" and stored(settings.db_path, app.session.id).title == "Verano"
        await pilot.press("slash")
        screen.query_one("#chat-search").value = "ete"
        await pilot.pause()
        hits = [hit for hit in screen.hits]
        assert {(h.chat_id, h.position) for h in hits} >= {(first_chat, 0), (app.session.id, 0)}
        options = screen.query_one("#chat-list")
        prompts = [options.get_option_at_index(i).prompt for i in range(options.option_count)]
        lit = {p.plain[s.start:s.end] for p in prompts for s in p.spans if str(s.style) == HIT_STYLE}
        assert "été" in lit and {w.lower().replace("é", "e") for w in lit} == {"ete"}  # the hits lit, and only they
        await pilot.press("down", "enter")
        assert app.session.id == hits[0].chat_id and app.chat_view.chat_log.selected == hits[0].position
        await pilot.press("ctrl+l")
        app.screen.query_one("#chat-search").value = "猫"
        await pilot.pause()
        assert {h.chat_id for h in app.screen.hits} == {first_chat}
        await pilot.press("escape")


@pytest.mark.recorded
async def test_copying_any_code_block(settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        record = ReplyRecord(segments=[("Two blocks:\n```python\nprint(1)\n```\nand\n```sh\necho two\nls\n```\n",
                                        "target")], tokens=[1], finish_reason="stop")
        app.session.add_user("code?")
        app.session.turns.append(record)
        app.session.add_user("and one more?")
        app.session.turns.append(ReplyRecord(segments=[("```\nonly\n```", "target")], tokens=[1],
                                                  finish_reason="stop"))
        app.chat_view.chat_log.show_turns()
        copied = []
        app.copy_to_clipboard = copied.append
        await pilot.press("ctrl+k")  # the last reply has one block: copied at once
        assert copied == ["only\n"]
        await pilot.press("alt+up", "alt+up", "alt+up", "ctrl+k")  # the first reply has two: picked from a list
        assert isinstance(app.screen, CodeBlockScreen)
        await pilot.press("down", "enter")
        assert copied == ["only\n", "echo two\nls\n"]


@pytest.mark.recorded
@pytest.mark.parametrize("kind", KINDS)
def test_edit_branch_fork_delete_title_and_search_in_the_repl(kind, tmp_path, user_cache, llama_server, servers):
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    settings = ReplSettings(str(profile), db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=32, color=False)
    repl, _, text = run_repl(settings, FIRST + "\r", SECOND + "\r", "/messages\r", "/edit 1\r",
                             "\x15" + EDITED + "\r", "/branch 1\r", "/branch 1 prev\r", "/retry\r", "/branch 4 prev\r",
                             "/title Planetas y ríos\r", "/fork 2\r", "/delete 2\r", "/search planets\r",
                             "/edit 9\r", "/branch 1 sideways\r", CTRL_D, pace=0.1)
    assert "editing message 1" in text and "message 1: version 2 of 2" in text
    assert "message 1: version 1 of 2" in text and "message 4: version 1 of 2" in text
    assert "renamed: 'Planetas y ríos'" in text
    assert "new chat 'Planetas y ríos (fork)' with messages 1 … 2" in text
    assert "usage: /edit [N] — N from 1 to 1" in text and "usage: /branch N [prev|next]" in text
    store = Store(settings.db_path)
    chats = {c.title: c.id for c in store.conversations()}
    original = stored(settings.db_path, chats["Planetas y ríos"])
    assert texts(original)[0] == FIRST and original.alternatives(0) == (1, 2) and original.alternatives(3) == (1, 2)
    assert texts(stored(settings.db_path, chats["Planetas y ríos (fork)"])) == [FIRST]  # its reply deleted
    hits = [line for line in text.splitlines() if "user #1: Name two planets" in line]
    assert len(hits) >= 2  # both chats hold the question


@pytest.mark.recorded
async def test_any_span_of_a_reply_can_be_selected_and_copied(settings):
    """A drag over a reply selects its text as drawn (Textual's text selection); Ctrl+C copies it."""
    settings.max_tokens = 24
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        view = await ask(pilot, "Name two planets.")
        body = view.body
        await at_rest(pilot, body)
        first_line = body._lines[0].plain
        await pilot.mouse_down(body, offset=(2, 0))
        await pilot.hover(body, offset=(9, 0))
        await pilot.mouse_up(body, offset=(9, 0))
        await pilot.pause()
        assert app.screen.get_selected_text() == first_line[2:10]  # (the cell under the pointer included)
        selected = app.screen.get_component_rich_style("screen--selection").bgcolor
        lit = "".join(s.text for s in body.render_line(0) if s.style is not None and s.style.bgcolor == selected)
        assert lit == first_line[2:10]  # drawn as selected
        copied = []
        app.copy_to_clipboard = copied.append
        await pilot.press("ctrl+c")
        assert copied == [first_line[2:10]]


@pytest.mark.recorded
async def test_a_refused_edit_and_a_stale_selection_in_the_app(settings):
    """An edit the backend refuses before it begins (larger than the context) leaves the chat on screen as it was and
    the edit in the prompt; a selection or an edit of another chat never reaches the one shown."""
    settings.max_tokens = 16
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, FIRST)
        await ask(pilot, SECOND)
        before = texts(app.session)
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+up", "alt+e")
        prompt = app.query_one(PromptInput)
        huge = "word " * 5000
        prompt.load_text(huge)
        await pilot.press("enter")  # (refused by the backend: wait for its line, not for an idle app it began from)
        await wait_until(pilot, lambda: app.busy is None and any("context holds" in n for n in notices(app)))
        await pilot.pause()  # the views the chat drew again replace the old ones at the next refresh
        assert texts(app.session) == before and shown_messages(app) == before and versions_shown(app) == []
        assert prompt.text == huge and app.chat_view.column.prompt.editing == 0  # still the edit, to shorten
        await pilot.press("escape")
        assert prompt.text == "" and app.chat_view.column.prompt.editing is None
        await pilot.press("alt+up", "alt+e", "ctrl+n")  # a message selected, an edit begun: then another chat
        assert app.chat_view.chat_log.selected is None and app.chat_view.column.prompt.editing is None and prompt.text == ""
        await ask(pilot, "Hi!")
        for key in ("alt+e", "ctrl+k", "alt+f", "alt+left"):  # nothing of the old chat's selection is left to crash
            await pilot.press(key)
            await pilot.pause()
        assert app.is_running and texts(app.session)[0] == "Hi!"
        await pilot.press("alt+d")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")


@pytest.mark.recorded
async def test_deleting_a_chat_from_the_list_asks_first(tmp_path, settings):
    settings.max_tokens = 8
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, FIRST)
        first = app.session.id
        await pilot.press("ctrl+n")
        await ask(pilot, SECOND)
        await pilot.press("ctrl+l", "down", "down", "d")  # the second chat listed is the first one made
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert {c.id for c in app.session.store.conversations()} >= {first}
        await pilot.press("d", "y")
        await pilot.pause()
        assert first not in {c.id for c in app.session.store.conversations()}
        assert isinstance(app.screen, ConversationsScreen)
