"""Faults the chat store must survive: damaged files, a full disk, a read-only database, two instances at once.

The chats are built from a reply recorded from a real run of the bundled pair (tests/fixtures/recorded_reply.json),
so what is saved is what a real reply saves. The long versions (kill -9 fifty times, storms) are under
benchmarks/stress/.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
import subprocess
import sys
import threading

import pytest

from recorded import load
from specchat.chats.records import ReplyRecord, UserTurn
from specchat.chats.session import ChatSession
from specchat.chats import store as store_module
from specchat.chats.store import DamagedDatabase, Store, StoreError
from specchat.chats.store_opening import open_store

PROMPT, EVENTS = load()


def chat_with_replies(session: ChatSession, replies: int) -> None:
    for i in range(replies):
        session.add_user(f"{PROMPT} ({i})")
        record = session.add_reply("target")
        record.add(EVENTS)
        session.reply_changed(record)


def as_saved(session: ChatSession) -> list[tuple]:
    """The chat as a reader of the database would see it."""
    return [(t.role, t.text, tuple(t.segments) if isinstance(t, ReplyRecord) else None) for t in session.turns]


def read_back(store: Store, chat_id: int) -> list[tuple]:
    session = ChatSession(store, "tiny", None, lambda *_: None)
    session.open(chat_id)
    return as_saved(session)


@pytest.fixture
def full_store(tmp_path):
    """A database with 12 chats of 3 replies each, checkpointed into the main file."""
    path = tmp_path / "chats.sqlite3"
    store = Store(path)
    for _ in range(12):
        chat_with_replies(ChatSession(store, "tiny", None, lambda *_: None), 3)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return path


def test_damaged_files_are_kept_aside_and_never_break_opening_or_reading(full_store, tmp_path):
    """300 damaged copies (truncated anywhere, random bytes anywhere): opening never raises; a damaged file is set
    aside byte for byte and a new database starts; whatever opens cleanly reads every chat or says why in one line."""
    good = full_store.read_bytes()
    rng = random.Random(15)
    outcomes = {"clean": 0, "set aside": 0}
    for case in range(300):
        data = bytearray(good)
        if case % 3 == 0:
            data = data[:rng.randrange(0, len(good))]
        else:
            for _ in range(rng.randrange(1, 20)):
                at = rng.randrange(0, len(good))
                data[at:at + 8] = rng.randbytes(8)
        path = tmp_path / f"case{case}" / "chats.sqlite3"
        path.parent.mkdir()
        path.write_bytes(bytes(data))
        store, problem = open_store(path)
        assert store is not None, problem
        if problem is not None:
            (aside,) = path.parent.glob("chats.sqlite3.damaged-*")
            assert aside.read_bytes() == bytes(data) and str(aside) in problem and str(path) in problem
            assert store.conversations() == []  # a new, empty database
            outcomes["set aside"] += 1
        else:
            for chat in store.conversations():
                try:
                    read_back(store, chat.id)
                except StoreError as exc:
                    assert "\n" not in str(exc) and str(path) in str(exc)
            outcomes["clean"] += 1
        store.close()
    assert outcomes["set aside"] >= 100, outcomes  # every truncation is caught (and much random damage)


def test_a_file_that_is_not_a_database_is_never_overwritten(tmp_path):
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"\x00garbage" * 500)
    with pytest.raises(DamagedDatabase):
        Store(path)
    assert path.read_bytes() == b"\x00garbage" * 500
    first, _ = open_store(path)
    first.close()
    path.write_bytes(b"more garbage" * 10)  # damaged again, the same second: the first copy stays
    second, problem = open_store(path)
    asides = sorted(p.name for p in tmp_path.glob("chats.sqlite3.damaged-*"))
    assert len(asides) == 2 and problem is not None and second is not None


@pytest.mark.parametrize("fault", ["disk full", "read-only"])
def test_a_failing_database_keeps_the_chat_in_memory_and_saving_resumes(tmp_path, fault):
    store = Store(tmp_path / "chats.sqlite3")
    problems: list[tuple[str, bool]] = []
    session = ChatSession(store, "tiny", None, lambda line, error: problems.append((line, error)))
    chat_with_replies(session, 2)
    before = as_saved(session)
    # SQLite's own conditions: its page limit reached gives SQLITE_FULL exactly as a full disk does, and
    # query_only gives SQLITE_READONLY as a read-only file does (root here would write through a chmod).
    if fault == "disk full":
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages}")
    else:
        store.db.execute("PRAGMA query_only = ON")
    chat_with_replies(session, 4)  # each reply is bigger than what is left
    assert len(session.turns) == 12
    assert len(problems) == 1 and problems[0][1] and "\n" not in problems[0][0]  # one message, not one per save
    assert ("database or disk is full" if fault == "disk full" else "readonly") in problems[0][0]
    assert read_back(store, session.id)[:len(before)] == before  # nothing earlier lost
    if fault == "disk full":
        store.db.execute("PRAGMA max_page_count = 1073741823")
    else:
        store.db.execute("PRAGMA query_only = OFF")
    chat_with_replies(session, 1)
    assert problems[-1] == (f"saving to {store.path} works again — nothing of this chat was lost", False)
    assert read_back(store, session.id) == as_saved(session)
    assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_new_or_opened_chat_while_saves_fail_keeps_the_unsaved_turns(tmp_path):
    """Ctrl+N / Ctrl+L (and /new, /open) while the store refuses writes dropped the turns only in memory, then said
    "nothing of this chat was lost": now each is refused in one line and the turns stay, to be saved later."""
    from specchat.errors import Refused

    store = Store(tmp_path / "chats.sqlite3")
    problems: list[tuple[str, bool]] = []
    session = ChatSession(store, "tiny", None, lambda line, error: problems.append((line, error)))
    chat_with_replies(session, 1)
    other = session.id
    session.new(None)
    chat_with_replies(session, 1)
    store.db.execute("PRAGMA query_only = ON")
    chat_with_replies(session, 2)  # two more exchanges, only in memory
    in_memory = as_saved(session)
    for leave in (lambda: session.new(None), lambda: session.open(other), lambda: session.fork(0)):
        with pytest.raises(Refused, match="does not accept writes now — .* once saving works again"):
            leave()
        assert as_saved(session) == in_memory and session.id != other  # nothing dropped, the same chat shown
    store.db.execute("PRAGMA query_only = OFF")
    session.open(other)  # saving works again: this chat is saved, then the other one opens
    assert problems[-1] == (f"saving to {store.path} works again — nothing of this chat was lost", False)
    assert session.id == other
    chats = [c.id for c in store.conversations()]
    (kept,) = [c for c in chats if c != other]
    assert read_back(store, kept) == in_memory


@pytest.mark.recorded
@pytest.mark.usefixtures("isolated_user_dirs")
async def test_ctrl_n_in_the_app_while_saves_fail_keeps_the_chat_on_screen(settings):
    """The same through the app: Ctrl+N with two turns only in memory is one error line, the chat stays shown."""
    from helpers import noticed
    from helpers import SIZE, ask, ready

    from specchat.app.chat_app import make_app

    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask(pilot, "Name a colour.")
        app.session.store.db.execute("PRAGMA query_only = ON")
        await ask(pilot, "And another?")
        shown = [t.text for t in app.session.turns]
        assert len(shown) == 4
        await pilot.press("ctrl+n")
        await pilot.pause(0.2)
        assert [t.text for t in app.session.turns] == shown
        await noticed(pilot, "does not accept writes now — start a new chat once saving works again")
        app.session.store.db.execute("PRAGMA query_only = OFF")
        await pilot.press("ctrl+n")
        await pilot.pause(0.2)
        assert app.session.turns == []
    stored = Store(settings.db_path)
    (chat,) = [c for c in stored.conversations() if stored.messages(c.id)]
    assert [m.content for m in stored.messages(chat.id)] == shown  # all four saved once the store took writes


def test_two_instances_on_one_database_both_keep_working(tmp_path):
    """Two stores (two specchats) save chats at once; a writer holding the lock makes the other wait, not fail."""
    path = tmp_path / "chats.sqlite3"
    stores = [Store(path), Store(path)]
    sessions = [ChatSession(store, "tiny", None, lambda line, error: errors.append(line)) for store in stores]
    errors: list[str] = []

    def chat(session: ChatSession) -> None:
        for _ in range(40):
            chat_with_replies(session, 1)

    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # a third writer holds the lock for a while
    threads = [threading.Thread(target=chat, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    threading.Event().wait(1.0)
    blocker.execute("COMMIT")
    for t in threads:
        t.join()
    assert errors == []
    for session in sessions:
        assert read_back(stores[0], session.id) == as_saved(session) and len(session.turns) == 80
    assert all(isinstance(t, (UserTurn, ReplyRecord)) for s in sessions for t in s.turns)


class LockHolder:
    """Another process holding the database's write lock (BEGIN IMMEDIATE) for ``seconds``, as a second specchat saving
    or a sqlite3 shell left in a transaction does."""

    def __init__(self, path, seconds: float) -> None:
        code = ("import sqlite3, sys, time\n"
                "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                "db.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\ntime.sleep(float(sys.argv[2]))\n"
                "db.execute('COMMIT')")
        self.process = subprocess.Popen([sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout.readline() == "held\n"

    def __enter__(self) -> LockHolder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def short_busy_wait(monkeypatch):
    """Each try at the lock waits 0.3 s instead of 5: a hold of 1.5 s is several tries."""
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.3)


@pytest.mark.usefixtures("short_busy_wait")
def test_a_write_lock_held_by_another_process_is_waited_for_never_damage(full_store):
    """The FTS check at open writes: another process's write lock once made the whole database "damaged"."""
    said: list[str] = []
    before = full_store.read_bytes()
    with LockHolder(full_store, 1.5):
        store, problem = open_store(full_store, said.append)
    assert problem is None and store is not None
    assert said == [f"another specchat is writing to {full_store} — waiting"]
    assert not list(full_store.parent.glob("*.damaged-*")) and full_store.read_bytes()[:100] == before[:100]
    assert len(store.conversations()) == 12
    store.close()


