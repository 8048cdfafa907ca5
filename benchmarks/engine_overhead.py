"""How close the engine's plain decoding gets to a bare llama.cpp loop, and what one step costs in Python.

Runs alternately, on the same target and threads: (a) a bare greedy loop over llama-cpp-python's low-level API
(decode one token, argmax, repeat — no events, no bookkeeping) and (b) ``Engine.reply`` with method ``none``.
Optionally also llama.cpp's own ``llama-bench`` (tg) when given with --llama-bench. Prints medians and the ratio.
``--method ngram`` adds (c) ``Engine.reply`` with that method (``n_max = "auto"``, the embedded draft model where it
reads one) on the same free text, where copies rarely pay: what its steps cost in Python beyond plain decoding's —
proposing, choosing a length, learning — and its decode rate against (b) in the same repetition.

    python benchmarks/engine_overhead.py [--tokens 128] [--repeat 5] [--threads 2] [--llama-bench PATH] [--method M]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from dataclasses import replace

import numpy as np
from specchat.engine.core import Engine
from specchat.engine.drafters import METHODS
from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.events import ReplyFinished
from specchat.engine.llama import Context, Model
from specchat.profiles import embedded

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def bare_loop(model: Model, threads: int, prompt: list[int], n: int) -> float:
    ctx = Context(model, n_ctx=2048, threads=threads)
    try:
        ctx.decode(prompt)
        token = int(np.argmax(ctx.logits()[-1]))
        start = time.perf_counter()
        for _ in range(n):
            ctx.decode([token])
            token = int(np.argmax(ctx.logits()[-1]))
        return n / (time.perf_counter() - start)
    finally:
        ctx.close()


def engine_run(config: EngineConfig, n: int) -> tuple[float, float, float]:
    """Decode tok/s, and seconds per step outside draft, verify and prefill, and proposing (``t_draft``)."""
    engine = Engine(config)
    try:
        for event in engine.reply(PROMPT, max_tokens=n + 1):
            if isinstance(event, ReplyFinished):
                stats = event.stats
                steps = max(stats.steps, 1)
                return stats.decode_tps or 0.0, stats.t_overhead / steps, stats.t_draft / steps
    finally:
        engine.close()
    raise RuntimeError("no reply")


def llama_bench(binary: str, model: str, threads: int, n: int) -> float:
    out = subprocess.run(
        [binary, "-m", model, "-t", str(threads), "-p", "0", "-n", str(n), "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama-bench", help="path of llama.cpp's llama-bench binary")
    parser.add_argument("--method", help="also run the engine with this method (n_max auto), e.g. ngram")
    args = parser.parse_args()
    path = embedded.target_path()
    # An engine that never stops early: ignore end-of-generation by asking for a long story and many tokens.
    config = EngineConfig(target=ModelSettings(path, threads=args.threads), spec=SpecConfig("none"))
    model = Model(path)
    prompt = model.tokenize(PROMPT, add_special=True)
    speculating = None
    if args.method:  # a method that reads a draft model gets the embedded draft, which "auto" may keep off
        draft = ModelSettings(embedded.draft_path(), threads=args.threads) if METHODS[args.method].draft_model else None
        speculating = replace(config, draft=draft, spec=SpecConfig(args.method, n_max="auto"))
    bare, eng, overhead, native, spec_tps, spec_overhead = [], [], [], [], [], []
    engine_run(config, 16)  # warm-up
    if speculating is not None:
        engine_run(speculating, 16)  # and the verify-cost sweep, once
    for _ in range(args.repeat):
        bare.append(bare_loop(model, args.threads, prompt, args.tokens))
        tps, per_step, _ = engine_run(config, args.tokens)
        eng.append(tps)
        overhead.append(per_step)
        if speculating is not None:
            tps, per_step, proposing = engine_run(speculating, args.tokens)
            spec_tps.append(tps)
            spec_overhead.append(per_step + proposing)
        if args.llama_bench:
            native.append(llama_bench(args.llama_bench, str(path), args.threads, args.tokens))
    med = statistics.median
    print(f"bare low-level loop : {med(bare):7.1f} tok/s  (min {min(bare):.1f}, max {max(bare):.1f})")
    print(f"engine, method none : {med(eng):7.1f} tok/s  (min {min(eng):.1f}, max {max(eng):.1f})")
    print(f"engine / bare loop  : {med(e / b for e, b in zip(eng, bare)):.3f}  (median of paired ratios)")
    print(f"python overhead/step: {med(overhead) * 1e6:.0f} µs (time outside draft, verify and prefill)")
    if speculating is not None:
        print(f"engine, {args.method:<11s}: {med(spec_tps):7.1f} tok/s, {med(s / p for s, p in zip(spec_tps, eng)):.3f}"
              " of method none (median of paired ratios)")
        print(f"python overhead/step: {med(spec_overhead) * 1e6:.0f} µs (the same, and proposing and choosing a length),"
              f" {med(s - o for s, o in zip(spec_overhead, overhead)) * 1e6:.0f} µs more than method none")
    if native:
        print(f"llama-bench tg{args.tokens}    : {med(native):7.1f} tok/s")
        print(f"engine / llama-bench: {med(e / n for e, n in zip(eng, native)):.3f}")


if __name__ == "__main__":
    main()
