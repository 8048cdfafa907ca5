"""The "suffix" method: drafts from this chat and from every stored reply of earlier chats (``engine.drafters.stored_chats``
over ``chats.recall``), through the controller the app and the REPL share, with a real chats database.

The store is seeded the way a user fills it: chats answered earlier, some by the draft model standing in for another
target (their replies differ from this target's, so drafts from them are rejected part of the way: the exactness
checks judge real rejections), some by this target. Every reply must still be plain decoding's, token for token."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest

from backend_kinds import MULTIBYTE, SYSTEM, TURNS, ask
from helpers import THREADS
from specchat import paths
from specchat.backends.lookup_cache import read_lookup_cache
from specchat.chats.controller import ChatController
from specchat.chats.recall import stored_replies
from specchat.chats.replay import Replay, judgement_of, step_lines
from specchat.chats.session import ChatSession
from specchat.chats.store import Store
from specchat.chats.trace import events_of, row_of
from specchat.engine import Message
from specchat.engine.drafters import METHODS
from specchat.engine.drafters.stored_chats import document_key
from specchat.engine.drafters.stored_chats_cache import TokenCache
from specchat.engine.events import DraftRejected, DraftSource, ReplyStarted, StepVerified
from specchat.telemetry.live import LiveTelemetry

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")

STORY = "Write a very long story about a dragon and a knight."
SEA = ("Tell me about the sea.", "And about mountains?", "What about rivers?", "And deserts?")


def profile_text(method: str, *, target: str = "embedded:target", n_ctx: int = 2048) -> str:
    model = f'model = "embedded:draft"\nthreads = {THREADS}\n' if METHODS[method].draft_model else ""
    return (f'[target]\nmodel = "{target}"\nn_ctx = {n_ctx}\nthreads = {THREADS}\nadapt_threads = false\n'
            f'[draft]\nmethod = "{method}"\n{model}n_max = 4\n[sampling]\ntemperature = 0.0\n'
            f'[chat]\nsystem_prompt = "{SYSTEM}"\n')


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def open_controller(db: Path, profile: Path, max_tokens: int = 40) -> ChatController:
    controller = ChatController(Store(db), str(profile), lambda line, error: None, max_tokens=max_tokens)
    controller.switcher.profile_switched(controller.switcher.switch_profile(str(profile)))
    return controller


def close(controller: ChatController) -> None:
    controller.close()
    controller.session.store.close()  # as a front end closes its store: the WAL is written back


def chat(controller: ChatController, texts: tuple[str, ...]) -> None:
    controller.new_chat()
    for text in texts:
        ask(controller, text)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, draft_path, measured_costs) -> Path:
    """A chats database with earlier chats: every prompt of this module answered by another model (the draft GGUF),
    then the first turns answered by this target."""
    folder = tmp_path_factory.mktemp("seed")
    db = folder / "chats.sqlite3"
    with pytest.MonkeyPatch.context() as patch:  # a module's fixture: the per-test isolation is not in place yet
        patch.setenv("HOME", str(folder / "home"))
        patch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
        cache = folder / "home" / ".cache" / "specchat"
        cache.mkdir(parents=True)
        for f in draft_path.parent.glob(draft_path.name + "*"):
            shutil.copy(f, cache / f.name)
        patch.setattr(paths, "verify_costs_file", lambda: measured_costs)
        patch.setattr(paths, "auto_learned_file", lambda: folder / "auto-memory.json")
        other = open_controller(db, write(folder, "other", profile_text("none", target="embedded:draft")), 64)
        try:
            chat(other, TURNS)
            chat(other, MULTIBYTE)
            chat(other, SEA)
            chat(other, (STORY,))
        finally:
            close(other)
        same = open_controller(db, write(folder, "same", profile_text("none")))
        try:
            chat(same, TURNS[:2])
        finally:
            close(same)
    return db


class Run:
    """A controller on a copy of the seeded store, the suffix profile loaded and the index over earlier chats built."""

    def __init__(self, tmp_path: Path, seeded: Path, *, n_ctx: int = 2048, max_tokens: int = 40,
                 method: str = "suffix") -> None:
        self.db = tmp_path / "chats.sqlite3"
        shutil.copy(seeded, self.db)
        self.controller = open_controller(self.db, write(tmp_path, "suffix", profile_text(method, n_ctx=n_ctx)),
                                          max_tokens)
        assert self.engine.wait_for_stored_chats(60)
        assert self.engine.stored_chats.index is not None and self.engine.stored_chats.index.documents >= 10
        self.events: list = []

    @property
    def engine(self):
        return self.controller.backend.engine

    def ask(self, text: str, **options):
        return ask(self.controller, text, on_event=self.events.append, **options)

    def steps(self, source: DraftSource) -> list[StepVerified]:
        return [e for e in self.events if isinstance(e, StepVerified) and e.source is source]

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *_exc: object) -> None:
        close(self.controller)


def chats(db: Path) -> list:
    store = Store(db)
    try:
        return store.conversations()  # the most recently updated first
    finally:
        store.close()


def stored_origins(db: Path) -> set[tuple[int, int]]:
    return {reply.origin for reply in stored_replies(db)}


def counted(events: list) -> None:
    """Each step's draft is its accepted tokens and its rejected tail, no more, no fewer."""
    rejected = 0
    for event in events:
        if isinstance(event, DraftRejected):
            rejected += len(event.tokens)
        elif isinstance(event, StepVerified):
            assert event.drafted == event.accepted + rejected + event.ignored, event
            assert (event.source is None) == (event.drafted == 0)
            rejected = 0