@pytest.mark.recorded
@pytest.mark.usefixtures("short_busy_wait", "isolated_user_dirs")
def test_the_repl_waits_for_another_process_writing_with_a_line(full_store, user_cache):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    with LockHolder(full_store, 1.5):
        repl, _, text = run_repl(ReplSettings(profile="tiny", color=False, db_path=full_store), CTRL_D)
    assert f"another specchat is writing to {full_store} — waiting" in text
    assert "damaged" not in text and repl.session.store is not None
    assert not list(full_store.parent.glob("*.damaged-*"))


@pytest.mark.recorded
@pytest.mark.usefixtures("short_busy_wait", "isolated_user_dirs")
async def test_the_app_waits_for_another_process_writing_with_a_line_and_saves_after(full_store, settings):
    from helpers import SIZE, ask, noticed, ready, wait_until

    from specchat.app.chat_app import make_app

    settings.db_path, settings.resume = full_store, False
    with LockHolder(full_store, 2.0) as holder:
        async with make_app(settings).run_test(size=SIZE) as pilot:
            app = await ready(pilot)
            await noticed(pilot, f"another specchat is writing to {full_store} — waiting")
            await ask(pilot, "Name a colour.")  # in memory meanwhile
            holder.process.wait(30)
            await wait_until(pilot, lambda: app.session.store is not None and app.session.id is not None)
            assert [m.content for m in app.session.store.messages(app.session.id)][0] == "Name a colour."
    assert not list(full_store.parent.glob("*.damaged-*"))


