"""Edit and branch, fork, delete, titles and search (issue "everyday chatting"), through the chat controller both
front ends use, on the in-process and the llama-server backends, with real SQLite files: every change saved as it
happens, an old database migrated in place, and ``specchat chats`` on a real database. (The app and the REPL:
test_everyday_front_ends.py.)"""

from __future__ import annotations

import json
import sqlite3

import pytest

from backend_kinds import SYSTEM, ask, write_profile
from specchat.chats.controller import ChatController
from specchat.chats.search import fts_query, matches
from specchat.chats.session import ChatSession
from specchat.chats.store import MIGRATIONS, Store
from specchat.engine import Message
from specchat.engine.llama import common_prefix
from specchat.errors import Refused

from helpers import cli, finished_reply

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")
KINDS = ("in-process", "managed")
FIRST, SECOND = "Name two planets.", "Which one is larger?"
EDITED = "Name two rivers."


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def controller(kind, tmp_path, llama_server, servers):
    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    made = ChatController(Store(tmp_path / "chats.sqlite3"), str(profile), lambda line, error: None, max_tokens=32)
    made.switcher.profile_switched(made.switcher.switch_profile(str(profile)))
    yield made
    made.close()
    made.session.store.close()


def reopened(controller) -> ChatSession:
    """The chat as a new process would read it from the database file."""
    store = Store(controller.session.store.path)
    session = ChatSession(store, "", None, lambda line, error: None)
    session.open(controller.session.id)
    return session


def texts(session) -> list[str]:
    return [turn.text for turn in session.turns]


def answer(controller, exchange):
    events = []
    assert exchange.run(events.append) is None
    controller.absorb(events)
    return controller.session.last_reply


def test_regenerate_keeps_the_old_answer_as_a_version(controller, plain):
    first = ask(controller, FIRST)
    again = answer(controller, controller.regenerate())
    session = controller.session
    assert again is not first and again.text == first.text == plain.chat((FIRST,), max_tokens=32)[0][1]  # greedy: the same answer
    assert session.alternatives(1) == (2, 2) and session.alternatives(0) is None
    assert controller.session.step_alternative(1, -1) == (1, 2) and session.turns[1] is first
    with pytest.raises(Refused, match="version 1 of 2: there is none before it"):
        controller.session.step_alternative(1, -1)
    assert reopened(controller).alternatives(1) == (1, 2)  # saved as it happened
    assert texts(reopened(controller)) == [FIRST, first.text]


def test_an_edit_keeps_the_old_branch_and_decodes_only_from_the_edit(controller, plain, kind):
    ask(controller, FIRST)
    second = ask(controller, SECOND)
    before = texts(controller.session)
    synced = []
    if kind == "in-process":  # the draft model's cache too: what its first sync after the edit decodes
        draft_cache = controller.backend.engine.speculation.drafter.ctx
        sync = draft_cache.sync
        draft_cache.sync = lambda tokens: synced.append((list(tokens), sync(tokens))) or synced[-1][1]
    edited = answer(controller, controller.edit(0, EDITED))
    session = controller.session
    assert texts(session)[0] == EDITED and len(session.turns) == 2 and session.alternatives(0) == (2, 2)
    ids, text = plain.chat((EDITED,), max_tokens=32)[0]
    assert edited.tokens == ids and edited.text == text  # greedy exactness holds after an edit
    # The prefill decoded only from the edit point: what both prompts share (the system prompt and the template's
    # opening) was reused from the cache that held the whole old chat.
    backend = controller.backend
    vocab = plain._backends[2048, True].engine.target
    old = vocab.tokenize(backend.render([Message("system", SYSTEM), Message("user", FIRST)]), add_special=True)
    new = vocab.tokenize(backend.render([Message("system", SYSTEM), Message("user", EDITED)]), add_special=True)
    shared = common_prefix(old, new)
    assert edited.reused_tokens == shared and edited.stats["prefill_tokens"] == len(new) - shared
    if synced:
        tokens, decoded = synced[0]
        assert tokens[:len(new)] == new and decoded == len(tokens) - shared  # the draft's from the edit point on
    # Both branches are whole, in memory and in the file, and moving between them changes nothing else.
    controller.session.step_alternative(0, -1)
    assert texts(session) == before and session.turns[3] is second and texts(reopened(controller)) == before
    controller.session.step_alternative(0, 1)
    assert texts(reopened(controller)) == [EDITED, text]