@pytest.mark.parametrize("method", ["suffix", "suffix+draft"])
def test_greedy_turns_and_multibyte_replies_drafted_from_earlier_chats_equal_plain_decoding(tmp_path, seeded, plain,
                                                                                             method):
    """"suffix+draft" (the default profile's method) with a fixed draft length: the draft model guesses wherever no
    copy is worth verifying, so all three sources are judged in one reply."""
    with Run(tmp_path, seeded, method=method) as run:
        for texts in (TURNS, MULTIBYTE):
            run.controller.new_chat()
            for text, expected in zip(texts, plain.chat(texts)):
                record = run.ask(text)
                assert (record.tokens, record.text) == expected
        history = run.steps(DraftSource.STORED_CHAT)
        assert history and {s.origin for s in history} <= stored_origins(seeded)
        assert sum(s.accepted for s in history) > 0
        assert sum(s.drafted - s.accepted for s in history) > 0  # rejections were judged, not only agreement
        if method == "suffix+draft":
            guessed = run.steps(DraftSource.MODEL)
            assert len(guessed) > 10 and 0 < sum(s.accepted for s in guessed) < sum(s.drafted for s in guessed)
        counted(run.events)


def test_a_question_asked_again_in_a_new_chat_is_drafted_from_its_earlier_answer(tmp_path, seeded, plain):
    with Run(tmp_path, seeded) as run:
        run.controller.new_chat()
        record = run.ask(TURNS[0])
        assert (record.tokens, record.text) == plain.chat(TURNS[:1])[0]
        history = run.steps(DraftSource.STORED_CHAT)
        # This target's own earlier answer is the best match: most of the reply comes from it.
        assert sum(s.accepted for s in history) >= len(record.tokens) // 2
        # Drafted from the chat this target answered (the newest), not the other model's.
        assert {s.origin[0] for s in history} == {chats(seeded)[0].id}


def test_a_cancelled_reply_then_the_next_turn(tmp_path, seeded, plain):
    with Run(tmp_path, seeded, max_tokens=200) as run:
        run.controller.new_chat()
        partial = run.ask(STORY, stop_after=10)
        assert partial.finish_reason == "cancelled"
        follow = run.ask("Shorter, please.")
        history = [Message("system", SYSTEM), Message("user", STORY),
                   Message("assistant", partial.text, list(partial.tokens), "cancelled")]
        assert (follow.tokens, follow.text) == plain.answer(history, "Shorter, please.", max_tokens=200)
        counted(run.events)