@pytest.mark.usefixtures("isolated_user_dirs")
async def test_a_cancel_and_switch_storm_keeps_cache_record_view_and_store_in_step(settings, target_path):
    """6 rounds (each of the four switches once, then the first two again on a longer chat): send, Esc at a random
    moment, F2 to another profile. benchmarks/stress/storms.py runs this test with
    200 (``SPECCHAT_STORM_ROUNDS``, ``_SEED``, ``_NEW_CHAT_EVERY``), printing a line every 20 rounds and RSS's growth."""
    from specchat import paths
    from specchat.app.chat_app import make_app
    from storms import StormLog, storm, storm_profiles
    from helpers import wait_until

    rounds, seed = int(os.environ.get("SPECCHAT_STORM_ROUNDS", "6")), int(os.environ.get("SPECCHAT_STORM_SEED", "5"))
    new_chat_every = int(os.environ.get("SPECCHAT_STORM_NEW_CHAT_EVERY", "0"))
    profiles = storm_profiles(paths.user_profiles_dir(), target_path)
    settings.max_tokens = 200
    log, started = StormLog(), time.monotonic()
    async with make_app(settings).run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: pilot.app.backend is not None and pilot.app.busy is None)
        for block in range(0, rounds, 20):
            await storm(pilot, min(20, rounds - block), profiles, settings.db_path, random.Random(seed + block), log,
                        new_chat_every)
            print(f"{log.rounds} rounds, {log.cancelled} cancelled mid-reply, switches {log.actions}, RSS"
                  f" {log.rss[-1] / 1e6:.0f} MB, {time.monotonic() - started:.0f} s", flush=True)
    assert log.rounds == rounds and log.actions == {"parameters": (rounds + 1) // 2, "full reload": rounds // 2}, \
        log.actions
    base = log.rss[min(19, len(log.rss) - 1)]
    print(f"{log.rounds} rounds: invariants held after every round; {log.cancelled} replies cancelled by Esc;"
          f" switches {log.actions}; RSS {base / 1e6:.0f} MB after round 20, {log.rss[-1] / 1e6:.0f} MB at the end"
          f" ({(log.rss[-1] - base) / 1e6:+.0f} MB), peak {max(log.rss) / 1e6:.0f} MB")


def test_chats_exports_and_their_folders_are_readable_by_their_owner_only(tmp_path):
    """As shells keep history: 0700 folders, 0600 files — new ones created so, existing ones fixed on start."""
    from specchat.chats.export import export

    def mode(path) -> int:
        return path.stat().st_mode & 0o777

    fresh = tmp_path / "fresh" / "specchat" / "chats.sqlite3"
    store = Store(fresh)
    session = ChatSession(store, "tiny", None, lambda *_: None)
    chat_with_replies(session, 1)
    assert mode(fresh.parent) == 0o700
    assert {p.name: mode(p) for p in fresh.parent.iterdir()} == {
        "chats.sqlite3": 0o600, "chats.sqlite3-wal": 0o600, "chats.sqlite3-shm": 0o600}
    written = export(session, tmp_path / "exports")
    assert mode(tmp_path / "exports") == 0o700 and [mode(p) for p in written] == [0o600, 0o600]
    store.close()

    old = tmp_path / "old" / "specchat"
    old.mkdir(parents=True, mode=0o755)
    old.chmod(0o755)  # as an earlier specchat (or a umask of 022) left them
    (old / "chats.sqlite3").touch(mode=0o644)
    (old / "chats.sqlite3").chmod(0o644)
    Store(old / "chats.sqlite3").close()
    assert mode(old) == 0o700 and mode(old / "chats.sqlite3") == 0o600
