"""How long a search of every chat takes (chats/search.py, SQLite FTS5), as the chat list runs one per keystroke.

Builds a database of CHATS chats of MESSAGES messages each (sentences drawn from a small Spanish, English and Chinese
vocabulary, saved through the chat session as the app saves them, with one version of every tenth reply), then
times the searches a user types on the way to a word — a letter, two, the word — and a two-word search, each the
median of REPEAT runs, and what the index adds to the file.

    python benchmarks/search_speed.py [--chats 200] [--messages 50] [--repeat 9]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from specchat.chats.session import ChatSession
from specchat.chats.store import Store

WORDS = ("código decodificación especulativa modelo borrador verifica tokens memoria contexto respuesta ejemplo"
         " the quick brown fox lighthouse keeper bottle message river planet tea coffee haiku 猫 诗 一种 动物").split()


def build(path: Path, chats: int, messages: int, rng: random.Random) -> Store:
    store = Store(path)
    for c in range(chats):
        session = ChatSession(store, "tiny", None, lambda line, error: None)
        for m in range(messages):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
            if m % 2 == 0:
                session.add_user(text)
                continue
            if m % 20 == 19:  # a version kept unshown
                finished_reply(session, text)
                session.branch(len(session.turns) - 1)
            finished_reply(session, text)
    return store


def finished_reply(session: ChatSession, text: str) -> None:
    record = session.add_reply("t")
    record.segments, record.tokens, record.finish_reason = [(text, "target")], [1], "stop"
    session.reply_changed(record)


def timed(store: Store, words: str, repeat: int) -> tuple[float, int]:
    times, hits = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        hits = len(store.search(words, 100))
        times.append(time.perf_counter() - started)
    return statistics.median(times), hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chats.sqlite3"
        started = time.perf_counter()
        store = build(path, args.chats, args.messages, random.Random(0))
        built = time.perf_counter() - started
        (messages,) = store.db.execute("SELECT count(*) FROM messages").fetchone()
        (versions,) = store.db.execute("SELECT count(*) FROM branches").fetchone()
        index_pages = sum(store.db.execute(f"SELECT count(*) FROM {t}_data").fetchone()[0]
                          for t in ("messages_fts", "branches_fts"))
        (page,) = store.db.execute("PRAGMA page_size").fetchone()
        print(f"{args.chats} chats, {messages:,} messages, {versions:,} versions kept unshown; built in {built:.1f} s;"
              f" file {path.stat().st_size / 1e6:.1f} MB, of it the search index about {index_pages * page / 1e6:.1f} MB")
        for words in ("c", "co", "codigo", "codigo especul", "猫", "nothing-like-this"):
            seconds, hits = timed(store, words, args.repeat)
            print(f"  {words!r:22} {seconds * 1000:7.1f} ms  ({hits} hits shown, at most 100)")
        store.close()


if __name__ == "__main__":
    main()