def test_regenerate_and_ab(tmp_path, seeded, plain):
    with Run(tmp_path, seeded) as run:
        run.controller.new_chat()
        first = run.ask(TURNS[0])
        exchange = run.controller.regenerate()
        events: list = []
        assert exchange.run(events.append) is None
        run.controller.absorb(events)
        again = run.controller.session.last_reply
        assert (again.tokens, again.text) == (first.tokens, first.text) == plain.chat(TURNS[:1])[0]
        run.ask(TURNS[1])
        result = run.controller.compare().run()
        assert result is not None and result.identical is True and result.spec["drafted"] > 0
        assert run.controller.backend.speculation_state().active


def test_a_trimmed_context_keeps_its_window(tmp_path, seeded, plain):
    with Run(tmp_path, seeded, n_ctx=256, max_tokens=48) as run:
        run.controller.new_chat()
        for text, expected in zip(SEA, plain.chat(SEA, n_ctx=256, max_tokens=48)):
            record = run.ask(text)
            assert (record.tokens, record.text) == expected
        assert run.steps(DraftSource.STORED_CHAT)


def test_a_deleted_chat_is_drafted_from_no_more(tmp_path, seeded):
    with Run(tmp_path, seeded) as run:
        run.controller.new_chat()
        run.ask(TURNS[0])
        used = {s.origin[0] for s in run.steps(DraftSource.STORED_CHAT)}
        assert used
        for chat_id in used:
            run.controller.session.store.delete(chat_id)
        run.events.clear()
        run.controller.new_chat()
        run.ask(TURNS[0])
        assert not {s.origin[0] for s in run.steps(DraftSource.STORED_CHAT)} & used


# -- privacy: a private chat's text, and a deleted message, are never drafted in another chat --------------------

VAULT = "The code for the vault is 7319. Repeat the code for the vault three times."


def kept_drafts(run: Run) -> int:
    """Tokens drafted from replies this process kept from other chats."""
    return sum(s.drafted for s in run.steps(DraftSource.REMEMBERED))


def mark_private(db: Path, chat_id: int) -> None:
    """As `specchat chats private ID` does it: another connection to the store the front end has open."""
    other = Store(db)
    try:
        other.set_private(chat_id, True)
    finally:
        other.close()


@pytest.mark.parametrize("private", [False, True])
def test_a_private_chats_replies_are_not_drafted_in_another_chat_of_the_same_session(tmp_path, seeded, plain,
                                                                                      private):
    """A chat made private by another process while this one has the store open, opened and asked again, then the
    same question in a new chat: unless private (the control), the new chat drafts from the reply this process
    kept; private, nothing of it is drafted there, shown as a rejected tail or stored with the new chat."""
    with Run(tmp_path, seeded) as run:
        controller = run.controller
        controller.new_chat()
        run.ask(VAULT)
        chat = controller.session.id
        if private:
            mark_private(run.db, chat)
        controller.open_chat(chat)
        run.ask(VAULT)
        assert controller.session.private is private
        run.events.clear()
        controller.new_chat()
        record = run.ask(VAULT)
        assert (record.tokens, record.text) == plain.chat((VAULT,))[0]
        if not private:
            assert kept_drafts(run) > 0
            return
        assert kept_drafts(run) == 0
        assert not any(s.origin and s.origin[0] == chat for s in run.steps(DraftSource.STORED_CHAT))
        assert chat not in {origin[0] for origin in stored_origins(run.db)}  # nor at the next start


def test_a_fork_of_a_private_chat_is_private_and_says_so(tmp_path, seeded):
    with Run(tmp_path, seeded) as run:
        controller = run.controller
        controller.new_chat()
        run.ask(VAULT)
        chat = controller.session.id
        controller.session.store.set_private(chat, True)
        controller.fork(1)
        fork = controller.session.id
        assert fork != chat and controller.session.private
        assert {row.id: row.private for row in chats(run.db)}[fork] is True
        assert not {origin[0] for origin in stored_origins(run.db)} & {chat, fork}
        run.events.clear()
        controller.new_chat()
        run.ask(VAULT)
        assert kept_drafts(run) == 0


