"""Decoding on a busy machine: adaptive threads versus a fixed thread count, beside N busy loops.

Each run is `specchat ask --json` in a fresh process (plain decoding by default, so only threads differ), alternating
the adaptive engine and `--fixed-threads`, with `--loops` busy Python loops running beside it the whole time (0 for
an idle machine: adapting must cost nothing there). Reports the median decode tok/s of each and their ratio.

    python benchmarks/busy_cpu.py [--loops 2] [--repeat 6] [--tokens 160] [--method none]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def ask(extra: list[str], tokens: int, method: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "specchat", "ask", "--json", "--method", method, "--max-tokens",
                          str(tokens), *extra, PROMPT], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--method", default="none")
    args = parser.parse_args()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.loops)]
    rates: dict[str, list[float]] = {"adaptive": [], "fixed": []}
    threads: list[int] = []
    try:
        for rep in range(args.repeat):
            order = ("adaptive", "fixed") if rep % 2 == 0 else ("fixed", "adaptive")
            for kind in order:
                summary = ask([] if kind == "adaptive" else ["--fixed-threads"], args.tokens, args.method)
                rates[kind].append(summary["decode_tps"] or 0.0)
                if kind == "adaptive":
                    threads.append(summary["threads"])
            print(f"run {rep + 1}: adaptive {rates['adaptive'][-1]:.1f} tok/s ({threads[-1]} threads at the end),"
                  f" fixed {rates['fixed'][-1]:.1f} tok/s", flush=True)
    finally:
        for loop in loops:
            loop.kill()
    adaptive, fixed = statistics.median(rates["adaptive"]), statistics.median(rates["fixed"])
    ratios = [a / f for a, f in zip(rates["adaptive"], rates["fixed"]) if f]
    print(f"{args.loops} busy loops, method {args.method}, {args.tokens} tokens: adaptive {adaptive:.1f} tok/s,"
          f" fixed threads {fixed:.1f} tok/s; adaptive / fixed = {statistics.median(ratios):.2f} (median of"
          f" {len(ratios)} pairs, min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
