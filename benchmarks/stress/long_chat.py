"""A 500-turn conversation with context trimming active: time per turn and the size of every in-memory structure.

The chat runs the way the app runs it — a ChatSession saving to a real SQLite file, the in-process backend answering
the session's messages — with a context small enough that old turns are trimmed after the first few dozen. Every
50 turns it prints the median time per turn, the tokens prefilled per turn, and the sizes that must stay bounded:
the engine's conversation, its KV cache, the n-gram index, the telemetry's sparkline, this process's RSS (the
session's turns are the chat itself and grow with it, as they must).

    python benchmarks/stress/long_chat.py [--turns 500] [--n-ctx 1024] [--tokens 24] [--profile ngram]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from specchat.backends import open_backend
from specchat.chats.session import ChatSession
from specchat.chats.store import Store
from specchat.engine import ContextTrimmed, ReplyFinished
from specchat.profiles import load_profile, run_config
from specchat.telemetry.live import LiveTelemetry
from specchat.telemetry.memory import rss_bytes

QUESTIONS = ["What is {n} plus {n}?", "Name a word that rhymes with {w}.", "Say {w} in French.",
             "Repeat after me: the {w} number {n} is here.", "Give one fact about the number {n}."]
WORDS = ["cat", "tree", "light", "stone", "river", "cloud", "bread", "song"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--n-ctx", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--profile", default="ngram")
    args = parser.parse_args()
    config = dataclasses.replace(run_config(load_profile(args.profile)), n_ctx=args.n_ctx)
    backend = open_backend(config)
    telemetry = LiveTelemetry()
    times: list[float] = []
    prefills: list[int] = []
    trims = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "chats.sqlite3")
        session = ChatSession(store, args.profile, config.system_prompt, lambda line, _error: print(line))
        for turn in range(1, args.turns + 1):
            text = QUESTIONS[turn % len(QUESTIONS)].format(n=turn, w=WORDS[turn % len(WORDS)])
            history = session.engine_messages(backend.target_id)
            session.add_user(text)
            record = session.add_reply(backend.target_id)
            started = time.perf_counter()
            for event in backend.answer(history, text, max_tokens=args.tokens):
                telemetry.consume([event])
                record.add([event])
                trims += isinstance(event, ContextTrimmed)
                if isinstance(event, ReplyFinished):
                    prefills.append(event.stats.prefill_tokens)
                session.reply_changed(record)
            times.append(time.perf_counter() - started)
            if turn % 50 == 0:
                engine = backend.engine
                window = times[-50:]
                print(f"turns {turn - 49}–{turn}: median {statistics.median(window) * 1000:.0f} ms/turn, prefill"
                      f" median {statistics.median(prefills[-50:]):.0f} tokens (max {max(prefills[-50:])}),"
                      f" trims so far {trims}; engine messages {len(engine.messages)}, KV cache"
                      f" {len(engine.ctx.cached)}/{args.n_ctx}, n-gram keys {engine.speculation.ngram.index_size},"
                      f" sparkline {len(telemetry.spark)} points, session turns {len(session.turns)},"
                      f" RSS {rss_bytes() / 1e6:.0f} MB", flush=True)
        store.close()
    backend.close()
    first, last = statistics.median(times[:50]), statistics.median(times[-50:])
    print(f"{args.turns} turns: median {first * 1000:.0f} ms/turn over the first 50, {last * 1000:.0f} ms over the"
          f" last 50 ({last / first:.2f}×); {trims} trims")


if __name__ == "__main__":
    main()