def test_a_deleted_stored_reply_is_drafted_from_no_more_in_that_process(tmp_path, seeded):
    with Run(tmp_path, seeded) as run:
        controller = run.controller
        controller.new_chat()
        run.ask(TURNS[0])
        used = {s.origin for s in run.steps(DraftSource.STORED_CHAT)}
        assert used
        controller.session.store.delete(controller.session.id)  # (what this process kept of the reply goes with it)
        for chat_id in {origin[0] for origin in used}:  # its replies deleted, its first question kept
            controller.open_chat(chat_id)
            controller.delete_from(1)
        run.events.clear()
        controller.new_chat()
        run.ask(TURNS[0])
        assert not {s.origin for s in run.steps(DraftSource.STORED_CHAT)} & used


def test_a_deleted_reply_this_process_kept_is_drafted_from_no_more(tmp_path, seeded):
    with Run(tmp_path, seeded) as run:
        controller = run.controller
        controller.new_chat()
        run.ask(VAULT)
        controller.delete_from(1)  # the reply
        run.events.clear()
        controller.new_chat()
        run.ask(VAULT)
        assert kept_drafts(run) == 0


def private_vault(tmp_path: Path, seeded: Path) -> tuple[Path, int]:
    """A copy of the seeded store with one chat more, newest, that asked VAULT — made private since."""
    with Run(tmp_path, seeded) as run:
        run.controller.new_chat()
        run.ask(VAULT)
        chat = run.controller.session.id
    mark_private(run.db, chat)
    return run.db, chat


def sources_of(reply) -> set[str]:
    return {json.loads(line).get("source") for line in reply.trace} - {None}


def test_the_repl_keeps_a_private_chat_and_its_fork_to_themselves(tmp_path, seeded):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    db, chat = private_vault(tmp_path, seeded)
    settings = ReplSettings(profile=str(write(tmp_path, "suffix", profile_text("suffix"))), color=False, db_path=db,
                            max_tokens=40)  # as the app's and ask's versions of this test
    repl, _, text = run_repl(settings, f"/open {chat}\r", f"{VAULT}\r", "/fork 2\r", f"{VAULT}\r", "/new\r",
                             f"{VAULT}\r", CTRL_D, pace=0.1)
    assert "(a private chat: never drafted from in another one)" in text
    assert "— private, as the chat it came from: never drafted from in another chat" in text
    newest = chats(db)
    fork = next(row for row in newest if row.title.endswith("(fork)"))
    assert fork.private and fork.id != chat
    replies = [m for m in Store(db).messages(newest[0].id) if m.role == "assistant"]
    assert newest[0].id not in (chat, fork.id) and "remembered" not in sources_of(replies[0])


@pytest.mark.usefixtures("isolated_user_dirs")
async def test_the_app_keeps_a_private_chat_and_its_fork_to_themselves(tmp_path, settings, seeded):
    from helpers import SIZE, ask as ask_in_app, noticed, wait_until

    from specchat.app.chat_app import make_app

    db, chat = private_vault(tmp_path, seeded)
    settings.db_path, settings.resume = db, True  # the private chat is the newest: it is reopened
    settings.profile = str(write(tmp_path, "suffix", profile_text("suffix")))
    settings.max_tokens = 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        assert app.session.id == chat and app.session.private
        await ask_in_app(pilot, VAULT)
        await pilot.press("alt+f")  # fork at the last message
        await pilot.pause(0.2)
        await noticed(pilot, "private, as the chat it came from")
        assert app.session.private and app.session.id != chat
        await pilot.press("ctrl+n")
        view = await ask_in_app(pilot, VAULT)
        assert not app.session.private and "remembered" not in sources_of_record(view.record)


def sources_of_record(record) -> set[str]:
    return {row.get("source") for row in record.trace if row.get("type") == "step"} - {None}


