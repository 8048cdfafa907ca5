"""How true is "vs plain"? The sidebar's reference (modelled at the reply's depth, with its sampling) against plain
decoding of the same prompt measured by A/B right after, on the same engine.

The seeds' control prompt on `tiny` (greedy, draft: its reply stops by itself after some 80 tokens), and on a plain
profile at T = 0.8 (plain against itself: it should read 1.00×; its reply runs to --max-tokens, hundreds of tokens
deep, where plain decoding is slower than at an empty cache). For each, alternating repetitions: the sidebar's plain tok/s and speed-up, A/B's measured plain tok/s and
speed-up, and what the old reference (a 32-token greedy run at an empty cache) would have said. With
``--busy-start N``, N busy loops run beside the start (its load and its plain reference) and stop before the reply, as
a compile that ends (issue #47): the sidebar's reference is then whatever the reply's undrafted steps made of it.
With ``--server``, the same two cases run through a llama-server specchat starts (`specchat server build`): the
embedded pair drafting there (`server-tiny`), and plain decoding at T = 0.8 on the server.

    python benchmarks/plain_reference.py [--repeat 3] [--max-tokens 800] [--busy-start 2] [--server]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import statistics
import tempfile
from pathlib import Path

from specchat.chats.ab import Comparison
from specchat.chats.controller import ChatController
from specchat.engine.events import Event

CONTROL = "Explica cómo funciona la decodificación especulativa en tres párrafos y añade un ejemplo práctico"
SAMPLED = """[target]
model = "embedded:target"
[draft]
method = "none"
[sampling]
temperature = 0.8
seed = 3
"""
ON_SERVER = """
[backend]
kind = "llama-server"
"""


def run(profile: str, max_tokens: int, busy_start: int = 0) -> dict[str, float]:
    controller = ChatController(None, profile, lambda *_: None, max_tokens=max_tokens)
    try:
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy_start)]
        try:
            switched = controller.switcher.switch_profile(profile)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        controller.switcher.profile_switched(switched)
        reference = switched.reference
        exchange = controller.begin(CONTROL)
        events: list[Event] = []
        assert exchange.run(events.append) is None
        controller.absorb(events)
        t = controller.telemetry
        row = {"tokens": t.reply_tokens, "depth": t.depth, "sidebar_plain": t.plain_tps, "sidebar_speedup": t.speedup(),
               "old_plain": reference.tps_at(reference.depth) if reference else None}
        # Plain against itself is this benchmark's control, which A/B refuses a user (nothing to compare): the
        # comparison is made directly.
        record, (index, text) = controller.session.last_reply, controller.session.last_exchange()
        history = controller.session.engine_messages(controller.backend.target_id, upto=index)
        result = Comparison(controller.backend, record, history, text, max_tokens, threading.Event()).run()
        row["ab_plain"] = result.plain["decode_tps"]
        row["ab_speedup"] = result.speedup
        row["old_speedup"] = t.reply_rate() / row["old_plain"] if row["old_plain"] else None
        return row
    finally:
        controller.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=800)
    parser.add_argument("--busy-start", type=int, default=0, metavar="N", help="busy loops beside each start")
    parser.add_argument("--server", action="store_true", help="through llama-server instead of in-process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sampled = Path(folder) / "baseline-sampled.toml"
        sampled.write_text(SAMPLED + (ON_SERVER if args.server else ""))
        cases = {"tiny (draft, greedy)": "tiny", "plain at T=0.8": str(sampled)}
        if args.server:
            cases = {"server-tiny (draft, greedy)": "server-tiny", "server plain at T=0.8": str(sampled)}
        rows: dict[str, list[dict]] = {name: [] for name in cases}
        for rep in range(args.repeat):
            for name, profile in cases.items():  # alternated
                rows[name].append(run(profile, args.max_tokens, args.busy_start))
                r = rows[name][-1]
                print(f"[{rep + 1}/{args.repeat}] {name}: {r['tokens']} tokens, mean depth {r['depth']:.0f}; plain"
                      f" sidebar {shown(r['sidebar_plain'])} / A/B {shown(r['ab_plain'])} / old"
                      f" {shown(r['old_plain'])} tok/s; speed-up sidebar {shown(r['sidebar_speedup'], 2)}× / A/B"
                      f" {shown(r['ab_speedup'], 2)}× / old {shown(r['old_speedup'], 2)}×", flush=True)
    print("\nmedians (of the runs that have the figure)")
    for name, rs in rows.items():
        def med(key: str) -> float | None:
            values = [r[key] for r in rs if r[key] is not None]
            return statistics.median(values) if values else None
        ratio = med("sidebar_plain") / med("ab_plain") if med("sidebar_plain") and med("ab_plain") else None
        print(f"{name:28} sidebar plain / A/B plain {shown(ratio, 3)}  speed-up sidebar"
              f" {shown(med('sidebar_speedup'), 2)}×  A/B {shown(med('ab_speedup'), 2)}×  old reference"
              f" {shown(med('old_speedup'), 2)}×")


def shown(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
