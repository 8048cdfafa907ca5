"""Decode speed with the Textual app attached versus headless, on the same prompt and profile.

Alternates a headless ``Engine.reply`` (what ``specchat ask`` runs, without printing) with the real app driving the
same engine configuration, N times, each in a fresh process, and reports the engine's own decode tokens/s for both
and the median of the paired ratios with its quartiles. The app runs in a real terminal, a tmux pane of the given
size (the terminal's own work is then on this machine too, as it would be for a user), or with ``--driver
headless`` through Textual's headless driver, which renders every frame but writes nothing.

    python benchmarks/tui_overhead.py [--profile tiny] [--repeat 12] [--tokens 300] [--driver tmux|headless]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import shutil
import sqlite3
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


def in_terminal(profile: str, tokens: int, tmp: Path, size: tuple[int, int] = (130, 40)) -> float:
    """The app in a tmux pane: its real driver writes every frame to a real terminal."""
    db = tmp / f"chats-{time.time_ns()}.sqlite3"
    code = (
        "from pathlib import Path; from specchat.app.chat_app import make_app; from specchat.app.settings import Settings; "
        f"make_app(Settings(profile={profile!r}, db_path=Path({str(db)!r}), keymap=Path({str(tmp / 'keymap.toml')!r}), "
        f"max_tokens={tokens}, resume=False)).run()"
    )
    session = f"specchat-bench-{time.time_ns()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
                    f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"], check=True)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    def stored_tps() -> float | None:
        if not db.exists():
            return None
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT telemetry FROM messages WHERE role = 'assistant'").fetchone()
        return json.loads(row[0]).get("decode_tps") if row else None

    try:
        deadline = time.monotonic() + 120
        while "ACTIVE" not in screen() and "INACTIVE" not in screen():  # the badge shows once the models loaded
            if time.monotonic() > deadline:
                raise SystemExit(f"the app did not load profile {profile}:\n{screen()}")
            time.sleep(0.3)
        subprocess.run(["tmux", "send-keys", "-t", session, "-l", PROMPT], check=True)
        subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)
        while (tps := stored_tps()) is None:
            if time.monotonic() > deadline + 300:
                raise SystemExit(f"no reply was stored:\n{screen()}")
            time.sleep(0.5)  # a slow poll, as a user watching would be: the measurement's own cost stays small
        return tps
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


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
    parser.add_argument("--repeat", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--driver", choices=("tmux", "headless"), default="tmux" if shutil.which("tmux") else "headless")
    args = parser.parse_args()
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:

        def app_run() -> float:
            if args.driver == "tmux":
                return in_terminal(args.profile, args.tokens, Path(tmp))
            return in_fresh_process("app", args.profile, args.tokens, tmp)

        in_fresh_process("headless", args.profile, 16, tmp)  # warm-up
        for rep in range(args.repeat):
            if rep % 2:
                ui = app_run()
                bare = in_fresh_process("headless", args.profile, args.tokens, tmp)
            else:
                bare = in_fresh_process("headless", args.profile, args.tokens, tmp)
                ui = app_run()
            pairs.append((bare, ui))
            print(f"run {rep + 1}: headless {bare:.1f} tok/s, with the app ({args.driver}) {ui:.1f} tok/s", flush=True)
            time.sleep(0.5)
    ratios = [u / b for b, u in pairs]
    q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    print(f"profile {args.profile}, {args.tokens} tokens, app in {args.driver}: headless "
          f"{statistics.median(b for b, _ in pairs):.1f} tok/s, app {statistics.median(u for _, u in pairs):.1f} tok/s; "
          f"app / headless = {median:.3f} (median of {len(pairs)} pairs, quartiles {q1:.3f}–{q3:.3f})")


if __name__ == "__main__":
    main()
