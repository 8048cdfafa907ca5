"""What keeping the token inspector's data costs: decode tok/s with each token's top-5 candidates (target and draft)
against the same reply without them, alternated run by run on one engine (the machine drifts; a ratio from one run
does not). The goal: at most 2 % (the app always keeps them).

For each profile (the embedded pair's ``tiny``, ``ngram`` and ``baseline``): the same greedy prompt, the cache
cleared before each run so every run decodes the same tokens; the median of the per-pair ratios.

    python benchmarks/inspector_cost.py [--pairs 7] [--tokens 96]
"""

from __future__ import annotations

import argparse
import statistics

from specchat.engine.core import Engine
from specchat.engine.events import ReplyFinished
from specchat.profiles import load_profile, run_config

PROMPT = "Write a short story about a lighthouse keeper and a storm."


def decode_tps(engine: Engine, top: int, tokens: int) -> tuple[float, list[int]]:
    engine.new_chat()
    engine.clear_cache(replies=True)  # the n-gram drafter's memory too: every run drafts the same way
    events = list(engine.reply(PROMPT, max_tokens=tokens, top=top))
    finished = events[-1]
    assert isinstance(finished, ReplyFinished) and finished.stats.decode_tps
    return finished.stats.decode_tps, [e.token for e in events if hasattr(e, "token")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=96)
    args = parser.parse_args()
    for name in ("tiny", "ngram", "baseline"):
        engine = Engine(run_config(load_profile(name), **{"target.adapt_threads": False}))
        try:
            decode_tps(engine, 5, args.tokens)  # warm: caches, measured verify costs
            ratios, plain, kept = [], [], []
            for i in range(args.pairs):
                order = (0, 5) if i % 2 == 0 else (5, 0)  # alternated, so a drift weighs on both alike
                runs = {top: decode_tps(engine, top, args.tokens) for top in order}
                assert runs[0][1] == runs[5][1], "the candidates changed the reply"
                plain.append(runs[0][0])
                kept.append(runs[5][0])
                ratios.append(runs[5][0] / runs[0][0])
            print(f"{name:9} without {statistics.median(plain):6.1f} tok/s · with top-5 {statistics.median(kept):6.1f}"
                  f" tok/s · ratio median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max"
                  f" {max(ratios):.3f}, {args.pairs} alternated pairs)")
        finally:
            engine.close()


if __name__ == "__main__":
    main()
