"""What drafting from every stored chat costs (method "suffix", ``engine.drafters.stored_chats``): reading the replies,
tokenizing them and building the index at start, its memory, and one draft lookup per verify step beside the plain
decoding step it rides on — all from one run.

Builds a chats database of MESSAGES messages (half questions, half replies): the questions are Spec-Bench's turns,
each reply three to six of its turns run together (real prose, 150–400 tokens), saved through the store as the app
saves them, a third of them with the token ids the target would have given (the rest are tokenized, as replies of
another model are). Then, in this order: the read (``chats.recall``), the whole build as the engine runs it (the
target's vocabulary loaded on the index's thread, every reply tokenized, the suffix array sorted), the build of the
next start (the tokens from the cache the first wrote), a reply while the index builds against one after, the lookups — the
median of LOOKUPS proposals at random places of held-out text (Spec-Bench turns not in the store) and at places of
stored replies (where a match is long) — and the target's plain step, measured as the sidebar's "vs plain" is.

    python benchmarks/history_index.py [--messages 10000] [--lookups 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from specchat.bench.spec_bench import suite_path
from specchat.chats.recall import stored_replies
from specchat.chats.store import Store
from specchat.chats.store_rows import StoredMessage
from specchat.engine import Engine, EngineConfig, ModelSettings, SpecConfig
from specchat.engine.drafters.stored_chats import StoredChatsIndex
from specchat.engine.rules import Rules
from specchat.engine.sampling import SamplingParams
from specchat.profiles import embedded


def turns() -> list[str]:
    lines = suite_path().read_text().splitlines()
    return [turn for line in lines for turn in json.loads(line)["turns"]]


def build_store(path: Path, messages: int, texts: list[str], tokenize, target_id: str, rng: random.Random) -> None:
    store = Store(path)
    try:
        for chat in range(messages // 20):
            chat_id = store.create(f"chat {chat}", "suffix", None)
            rows = []
            for _ in range(10):
                reply = " ".join(rng.sample(texts, rng.randint(3, 6)))
                tokens = tokenize(reply) if rng.random() < 1 / 3 else None
                rows += [StoredMessage("user", rng.choice(texts)),
                         StoredMessage("assistant", reply, tokens, finish_reason="stop",
                                       target_id=target_id if tokens else None)]
            store.replace_tail(chat_id, 0, rows)
    finally:
        store.close()


def first_reply(engine: Engine) -> tuple[float, float]:
    """TTFT and decode tok/s of a 64-token reply in a new chat, its prompt decoded afresh."""
    engine.new_chat()
    engine.clear_cache()
    *_, finished = engine.reply("Write a short poem about the sea.", max_tokens=64)
    return finished.stats.ttft, finished.stats.decode_tps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()  # the tokens' cache (and the verify sweep) apart from the user's
    rng = random.Random(0)
    texts = turns()
    rng.shuffle(texts)
    held_out, stored = texts[:60], texts[60:]
    engine = Engine(EngineConfig(target=ModelSettings(embedded.target_path(), threads=2), spec=SpecConfig("suffix"),
                                 n_ctx=4096))
    tokenize = lambda text: engine.target.tokenize(text, add_special=False)  # noqa: E731
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "chats.sqlite3"
        build_store(db, args.messages, stored, tokenize, engine.target.identity, rng)
        t = time.perf_counter()
        replies = list(stored_replies(db))
        read_s = time.perf_counter() - t
        t = time.perf_counter()
        engine.learn_stored_chats(lambda: stored_replies(db))
        engine.wait_for_stored_chats()
        build_s = time.perf_counter() - t
        # Again, as the next start builds it: the replies' tokens come from the cache the first build wrote.
        t = time.perf_counter()
        engine.learn_stored_chats(lambda: stored_replies(db))
        engine.wait_for_stored_chats()
        cached_s = time.perf_counter() - t
        # A reply while the index builds, against one after: what the first reply of a start pays for it.
        beside, alone = [], []
        for _ in range(3):
            engine.learn_stored_chats(lambda: stored_replies(db))
            beside.append(first_reply(engine))
            engine.wait_for_stored_chats()
            alone.append(first_reply(engine))
    index = engine.stored_chats.index
    assert index is not None, engine.stored_chats.problem
    t = time.perf_counter()
    documents = [(r.origin, tokenize(r.reply)) for r in replies]
    tokenize_s = time.perf_counter() - t
    t = time.perf_counter()
    StoredChatsIndex(documents)
    sort_s = time.perf_counter() - t

    rules = Rules(SamplingParams(), np.random.default_rng(0), np.random.default_rng(1), engine.target)
    held = [tokenize(text) for text in held_out]
    again = [tokenize(r.reply) for r in rng.sample(replies, min(60, len(replies)))]

    def lookups(sequences: list[list[int]]) -> tuple[float, float, float]:
        times, drafted, matched = [], 0, 0
        for _ in range(args.lookups):
            seq = rng.choice(sequences)
            end = rng.randint(2, len(seq))
            t = time.perf_counter()
            draft = engine.stored_chats.propose(seq[:end], 16, rules)
            times.append(time.perf_counter() - t)
            drafted += len(draft.tokens)
            matched += draft.match
        return statistics.median(times), drafted / args.lookups, matched / args.lookups

    new_median, new_drafted, new_match = lookups(held)
    old_median, old_drafted, old_match = lookups(again)
    reference = engine.plain_reference()
    step = reference.step_s if reference is not None else float("nan")
    print(f"{len(replies)} replies ({args.messages} messages), {index.tokens} tokens indexed, {index.nbytes / 1e6:.1f} MB")
    print(f"read from SQLite   {read_s * 1000:8.0f} ms")
    print(f"build on its thread {build_s:7.1f} s   (apart: tokenizing the replies {tokenize_s:.1f} s, the suffix"
          f" array {sort_s:.1f} s); at the next start, the tokens cached: {cached_s:.1f} s")
    for label, runs in (("while the index builds", beside), ("after it is built     ", alone)):
        print(f"a reply {label}: TTFT {statistics.median(r[0] for r in runs) * 1000:5.0f} ms,"
              f" decode {statistics.median(r[1] for r in runs):5.1f} tok/s (medians of {len(runs)})")
    print(f"lookup, held-out text  median {new_median * 1e6:6.0f} µs  = {new_median / step:.1%} of a plain step"
          f"  (drafted {new_drafted:.2f} tokens, match {new_match:.1f} on average)")
    print(f"lookup, stored text    median {old_median * 1e6:6.0f} µs  = {old_median / step:.1%} of a plain step"
          f"  (drafted {old_drafted:.2f} tokens, match {old_match:.1f} on average)")
    print(f"plain step of the target {step * 1000:.1f} ms")
    engine.close()


if __name__ == "__main__":
    main()