@pytest.mark.recorded
def test_versions_nest_and_survive_a_reopen(controller):
    ask(controller, FIRST)
    ask(controller, SECOND)
    answer(controller, controller.regenerate())  # a version of reply 4, inside the first branch
    answer(controller, controller.edit(2, "And the smaller?"))  # a version of message 3
    session = controller.session
    assert session.alternatives(2) == (2, 2) and session.alternatives(3) is None
    controller.session.step_alternative(2, -1)
    assert session.alternatives(3) == (2, 2)  # the nested versions came back with their branch
    again = reopened(controller)
    assert texts(again) == texts(session) and again.alternatives(2) == (1, 2) and again.alternatives(3) == (2, 2)


@pytest.mark.recorded
def test_delete_fork_and_rename_are_saved_as_they_happen(controller):
    ask(controller, FIRST)
    ask(controller, SECOND)
    answer(controller, controller.regenerate())
    session = controller.session
    assert session.title == FIRST  # named from the first message at once, no model call
    controller.rename("  Planets   and sizes ")
    assert reopened(controller).title == "Planets and sizes"
    original = session.id
    kept = texts(session)
    controller.fork(1)
    assert session.id != original and texts(session) == kept[:2] and session.title == "Planets and sizes (fork)"
    assert texts(reopened(controller)) == kept[:2]
    session.open(original)
    assert texts(session) == kept and session.alternatives(3) == (2, 2)  # the forked chat is as it was
    controller.delete_from(3)  # the shown answer goes; its other version is shown in its place
    assert len(session.turns) == 4 and session.alternatives(3) is None
    controller.delete_from(2)
    assert texts(reopened(controller)) == kept[:2]
    with pytest.raises(Refused, match="no message 9"):
        controller.delete_from(8)


HUGE = "word " * 5000  # larger than the context: refused before anything is decoded


def refused(controller, exchange) -> str | None:
    failure = exchange.run(lambda event: None)
    assert failure is not None and not failure.started
    return controller.failed(failure)


@pytest.mark.recorded
def test_a_first_message_refused_before_it_began_leaves_no_title_and_no_chat(controller):
    """A message too long for the context, refused, stayed as the chat's title (even after another message was sent)
    and as an empty chat in the store."""
    store = controller.session.store
    secret = "my password is hunter2 " + HUGE
    assert refused(controller, controller.begin(secret)) == secret
    assert controller.session.turns == [] and controller.session.title == ""
    assert store.conversations() == []
    ask(controller, FIRST)
    (chat,) = store.conversations()
    assert chat.title == FIRST and "hunter2" not in chat.title
    assert texts(reopened(controller))[0] == FIRST


@pytest.mark.recorded
def test_an_edit_refused_before_it_began_restores_what_was_there(controller):
    ask(controller, FIRST)
    before = texts(controller.session)
    assert refused(controller, controller.edit(0, HUGE)) == HUGE  # what was typed goes back to the prompt
    assert texts(controller.session) == before and controller.session.alternatives(0) is None
    assert texts(reopened(controller)) == before
    # With three versions and the second shown, a refused edit shows the second again (not the newest).
    answer(controller, controller.edit(0, EDITED))
    answer(controller, controller.edit(0, "Name two seas."))
    controller.session.step_alternative(0, -1)
    shown = texts(controller.session)
    assert controller.session.alternatives(0) == (2, 3) and shown[0] == EDITED
    refused(controller, controller.edit(0, HUGE))
    assert controller.session.alternatives(0) == (2, 3) and texts(controller.session) == shown
    assert reopened(controller).alternatives(0) == (2, 3) and texts(reopened(controller)) == shown