def test_ask_drafts_nothing_from_a_private_chat_nor_its_fork(tmp_path, seeded):
    db, chat = private_vault(tmp_path, seeded)
    store = Store(db)
    try:
        session = ChatSession(store, "p", None, lambda *_: None)
        session.open(chat)
        session.fork(1)  # the question and its reply, private as the chat they came from
        fork = session.id
    finally:
        store.close()
    profile = write(tmp_path, "suffix", profile_text("suffix"))
    env = front_end_env(tmp_path / "ask", db)
    result = subprocess.run([sys.executable, "-m", "specchat", "ask", "--json", "--profile", str(profile),
                             "--max-tokens", "40", VAULT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    origins = {r["origin"][0] for r in rows if r["type"] == "step" and r.get("source") == "history"}
    assert not origins & {chat, fork}


def test_a_question_asked_the_moment_a_start_ends_is_drafted_from_the_stored_chats(tmp_path, seeded):
    """Issue #47: the index waited for the start's plain reference and the reply came first, so the first reply of a
    new process drafted from its own chat only (1.0× where 8 s later it ran 1.82×). A few stored chats index in well
    under a second: the start's measurement waits for them, and the first reply has them."""
    db = tmp_path / "chats.sqlite3"
    shutil.copy(seeded, db)
    controller = open_controller(db, write(tmp_path, "suffix", profile_text("suffix")))
    try:
        events: list = []
        controller.new_chat()
        ask(controller, TURNS[0], on_event=events.append)  # at once: no wait for the index
        started = next(e for e in events if isinstance(e, ReplyStarted))
        assert started.stored_chats == ""  # nothing left to index
        drafted = [e for e in events if isinstance(e, StepVerified) and e.source is DraftSource.STORED_CHAT]
        reply = controller.session.last_reply
        assert drafted and sum(e.accepted for e in drafted) >= 0.9 * (len(reply.tokens) - len(drafted) - 1)
    finally:
        close(controller)


def test_the_first_reply_does_not_wait_for_the_index(make_engine):
    """The earlier chats are read on the index's own thread: a reply runs to its end while the read is still held,
    and says so."""
    release = threading.Event()

    def read():
        release.wait(60)
        return []

    engine = make_engine("suffix", n_max=4)
    engine.learn_stored_chats(read)
    try:
        events = list(engine.reply(TURNS[0], max_tokens=16))
        assert events[-1].finish_reason in ("stop", "length") and not engine.wait_for_stored_chats(0)
        assert engine.stored_chats.index is None
        started = next(e for e in events if isinstance(e, ReplyStarted))
        assert started.stored_chats.startswith("the stored chats are still being indexed")
        live = LiveTelemetry()
        live.consume(events)
        assert live.stored_chats == started.stored_chats
    finally:
        release.set()
    assert engine.wait_for_stored_chats(60) and engine.stored_chats.index is not None


def test_a_start_indexes_the_stored_chats_before_it_times_anything(target_path, tmp_path, seeded, monkeypatch):
    """Issue #47: the first reply of a new process drafted nothing from the stored chats, whose index waited for the
    start's verify sweep and plain reference. Given with the models, the stored chats are indexed first (a timing waits
    up to a second for them), and the sweep after — a first start here, with no kept curve, times one."""
    from specchat.engine import Engine, EngineConfig, ModelSettings, SpecConfig
    from specchat.engine import speculation
    from specchat.engine.phases import told

    monkeypatch.setattr(paths, "verify_costs_file", lambda: tmp_path / "fresh-costs.json")
    order: list[str] = []
    sweep = speculation.measure_verify_cost

    def timed_sweep(*args, **kwargs):  # watched, not replaced: the sweep runs as it does for a user
        order.append("sweep")
        return sweep(*args, **kwargs)

    def read():
        yield from stored_replies(seeded)
        order.append("read")

    monkeypatch.setattr(speculation, "measure_verify_cost", timed_sweep)
    config = EngineConfig(target=ModelSettings(target_path, threads=THREADS), spec=SpecConfig("suffix", n_max=4),
                          system_prompt=SYSTEM)
    with told(order.append):
        engine = Engine(config, stored_chats_read=read)
    try:
        def first(start: str) -> int:  # where a mark or a phase's line is first in ``order``
            return next(i for i, said in enumerate(order) if said.startswith(start))

        assert first("indexing the stored chats") < first("read") < first("sweep") and engine.wait_for_stored_chats(0)
        assert engine.stored_chats.index is not None and engine.stored_chats.index.documents > 1
    finally:
        engine.close()


def test_the_index_builds_only_between_replies(make_engine, seeded):
    """Beside a reply the build took its cores (36 tok/s against 124 alone here): it waits while one runs."""
    engine = make_engine("suffix", n_max=4)
    pulled = []

    def read():
        for reply in stored_replies(seeded):
            pulled.append(reply)
            yield reply

    reply = engine.reply(STORY, max_tokens=64)
    next(e for e in reply if isinstance(e, StepVerified))  # the reply is under way
    engine.learn_stored_chats(read)
    assert not engine.wait_for_stored_chats(1.0) and len(pulled) <= 1 and engine.stored_chats.index is None
    assert list(reply)[-1].finish_reason in ("stop", "length", "loop")
    assert engine.wait_for_stored_chats(60) and engine.stored_chats.index.documents == len(pulled) > 1


def test_a_failed_read_is_one_line_and_the_chat_goes_on(make_engine, tmp_path):
    engine = make_engine("suffix", n_max=4)
    engine.learn_stored_chats(lambda: stored_replies(tmp_path / "missing.sqlite3"))
    assert engine.wait_for_stored_chats(60)
    assert engine.stored_chats.index is None and engine.stored_chats.problem.startswith("earlier chats are not drafted from: ")
    assert "\n" not in engine.stored_chats.problem
    assert list(engine.reply(TURNS[0], max_tokens=8))[-1].finish_reason in ("stop", "length")


def test_the_trace_round_trips_a_drafts_source(make_engine, tmp_path, seeded):
    engine = make_engine("suffix", n_max=4)
    engine.learn_stored_chats(partial(stored_replies, seeded))
    assert engine.wait_for_stored_chats(60)
    events = list(engine.reply(TURNS[0], max_tokens=40, top=3))
    rows = [row_of(e) for e in events]
    assert {"history"} <= {r.get("source") for r in rows if r["type"] == "step"}
    assert any("origin" in r for r in rows if r["type"] == "token")
    again = list(events_of(json.loads(json.dumps(r)) for r in rows))
    assert [row_of(e) for e in again] == rows
    old = [{k: v for k, v in r.items() if k not in ("source", "origin")} for r in rows]  # rows stored before
    assert all(e.source is None for e in events_of(old) if isinstance(e, StepVerified))


async def test_the_app_shows_where_a_draft_came_from(tmp_path, settings, seeded, plain):
    """A question asked again in the app: the reply is plain decoding's, the sidebar counts what earlier chats
    drafted, and the inspector and the replay name the stored reply each draft was copied from."""
    from helpers import SIZE, ask as ask_in_app, wait_until

    from specchat.app.chat_app import make_app
    from specchat.app.chat.inspector import Inspector
    from specchat.app.sidebar.sidebar import Sidebar

    shutil.copy(seeded, settings.db_path)
    settings.resume = False  # a new chat, not the last one stored
    settings.profile = str(write(tmp_path, "suffix", profile_text("suffix")))
    settings.max_tokens = 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        assert app.backend.engine.wait_for_stored_chats(60)
        view = await ask_in_app(pilot, TURNS[0])
        assert (view.record.tokens, view.record.text) == plain.chat(TURNS[:1])[0]
        await pilot.pause()
        assert "drafted from: stored chats " in app.query_one(Sidebar).plain
        accepted = [i for i, (_, kind) in enumerate(view.record.segments) if kind == "accepted"]
        origin = judgement_of(view.record, accepted[0]).origin
        assert origin in stored_origins(seeded)
        inspector = app.query_one(Inspector)
        inspector.open(view, accepted[0])
        await pilot.pause()
        assert f"copied from a stored reply of chat {origin[0]}: " in str(inspector.render())
        assert inspector.copy_shown is None  # nothing in this chat to underline
        replay = Replay.of(view.record.trace)
        lines = [line for i in range(len(replay.steps)) for line in step_lines(replay, i)]
        assert any(f"from a stored reply of chat {origin[0]}" in line for line in lines)
        # The app gives its session the store after making the controller: a chat deleted there is forgotten too.
        app.session.store.delete(origin[0])
        assert origin[0] in app.backend.engine.stored_chats.forgotten


def front_end_env(tmp_path: Path, seeded: Path) -> dict[str, str]:
    """A user's folders for a subprocess, the seeded chats where specchat keeps them."""
    data = tmp_path / "data" / "specchat"
    data.mkdir(parents=True)
    shutil.copy(seeded, data / "chats.sqlite3")
    return {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data")}


def test_greedy_turns_in_the_repl_with_earlier_chats_stored(tmp_path, seeded, plain):
    profile = write(tmp_path, "suffix", profile_text("suffix"))
    env = front_end_env(tmp_path, seeded)
    result = subprocess.run([sys.executable, "-m", "specchat", "repl", "--profile", str(profile), "--max-tokens", "40"],
                            input="\n".join(TURNS) + "\n", env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    store = Store(tmp_path / "data" / "specchat" / "chats.sqlite3")
    try:
        newest = store.conversations()[0]
        replies = [m for m in store.messages(newest.id) if m.role == "assistant"]
    finally:
        store.close()
    assert [(r.tokens, r.content) for r in replies] == plain.chat(TURNS)
    sources = {json.loads(line).get("source") for r in replies for line in r.trace}
    assert sources - {None} <= {s.value for s in DraftSource} and sources - {None}


def test_ask_reads_the_stored_chats(tmp_path, seeded, plain):
    """A script's one reply waits for the index: a question asked before is drafted from its earlier answer."""
    profile = write(tmp_path, "suffix", profile_text("suffix"))
    env = front_end_env(tmp_path, seeded)
    result = subprocess.run([sys.executable, "-m", "specchat", "ask", "--json", "--profile", str(profile),
                             "--max-tokens", "40", TURNS[0]], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["token"] for r in rows if r["type"] == "token"] == plain.chat(TURNS[:1])[0][0]
    history = [r for r in rows if r["type"] == "step" and r.get("source") == "history"]
    assert history and all(tuple(r["origin"]) in stored_origins(seeded) for r in history)


def test_the_tokens_of_stored_replies_are_kept_between_starts_and_a_deleted_chat_leaves_them(make_engine, tmp_path,
                                                                                                seeded):
    db = tmp_path / "chats.sqlite3"
    shutil.copy(seeded, db)
    first = make_engine("suffix", n_max=4)
    first.learn_stored_chats(partial(stored_replies, db))
    assert first.wait_for_stored_chats(60)
    cache = paths.cache_dir() / "history" / f"{first.target.identity}.npz"
    assert cache.stat().st_mode & 0o777 == 0o600
    kept = TokenCache(cache)
    replies = list(stored_replies(db))
    for reply in replies:  # every reply is in the file, as its index holds it
        assert kept.get(document_key(reply, first.target.identity, first.template)[0]) is not None
    expected = first.stored_chats.index.text.tolist()
    gone = replies[0].origin[0]
    store = Store(db)
    store.delete(gone)
    store.close()
    second = make_engine("suffix", n_max=4)
    second.learn_stored_chats(partial(stored_replies, db))
    assert second.wait_for_stored_chats(60)
    left = [r for r in replies if r.origin[0] != gone]
    assert second.stored_chats.index.documents == len(left)
    assert len(second.stored_chats.index.text) < len(expected)
    again = TokenCache(cache)
    assert again.get(document_key(replies[0], first.target.identity, first.template)[0]) is None


def test_a_private_chat_is_drafted_from_no_more_now_or_at_the_next_start(tmp_path, seeded):
    with Run(tmp_path, seeded) as run:
        run.controller.new_chat()
        run.ask(TURNS[0])
        used = {s.origin[0] for s in run.steps(DraftSource.STORED_CHAT)}
        assert used
        env = front_end_env(tmp_path / "cli", run.db)
        for chat_id in used:  # as a user marks them: the command line, on the database the app has open
            result = subprocess.run([sys.executable, "-m", "specchat", "chats", "private", str(chat_id)], env=env,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0 and "private — not drafted from in other chats" in result.stdout, result
        cli_db = tmp_path / "cli" / "data" / "specchat" / "chats.sqlite3"
        assert not {r.origin[0] for r in stored_replies(cli_db)} & used  # the next start reads none of them
        for chat_id in used:  # and the app marks them in its own store: forgotten at once
            run.controller.session.store.set_private(chat_id, True)
        run.events.clear()
        run.controller.new_chat()
        run.ask(TURNS[0])
        assert not {s.origin[0] for s in run.steps(DraftSource.STORED_CHAT)} & used


def test_a_damaged_token_cache_is_read_as_empty_and_written_anew(make_engine, tmp_path, seeded):
    engine = make_engine("suffix", n_max=4)
    cache = paths.cache_dir() / "history" / f"{engine.target.identity}.npz"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"PK\x03\x04 not a zip at all")
    engine.learn_stored_chats(partial(stored_replies, seeded))
    assert engine.wait_for_stored_chats(60) and engine.stored_chats.problem == ""
    assert engine.stored_chats.index.documents == len(list(stored_replies(seeded)))
    reply = next(iter(stored_replies(seeded)))
    assert TokenCache(cache).get(document_key(reply, engine.target.identity, engine.template)[0])  # written anew


def server_flags(backend) -> list[bytes]:
    return Path(f"/proc/{backend.pid}/cmdline").read_bytes().split(b"\0")


def test_suffix_on_a_managed_llama_server_drafts_from_lookup_caches_of_the_stored_chats(tmp_path, seeded, plain,
                                                                                       llama_server):
    """"suffix" through a llama-server specchat starts is llama.cpp's ngram-cache, given the stored replies as its
    lookup caches (backends/lookup_cache.py): written off the engine thread, the server restarted with them before
    the next reply. Greedy output stays plain decoding's over several turns and multi-byte text; a deleted chat's
    caches are dropped before the next reply, and written again without it."""
    db = tmp_path / "chats.sqlite3"
    shutil.copy(seeded, db)
    profile = profile_text("suffix") + f'[backend]\nkind = "llama-server"\nbinary = "{llama_server}"\n'
    controller = open_controller(db, write(tmp_path, "server-suffix", profile))
    try:
        backend = controller.backend
        assert b"--lookup-cache-static" not in server_flags(backend)  # being written: the first reply never waits
        backend.learn_stored_chats(partial(stored_replies, db), wait=True)  # as `ask` waits, so the test knows when
        flags = server_flags(backend)
        static = Path(flags[flags.index(b"--lookup-cache-static") + 1].decode())
        assert b"--lookup-cache-dynamic" in flags and read_lookup_cache(static)
        drafted = 0
        for texts in (TURNS, MULTIBYTE):
            controller.new_chat()
            for text, expected in zip(texts, plain.chat(texts)):
                record = ask(controller, text)
                assert (record.tokens, record.text) == expected
                drafted += record.stats["drafted"]
        assert drafted > 0
        controller.session.store.delete(chats(seeded)[0].id)
        controller.new_chat()
        record = ask(controller, MULTIBYTE[0])
        assert (record.tokens, record.text) == plain.chat(MULTIBYTE[:1])[0]
        assert b"--lookup-cache-static" not in server_flags(backend)  # the reply after the deletion: no caches
        backend.learn_stored_chats(partial(stored_replies, db), wait=True)
        assert b"--lookup-cache-static" in server_flags(backend)
    finally:
        close(controller)
    assert not static.parent.exists()  # the caches hold the chats' n-grams: gone with the backend
