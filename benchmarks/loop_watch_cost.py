"""What watching a reply for a loop costs (engine/repetition.py), against a plain decoding step measured in the same run.

Each token a reply shows is added to a ``LoopWatch``: this times ``add`` over replies that never loop — ids spread over
the vocabulary, and ids from a small alphabet (frequent tokens: the last token often matches one a span back, so the
stretch itself is compared, the costly case) — and a plain decoding step of the bundled target at the same moment,
and prints their ratio: a fraction of each token's time, not a bare time, since this machine's speed moves.

    python benchmarks/loop_watch_cost.py [--tokens 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.core import Engine
from specchat.engine.repetition import LoopRule, LoopWatch
from specchat.profiles.embedded import target_path


def watch_cost(tokens: list[int]) -> float:
    """Seconds per ``add`` over ``tokens``."""
    watch = LoopWatch(LoopRule())
    started = time.perf_counter()
    for token in tokens:
        watch.add(token)
    return (time.perf_counter() - started) / len(tokens)


def plain_step(engine: Engine, tokens: int = 64) -> float:
    """Seconds per token of a plain reply (its decode rate), measured by the engine."""
    engine.new_chat()
    finished = list(engine.reply("Write a long story about a lighthouse.", max_tokens=tokens))[-1]
    return 1 / finished.stats.decode_tps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    engine = Engine(EngineConfig(ModelSettings(target_path(), threads=2), spec=SpecConfig("none")))
    ratios = []
    try:
        for round_ in range(args.rounds):  # alternated: a step, the watch, a step
            step = plain_step(engine)
            spread = watch_cost([rng.randrange(49152) for _ in range(args.tokens)])
            frequent = watch_cost(_no_loop([rng.randrange(4) for _ in range(args.tokens)]))
            step = (step + plain_step(engine)) / 2
            ratios.append((spread / step, frequent / step))
            print(f"round {round_ + 1}: add {spread * 1e6:.1f} µs a token (spread ids), {frequent * 1e6:.1f} µs"
                  f" (4 ids); a plain step {step * 1e3:.2f} ms: {spread / step:.2%} and {frequent / step:.2%} of it")
    finally:
        engine.close()
    print(f"median: watching for loops costs {statistics.median(r[0] for r in ratios):.2%} of a plain decoding step"
          f" (spread ids), {statistics.median(r[1] for r in ratios):.2%} (4 ids)")


def _no_loop(tokens: list[int]) -> list[int]:
    """``tokens`` with a rising id every 40 (4 random ids make a 48-token loop now and then; this one never does)."""
    return [t if i % 40 else 1000 + i for i, t in enumerate(tokens)]


if __name__ == "__main__":
    main()
