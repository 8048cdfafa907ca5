"""Decode speed with the chat app (or the REPL) attached versus `specchat ask`, on the same prompt and profile.

Alternates, N times and each in a fresh process, `specchat ask` and the real app answering the same prompt, and
reports the engine's own decode tokens/s for both and the median of the paired ratios with its quartiles.

By default both run in a real terminal, a tmux pane of the same size, so the terminal's own work is on this machine
too, as it would be for a user: `ask` prints its coloured tokens, the app draws its frames. With `--driver headless`
the app runs through Textual's headless driver (it renders every frame but writes nothing) and the baseline is the
bare engine call that `ask` makes, without printing. With `--front-end repl`, `specchat repl` in the same pane instead
of the app: it streams into the scrollback and redraws its status line while the engine decodes (the goal: a ratio of
at least 0.97).

    python benchmarks/tui_overhead.py [--profile tiny] [--repeat 24] [--tokens 300] [--driver tmux|headless]
    python benchmarks/tui_overhead.py --front-end repl [--repeat 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.app.chat.prompt import PromptInput
from specchat.engine import Engine, ReplyFinished
from specchat.profiles import load_profile, run_config

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
SIZE = (130, 40)


def headless(profile: str, tokens: int) -> float:
    engine = Engine(run_config(load_profile(profile)))
    try:
        finished = [e for e in engine.reply(PROMPT, max_tokens=tokens) if isinstance(e, ReplyFinished)][0]
        return finished.stats.decode_tps or 0.0
    finally:
        engine.close()


async def with_app(profile: str, tokens: int, tmp: Path) -> float:
    settings = Settings(profile=profile, db_path=tmp / "chats.sqlite3", keymap=tmp / "keymap.toml", max_tokens=tokens,
                        resume=False, last_profile=None)
    app = make_app(settings)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        while app.busy:
            await pilot.pause(0.05)
        if app.backend is None:
            raise SystemExit(f"the app could not load profile {profile}: {[str(n.message) for n in app._notifications]}")
        app.query_one(PromptInput).load_text(PROMPT)
        await pilot.press("enter")
        await pilot.pause(0.5)
        while app.busy:  # a slow poll: the UI should run as it would for a user watching, not for the benchmark
            await asyncio.sleep(0.5)
        return app.telemetry.reply_tps or 0.0


def in_fresh_process(kind: str, profile: str, tokens: int, tmp: str) -> float:
    """One headless measurement in its own process, as a user session would be."""
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--profile", profile, "--tokens", str(tokens),
                          "--folder", tmp], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


class Pane:
    """A tmux pane of ``SIZE`` running one command: a real terminal that nobody is attached to."""

    def __init__(self, command: str) -> None:
        self.session = f"specchat-bench-{time.time_ns()}"
        start = ["tmux", "new-session", "-d", "-s", self.session, "-x", str(SIZE[0]), "-y", str(SIZE[1]),
                 f"{command}; sleep 600"]
        if subprocess.run(start, capture_output=True).returncode:
            # Closing the previous pane's session stops tmux's server; a session started meanwhile can meet it exiting.
            time.sleep(1)
            subprocess.run(start, check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-S", "-200", "-t", self.session], capture_output=True,
                              text=True).stdout

    def type(self, text: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.session, "-l", text], check=True)
        subprocess.run(["tmux", "send-keys", "-t", self.session, "Enter"], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


def in_tmux(command: str, result: Callable[[Pane], float | None], timeout: float = 300) -> float:
    pane = Pane(command)
    try:
        deadline = time.monotonic() + timeout
        while (value := result(pane)) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out; the terminal shows:\n{pane.screen()}")
            time.sleep(0.5)  # a slow poll, as a user watching would be: the measurement's own cost stays small
        return value
    finally:
        pane.close()


def ask_in_terminal(profile: str, tokens: int) -> float:
    command = shlex.join([sys.executable, "-m", "specchat", "ask", "--profile", profile, "--max-tokens", str(tokens),
                          PROMPT])

    def summary(pane: Pane) -> float | None:
        found = re.search(r"(\d+\.\d) tok/s · TTFT", pane.screen())
        return float(found.group(1)) if found else None

    return in_tmux(command, summary)


def app_in_terminal(profile: str, tokens: int, tmp: Path) -> float:
    db = tmp / f"chats-{time.time_ns()}.sqlite3"
    code = (
        "from pathlib import Path; from specchat.app.chat_app import make_app; from specchat.app.settings import Settings; "
        f"make_app(Settings(profile={profile!r}, db_path=Path({str(db)!r}), keymap=Path({str(tmp / 'keymap.toml')!r}), "
        f"max_tokens={tokens}, resume=False, last_profile=None)).run()"
    )
    sent = False

    def stored_tps(pane: Pane) -> float | None:
        nonlocal sent
        if not sent:
            if "ACTIVE" in pane.screen():  # the badge (ACTIVE or INACTIVE) shows once the models loaded
                pane.type(PROMPT)
                sent = True
            return None
        if not db.exists():
            return None
        with sqlite3.connect(db) as conn:
            # The reply is saved as it streams: its telemetry arrives when it finishes.
            row = conn.execute("SELECT telemetry FROM messages WHERE role = 'assistant' AND telemetry IS NOT NULL"
                               ).fetchone()
        return json.loads(row[0]).get("decode_tps") if row else None

    return in_tmux(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}", stored_tps)


REPL_SUMMARY = re.compile(r"(\d+\.\d) tok/s · TTFT")


def repl_in_terminal(profile: str, tokens: int, data: str) -> float:
    # Its own data folder: the chats and prompt history of this benchmark stay out of the user's.
    command = "env XDG_DATA_HOME=%s %s" % (shlex.quote(data), shlex.join(
        [sys.executable, "-m", "specchat", "repl", "--profile", profile, "--max-tokens", str(tokens)]))
    sent = False

    def summary(pane: Pane) -> float | None:
        nonlocal sent
        screen = pane.screen()
        if not sent:
            if "/help for commands" in screen:  # loaded, at the prompt
                pane.type(PROMPT)
                sent = True
            return None
        found = REPL_SUMMARY.search(screen)
        return float(found.group(1)) if found else None

    return in_tmux(command, summary)


def alternate(baseline: Callable[[], float], candidate: Callable[[], float], repeat: int,
              names: tuple[str, str]) -> list[tuple[float, float]]:
    """``repeat`` pairs of (baseline, candidate) decode rates, the order swapped every other pair."""
    pairs = []
    for rep in range(repeat):
        if rep % 2:
            other, bare = candidate(), baseline()
        else:
            bare, other = baseline(), candidate()
        pairs.append((bare, other))
        print(f"run {rep + 1}: {names[0]} {bare:.1f} tok/s, {names[1]} {other:.1f} tok/s", flush=True)
        time.sleep(0.5)
    return pairs


def report(pairs: list[tuple[float, float]], profile: str, tokens: int, names: tuple[str, str]) -> str:
    ratios = [u / b for b, u in pairs]
    q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return (f"profile {profile}, {tokens} tokens: {names[0]} {statistics.median(b for b, _ in pairs):.1f} tok/s, "
            f"{names[1]} {statistics.median(u for _, u in pairs):.1f} tok/s; {names[1]} / {names[0]} = {median:.3f} "
            f"(median of {len(pairs)} pairs, quartiles {q1:.3f}–{q3:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--repeat", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--driver", choices=("tmux", "headless"), default="tmux" if shutil.which("tmux") else "headless")
    parser.add_argument("--front-end", choices=("app", "repl"), default="app")
    parser.add_argument("--child", choices=("headless", "app"), help=argparse.SUPPRESS)  # one measurement, its own process
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(headless(args.profile, args.tokens) if args.child == "headless"
              else asyncio.run(with_app(args.profile, args.tokens, Path(args.folder))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.front_end == "repl":
            names = ("specchat ask (tmux)", "specchat repl (tmux)")
            baseline = lambda: ask_in_terminal(args.profile, args.tokens)  # noqa: E731
            app = lambda: repl_in_terminal(args.profile, args.tokens, os.path.join(tmp, "repl"))  # noqa: E731
        elif args.driver == "tmux":
            names = ("specchat ask (tmux)", "app (tmux)")
            baseline = lambda: ask_in_terminal(args.profile, args.tokens)  # noqa: E731
            app = lambda: app_in_terminal(args.profile, args.tokens, Path(tmp))  # noqa: E731
        else:
            names = ("engine, no output", "app (headless driver)")
            baseline = lambda: in_fresh_process("headless", args.profile, args.tokens, tmp)  # noqa: E731
            app = lambda: in_fresh_process("app", args.profile, args.tokens, tmp)  # noqa: E731
        if args.front_end == "repl":
            ask_in_terminal(args.profile, 16)  # warm-up: file caches, the embedded draft
        else:
            in_fresh_process("headless", args.profile, 16, tmp)  # warm-up: file caches, the embedded draft
        pairs = alternate(baseline, app, args.repeat, names)
    print(report(pairs, args.profile, args.tokens, names))


if __name__ == "__main__":
    main()
