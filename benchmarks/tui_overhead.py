"""Decode speed with the Textual app attached versus headless, on the same prompt and profile.

Alternates a headless ``Engine.reply`` (what ``specchat ask`` runs) with the real app driving the same engine
configuration through Textual's headless driver (the UI still renders every frame), N times, and reports the
engine's own decode tokens/s for both and the median of the paired ratios.

    python benchmarks/tui_overhead.py [--profile tiny] [--repeat 5] [--tokens 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.app.widgets.prompt import PromptInput
from specchat.engine import Engine, ReplyFinished
from specchat.profiles import engine_config, load_profile

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def headless(profile: str, tokens: int) -> float:
    engine = Engine(engine_config(load_profile(profile)))
    try:
        finished = [e for e in engine.reply(PROMPT, max_tokens=tokens) if isinstance(e, ReplyFinished)][0]
        return finished.stats.decode_tps or 0.0
    finally:
        engine.close()


async def with_app(profile: str, tokens: int, tmp: Path) -> float:
    settings = Settings(profile=profile, db_path=tmp / "chats.sqlite3", keymap=tmp / "keymap.toml", max_tokens=tokens,
                        resume=False)
    app = make_app(settings)
    async with app.run_test(size=(130, 40)) as pilot:
        await pilot.pause(0.1)
        while app.busy:
            await pilot.pause(0.05)
        if app.engine is None:
            raise SystemExit(f"the app could not load profile {profile}: {[str(n.message) for n in app._notifications]}")
        app.query_one(PromptInput).load_text(PROMPT)
        await pilot.press("enter")
        await pilot.pause(0.5)
        while app.busy:  # a slow poll: the UI should run as it would for a user watching, not for the benchmark
            await asyncio.sleep(0.5)
        return app.telemetry.reply_tps or 0.0


def in_fresh_process(kind: str, profile: str, tokens: int, tmp: str) -> float:
    """Each measurement in its own process, as a user session would be (the app lowers its UI thread's priority)."""
    code = (
        "import asyncio, sys; from pathlib import Path; sys.path.insert(0, %r); import tui_overhead as t; "
        "print(t.headless(%r, %d) if %r == 'headless' else asyncio.run(t.with_app(%r, %d, Path(%r))))"
        % (str(Path(__file__).parent), profile, tokens, kind, profile, tokens, tmp)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        in_fresh_process("headless", args.profile, 16, tmp)  # warm-up
        for rep in range(args.repeat):
            if rep % 2:
                ui = in_fresh_process("app", args.profile, args.tokens, tmp)
                bare = in_fresh_process("headless", args.profile, args.tokens, tmp)
            else:
                bare = in_fresh_process("headless", args.profile, args.tokens, tmp)
                ui = in_fresh_process("app", args.profile, args.tokens, tmp)
            pairs.append((bare, ui))
            print(f"run {rep + 1}: headless {bare:.1f} tok/s, with the app {ui:.1f} tok/s", flush=True)
            time.sleep(0.5)
    ratio = statistics.median(u / b for b, u in pairs)
    print(f"profile {args.profile}: headless {statistics.median(b for b, _ in pairs):.1f} tok/s, "
          f"app {statistics.median(u for _, u in pairs):.1f} tok/s, app / headless = {ratio:.3f} (median of pairs)")


if __name__ == "__main__":
    main()
