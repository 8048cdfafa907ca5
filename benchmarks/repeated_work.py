"""Repeated work (#35's first goal): the "suffix" method drafting from earlier chats, against today's "ngram" preset
(which sees only the open chat) and llama-server's n-gram types given the same history — all in one run.

For each family of ``repeated_work.toml`` its ``earlier`` prompts are answered first by the target decoding plainly,
each in a chat of its own, and saved in a fresh chats database through the store, as the app saves them. Then every
``now`` prompt is timed, each in a new chat, by: specchat plain decoding, the ``ngram`` preset, the ``suffix`` preset
(its index built from that database before timing starts, as it is at start-up), and llama-server's types given the
same database as a managed server is given it (``ngram-cache`` reads static and dynamic lookup caches written from its
replies, ``backends/lookup_cache.py``), every type also warmed first with the earlier prompts, which ngram-mod's map
and ngram-cache's dynamic table keep across requests. Runners alternate
within each repetition; a figure is the median over repetitions of a runner's decode tok/s over plain decoding's on
the same prompt (Spec-Bench's measure). Greedy output is checked identical to plain decoding everywhere.

    python benchmarks/repeated_work.py [--repeat 3] [--max-tokens 128] [--peers none,ngram-mod,ngram-cache]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import tomllib
from collections import defaultdict
from pathlib import Path

from specchat.backends import open_backend
from specchat.bench.peers.llama_server import llama_server_runner
from specchat.bench.runners import BackendRunner, PeerError
from specchat.bench.tasks import Task
from specchat.chats.recall import learn_stored_chats
from specchat.chats.store import Store
from specchat.chats.store_rows import StoredMessage
from specchat.engine.engine_config import without_speculation
from specchat.errors import SpecchatError
from specchat.profiles import load_profile, run_config

HERE = Path(__file__).parent


def families() -> list[dict]:
    return tomllib.loads((HERE / "repeated_work.toml").read_text())["family"]


def store_earlier(db: Path, plain: BackendRunner, found: list[dict], max_tokens: int) -> int:
    """The earlier prompts answered plainly, each saved as a chat of its own; how many."""
    store = Store(db)
    count = 0
    try:
        for family in found:
            for i, prompt in enumerate(family["earlier"]):
                result = plain.run(Task(f"{family['name']}-earlier-{i}", prompt, max_tokens=max_tokens), -1)
                chat = store.create(prompt[:40], "suffix", None)
                store.replace_tail(chat, 0, [StoredMessage("user", prompt),
                                             StoredMessage("assistant", result.text, result.tokens, finish_reason="stop",
                                                           target_id=plain.backend.target_id)])
                count += 1
    finally:
        store.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--peers", default="none,ngram-mod,ngram-cache",
                        help="llama-server spec types, comma-separated ('' for none)")
    args = parser.parse_args()
    found = families()
    suffix = run_config(load_profile("suffix"), **{"target.adapt_threads": False})
    ngram = run_config(load_profile("ngram"), **{"target.adapt_threads": False})
    backend = open_backend(suffix)
    plain = BackendRunner("specchat none", backend, without_speculation(suffix), owns=False)
    runners = [plain, BackendRunner("specchat ngram", backend, ngram, owns=False),
               BackendRunner("specchat suffix", backend, suffix, owns=False)]
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "chats.sqlite3"
        stored = store_earlier(db, plain, found, args.max_tokens)
        backend.apply(suffix)  # the index is built for a method that reads it
        learn_stored_chats(backend, db)
        index = backend.engine.stored_chats.index
        print(f"{stored} earlier chats stored; the index holds {index.documents} replies, {index.tokens} tokens")
        for spec_type in filter(None, args.peers.split(",")):
            try:
                peer = llama_server_runner(spec_type, ngram, None, warm=True)
                problem = learn_stored_chats(peer.backend, db)
            except (PeerError, SpecchatError) as exc:
                print(f"skipped: {exc}")
                continue
            if problem:
                print(f"{peer.name()}: {problem}")
            for family in found:  # what llama-server learns across requests, it learns from the same earlier work
                for i, prompt in enumerate(family["earlier"]):
                    peer.run(Task(f"{family['name']}-earlier-{i}", prompt, max_tokens=args.max_tokens), -1)
            runners.append(peer)
    tasks = [(family["name"], Task(f"{family['name']}-{i}", prompt, max_tokens=args.max_tokens))
             for family in found for i, prompt in enumerate(family["now"])]
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    accepted: dict[str, list[float]] = defaultdict(list)
    mismatches = []
    for rep in range(args.repeat):
        for t, (family, task) in enumerate(tasks):
            order = runners[(rep + t) % len(runners):] + runners[: (rep + t) % len(runners)]
            results = {runner.name(): runner.run(task, rep) for runner in order}
            base = results[plain.name()]
            for name, result in results.items():
                if result.decode_tps and base.decode_tps:
                    ratios[name, task.name].append(result.decode_tps / base.decode_tps)
                if result.acceptance_rate is not None:
                    accepted[name].append(result.acceptance_rate)
                if result.text != base.text:
                    mismatches.append((name, task.name, rep))
    names = [runner.name() for runner in runners]
    width = max(map(len, names)) + 2  # a column as wide as the longest runner's name, so none run together
    print(f"\ndecode speed-up over plain decoding, median of {args.repeat} alternated runs per prompt\n")
    print(f"{'family':16}" + "".join(f"{name:>{width}}" for name in names))
    overall: dict[str, list[float]] = defaultdict(list)
    for family in found:
        row = f"{family['name']:16}"
        for name in names:
            medians = [statistics.median(ratios[name, task.name]) for f, task in tasks
                       if f == family["name"] and ratios[name, task.name]]
            overall[name] += medians
            row += f"{statistics.fmean(medians):>{width - 1}.2f}×" if medians else f"{'–':>{width}}"
        print(row)
    print(f"{'all':16}" + "".join(f"{statistics.fmean(overall[n]):>{width - 1}.2f}×" if overall[n]
                                  else f"{'–':>{width}}" for n in names))
    print(f"{'acceptance':16}" + "".join(f"{statistics.fmean(accepted[n]):>{width}.0%}" if accepted[n]
                                         else f"{'–':>{width}}" for n in names))
    print("\ngreedy output identical to plain decoding everywhere" if not mismatches
          else f"\nDIFFERENT from plain decoding: {mismatches}")
    for runner in runners:
        runner.close()
    backend.close()


if __name__ == "__main__":
    main()