def test_a_regeneration_refused_before_it_began_shows_the_reply_again(controller, kind, tmp_path, llama_server,
                                                                     servers):
    long_question = "Summarise in one line: " + " ".join(f"word{i}" for i in range(150))
    ask(controller, long_question)
    before = texts(controller.session)
    # A context too small for the question now: the backend refuses to answer it again before decoding anything.
    (tmp_path / "small").mkdir()
    small = write_profile(tmp_path / "small", kind, binary=llama_server, servers=servers, n_ctx=128)
    controller.switcher.profile_switched(controller.switcher.switch_profile(str(small)))
    assert refused(controller, controller.regenerate()) is None  # nothing was typed for it
    assert texts(controller.session) == before and controller.session.alternatives(1) is None
    assert texts(reopened(controller)) == before


@pytest.mark.recorded
def test_regenerating_an_unanswered_question_makes_no_empty_version(controller):
    ask(controller, FIRST)
    controller.delete_from(1)  # the question stays, its reply goes (as after a fork at a question)
    answer(controller, controller.regenerate())
    assert len(controller.session.turns) == 2 and controller.session.alternatives(1) is None
    assert reopened(controller).alternatives(1) is None


def test_a_damaged_version_is_said_in_one_line_kept_and_the_chat_opens(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    a = _chat(store, "Teas", "Write a haiku about tea.", "Leaves unfold in steam.")
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    session.open(a)
    for answer_again in ("Steam.", "Cups."):
        session.branch(1)
        finished_reply(session, answer_again)
    assert session.alternatives(1) == (3, 3)
    store.db.execute("UPDATE branches SET tail = x'00ff' WHERE ordinal = 0")  # the first answer's row, damaged
    said = []
    again = ChatSession(store, "tiny", None, lambda line, error: said.append((line, error)))
    again.open(a)
    assert texts(again) == ["Write a haiku about tea.", "Cups."] and again.alternatives(1) == (2, 2)
    assert said == [(f"chat {a}: 1 version of its messages could not be read (damaged) — kept in the database as"
                     " they are; the chat shows without them", True)]
    again.show_alternative(1, 0)  # a save that rewrites the versions keeps the damaged row as it was
    assert texts(again)[1] == "Steam."
    assert store.db.execute("SELECT count(*) FROM branches WHERE tail = x'00ff'").fetchone() == (1,)
    third = ChatSession(store, "tiny", None, lambda line, error: None)
    third.open(a)
    assert texts(third)[1] == "Steam." and third.alternatives(1) == (1, 2)


# -- search --------------------------------------------------------------------------------------------------------


def test_queries_and_highlights_on_worked_examples():
    assert fts_query("decod") == '"decod"*'
    assert fts_query("a-b: c*") == '"a" AND "b" AND "c"*'  # a user's punctuation is never FTS5 syntax
    assert fts_query('NEAR("x" OR y) _') == '"NEAR" AND "x" AND "OR" AND "y"*'  # operators are words; "_" is none
    assert fts_query("一种猫") == '"一 种 猫"' and fts_query("?!") is None
    text = "El Código de la decodificación"
    assert [text[a:b] for a, b in matches(text, "codigo decod")] == ["Código", "decodificación"]
    assert matches("cat catalogue", "cat") == [(0, 3), (4, 13)]  # the last word also as a prefix
    assert matches("cat catalogue", "cat dog") == [(0, 3)]


def _chat(store: Store, title: str, *messages: str) -> int:
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    for i, text in enumerate(messages):
        if i % 2 == 0:
            session.add_user(text)
        else:
            finished_reply(session, text)
    session.rename(title)
    return session.id


def test_search_finds_words_across_chats_and_keeps_in_step_with_the_messages(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    a = _chat(store, "Spanish", "¿Qué es el código?", "El código es un conjunto de instrucciones.")
    b = _chat(store, "Cats", "写一首关于猫的诗", "猫是一种动物 🙂")
    assert [(h.chat_id, h.position) for h in store.search("codigo")] == [(a, 0), (a, 1)]
    assert [(h.chat_id, h.position) for h in store.search("猫")] == [(b, 0), (b, 1)]
    assert [h.position for h in store.search("一种")] == [1] and store.search("instruc")[0].position == 1
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    session.open(a)
    session.delete_from(1)
    assert [h.position for h in store.search("codigo")] == [0]  # a deleted message is no hit
    store.delete(b)
    assert store.search("猫") == [] and store.db.execute("SELECT count(*) FROM messages_fts").fetchone() == (1,)


def test_search_finds_the_versions_a_chat_keeps_unshown(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    a = _chat(store, "Seas", "Write a haiku about tea.", "Leaves unfold in steam.")
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    session.open(a)
    session.branch(0)
    session.add_user("Write a haiku about the sea.")
    (version,) = store.search("tea")  # only in the version not shown now
    assert (version.chat_id, version.position, version.ordinal, version.where) == (a, 0, 0, "a version of #1 not shown")
    assert version.content == "Write a haiku about tea.\n\nLeaves unfold in steam."
    assert [h.ordinal for h in store.search("haiku")] == [None, 0]  # the message shown first, then the version
    session.show_alternative(0, 0)
    assert [h.where for h in store.search("tea")] == ["user #1"] and store.search("sea")[0].ordinal == 1
    store.delete(a)
    assert store.search("haiku") == [] and store.db.execute("SELECT count(*) FROM branches_fts").fetchone() == (0,)


def nested_versions(store: Store) -> int:
    """A chat whose first reply, mentioning a lighthouse, was regenerated, and whose question was then edited: the
    lighthouse is in a version kept inside the question's first version."""
    chat = _chat(store, "Coast", "Describe the coast.", "A lighthouse stands on the cliff.")
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    session.open(chat)
    session.branch(1)
    finished_reply(session, "Waves break on the rocks.")
    session.branch(0)
    session.add_user("Describe the harbour.")
    finished_reply(session, "Boats rest at the quay.")
    return chat


def test_a_hit_in_a_nested_version_shows_that_version(tmp_path):
    """Opening the hit showed the question's first version with the regenerated reply: the word was not on screen."""
    store = Store(tmp_path / "chats.sqlite3")
    chat = nested_versions(store)
    (hit,) = store.search("lighthouse")
    assert (hit.position, hit.ordinal) == (0, 0)
    session = ChatSession(store, "tiny", None, lambda line, error: None)
    session.open(chat)
    session.show_alternative(hit.position, hit.ordinal)
    assert [t.text for t in session.turns] == ["Describe the coast.", "Waves break on the rocks."]  # the outer version
    assert session.reveal(hit.position, "lighthouse") == 1
    assert [t.text for t in session.turns] == ["Describe the coast.", "A lighthouse stands on the cliff."]
    assert session.alternatives(0) == (1, 2) and session.alternatives(1) == (1, 2)
    reopened = ChatSession(store, "tiny", None, lambda line, error: None)
    reopened.open(chat)  # what is shown is saved
    assert reopened.turns[1].text == "A lighthouse stands on the cliff."
    assert session.reveal(0, "zebra") is None and session.reveal(0, "harbour") == 0  # in the other version of #1
    assert [t.text for t in session.turns] == ["Describe the harbour.", "Boats rest at the quay."]


async def test_the_app_opens_a_hit_in_a_nested_version_at_the_message_holding_it(tmp_path):
    from specchat.app.chat_app import make_app
    from specchat.app.settings import Settings

    store = Store(tmp_path / "chats.sqlite3")
    nested_versions(store)
    store.close()
    settings = Settings(db_path=tmp_path / "chats.sqlite3", keymap=tmp_path / "keymap.toml",
                        exports=tmp_path / "exports", autoload=False, resume=False)
    async with make_app(settings).run_test(size=(120, 40)) as pilot:
        app = pilot.app
        await pilot.press("ctrl+l")
        await pilot.pause()
        app.screen.query_one("#chat-search").value = "lighthouse"
        await pilot.pause()
        assert [h.where for h in app.screen.hits] == ["a version of #1 not shown"]
        await pilot.press("down", "enter")
        await pilot.pause()
        assert [t.text for t in app.session.turns] == ["Describe the coast.", "A lighthouse stands on the cliff."]
        assert app.chat_view.chat_log.selected == 1  # the message that holds the word, selected
        assert "lighthouse" in " ".join(view.text for view in app.query("ReplyView"))  # on screen


def test_odd_searches_find_what_they_say(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    _chat(store, "Odd", 'He said "NEAR" or OR, and a_b', "snake_case and 100%")
    assert [h.position for h in store.search('"NEAR"')] == [0] and [h.position for h in store.search("or")] == [0]
    assert [h.position for h in store.search("snake_case")] == [1] and store.search("%%%") == []
    assert store.search("x" * 5000) == [] and [h.position for h in store.search("a_b _")] == [0]


def test_a_damaged_search_index_is_damage_like_any_other(tmp_path):
    from specchat.chats.store_opening import open_store

    path = tmp_path / "chats.sqlite3"
    store = Store(path)
    _chat(store, "Teas", "Write a haiku about tea.", "Leaves unfold in steam.")
    store.db.execute("UPDATE messages_fts_data SET block = x'0102' WHERE id > 1")  # its pages, not the messages'
    store.close()
    reopened_store, problem = open_store(path)
    assert reopened_store is not None and "its search index messages_fts is damaged" in problem
    assert "kept as" in problem and reopened_store.conversations() == []  # set aside, a new database started


def test_an_old_database_migrates_in_place_and_its_chats_are_searchable(tmp_path):
    path = tmp_path / "chats.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    for migration in MIGRATIONS[:3]:  # the schema as specchat wrote it before search and branches
        migration(db)
    db.execute("PRAGMA user_version = 3")
    db.execute("INSERT INTO conversations VALUES (1, 'old', 'tiny', NULL, 0, 0)")
    db.execute("INSERT INTO messages (conversation_id, position, role, content, created) VALUES (1, 0, 'user',"
               " 'Écris « été »', 0)")
    db.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
    assert [(h.chat_id, h.content) for h in store.search("ete")] == [(1, "Écris « été »")]
    assert store.branches(1) == [] and [m.content for m in store.messages(1)] == ["Écris « été »"]


# -- specchat chats ------------------------------------------------------------------------------------------------


def test_the_chats_command_lists_searches_shows_and_exports(tmp_path):
    from specchat import paths

    store = Store(paths.chats_db())
    a = _chat(store, "Spanish", "¿Qué es el código?", "El código es un conjunto de instrucciones.")
    _chat(store, "Cats", "写一首关于猫的诗", "猫是一种动物 🙂")
    store.close()
    listed = cli("chats", "list")
    assert listed.returncode == 0 and [line.split("\t")[0::3] for line in listed.stdout.splitlines()] == [
        [str(a + 1), "Cats"], [str(a), "Spanish"]]
    found = cli("chats", "search", "codigo")
    assert found.returncode == 0 and found.stdout.splitlines() == [
        f"{a}\tSpanish\tuser #1: ¿Qué es el código?",
        f"{a}\tSpanish\tassistant #2: El código es un conjunto de instrucciones."]
    assert cli("chats", "search", "猫").stdout.count("\tCats\t") == 2
    shown = cli("chats", "show", str(a))
    assert shown.returncode == 0 and shown.stdout.startswith(f"# Spanish (chat {a}, profile tiny)")
    assert "[2 assistant]\nEl código es un conjunto de instrucciones." in shown.stdout
    exported = cli("chats", "export", str(a), str(tmp_path / "out"))
    md, js = exported.stdout.splitlines()
    assert exported.returncode == 0 and md.endswith(".md") and "El código" in open(md).read()
    assert [m["content"] for m in json.load(open(js))["messages"]][0] == "¿Qué es el código?"


@pytest.mark.parametrize("args, message", [
    (("chats", "show", "999"), "conversation 999 does not exist"),
    (("chats", "search", "?!"), "'?!' holds no word to search for"),
    (("chats", "search", "x", "--limit", "0"), "--limit must be ≥ 1"),
])
def test_the_chats_command_says_what_is_wrong_in_one_line(args, message):
    from specchat import paths

    Store(paths.chats_db()).close()
    result = cli(*args)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_the_chats_command_without_a_database_says_so(tmp_path):
    result = cli("chats", "list")
    assert result.returncode == 2 and "no chats yet" in result.stderr and "Traceback" not in result.stderr
