"""What a verify batch of b rows costs in plain steps, decoded bare (no engine around it), at a given context depth:
with logits for every row, as a verify needs them, and for the last row only, as a prompt's decode does (llama-bench's
ppN). Sizes alternate within each repetition and the median of each is taken, so a busy moment moves all of them.

    python benchmarks/verify_rows.py [--depth 300] [--repeat 7] [--rows 1,2,4,8,16,32]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specchat.engine.llama import Context, Model
from specchat.profiles import embedded

TEXT = "Write a long story about a lighthouse keeper who finds a message in a bottle. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rows", default="1,2,4,8,16,32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    rows = [int(b) for b in args.rows.split(",")]
    model = Model(embedded.target_path())
    ctx = Context(model, n_ctx=args.depth + max(rows) + 16, threads=args.threads, kv_cache="q8_0")
    tokens = model.tokenize(TEXT * (1 + (args.depth + max(rows)) // 10), add_special=True)
    ctx.decode(tokens[: args.depth])
    batch = tokens[args.depth:]
    seconds: dict[tuple[int, bool], list[float]] = {}
    for _ in range(args.repeat):
        for b in rows:
            for every_row in (True, False):
                ctx.truncate(args.depth)
                start = time.perf_counter()
                ctx.decode(batch[:b], all_logits=every_row)
                ctx.logits().argmax(axis=1)  # what a greedy verify reads of them
                seconds.setdefault((b, every_row), []).append(time.perf_counter() - start)
    step = statistics.median(seconds[1, False])
    print(f"plain step at depth {args.depth}: {step * 1e3:.2f} ms (median of {args.repeat})")
    print(f"{'rows':>4}  {'every row (verify)':>18}  {'last row (prompt)':>17}")
    for b in rows:
        every, last = (statistics.median(seconds[b, flag]) / step for flag in (True, False))
        print(f"{b:>4}  {every:>12.2f} steps  {last:>11.2f} steps")
    ctx.close()


if __name__ == "__main__":
    main()
