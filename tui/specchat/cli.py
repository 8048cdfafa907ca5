"""The ``specchat`` command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from . import __version__, profile_commands
from .bench import command as bench_command
from .errors import SpecchatError

ANSI = {
    "accepted": "\x1b[32m",  # green
    "corrected": "\x1b[38;5;214m",  # amber
    "bonus": "\x1b[38;5;75m",  # blue
    "target": "",
    "ghost": "\x1b[2;9m",  # dim, struck through
    "dim": "\x1b[2m",
    "reset": "\x1b[0m",
}


def _add_generation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="tiny", help="profile name or TOML path (default: tiny)")
    parser.add_argument("--method", choices=["none", "draft", "ngram"], help="override the profile's method")
    parser.add_argument("--n-max", type=int, help="most draft tokens per step")
    parser.add_argument("--temperature", type=float, help="0 = greedy")
    parser.add_argument("--seed", type=int, help="sampling seed")
    parser.add_argument("--threads", type=int, help="CPU threads for both models")
    parser.add_argument("--max-tokens", type=int, default=512, help="longest reply (default 512)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specchat", description="Chat with local GGUF models and watch speculative decoding.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    sub = parser.add_subparsers(dest="command")

    ask = sub.add_parser("ask", help="answer one prompt, coloured by token provenance")
    _add_generation_options(ask)
    ask.add_argument("--json", action="store_true", help="one JSON object per line: tokens, rejected drafts, summary")
    ask.add_argument("--ghosts", action="store_true", help="show rejected draft tokens as struck-through ghost text")
    ask.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                     help="colour tokens by provenance: auto (a terminal, unless NO_COLOR is set), always or never")
    ask.add_argument("prompt", help="the message to answer")

    profile_commands.add_parser(sub)
    bench_command.add_parser(sub)

    chat = sub.add_parser("chat", help="the chat app (also what plain `specchat` opens)")
    chat.add_argument("--profile", default="tiny", help="profile name or TOML path (default: tiny)")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {
        "draft.method": args.method,
        "draft.n_max": args.n_max,
        "sampling.temperature": args.temperature,
        "sampling.seed": args.seed,
        "target.threads": args.threads,
        "draft.threads": args.threads,
    }
    return {k: v for k, v in chosen.items() if v is not None}


def open_engine(args: argparse.Namespace):  # -> Engine, imported lazily so --help stays instant
    from .engine.core import Engine
    from .profiles import engine_config, load_profile

    profile = load_profile(args.profile)
    return Engine(engine_config(profile, **_overrides(args)))


def summary_line(stats: Any, finish_reason: str) -> str:
    parts = [f"[{stats.method}" + (f" n_max={stats.n_max}]" if stats.speculation_active else "]")]
    parts.append(f"{stats.generated} tokens")
    if stats.decode_tps:
        parts.append(f"{stats.decode_tps:.1f} tok/s")
    if stats.ttft is not None:
        parts.append(f"TTFT {stats.ttft * 1000:.0f} ms")
    if stats.drafted:
        parts.append(f"accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})")
        parts.append(f"mean accept length {stats.mean_acceptance_length:.2f}")
    if not stats.speculation_active:
        parts.append(f"speculation off: {stats.speculation_reason}")
    parts.append(finish_reason)
    return " · ".join(parts)


def use_color(choice: str, stream: TextIO) -> bool:
    """--color auto: a terminal, unless NO_COLOR is set (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and not os.environ.get("NO_COLOR")


def render_events(events: Iterable[Any], out: TextIO, *, color: bool, ghosts: bool, as_json: bool) -> str:
    """Write a reply's events to ``out``; returns the finish reason."""
    from .engine.events import ContextTrimmed, DraftRejected, ReplyFinished, TokenEmitted

    finish = "stop"
    for event in events:
        if isinstance(event, TokenEmitted):
            if as_json:
                row = {"type": "token", "text": event.text, "token": event.token, "kind": event.kind.value,
                       "step": event.step, "elapsed": round(event.elapsed, 6)}
                out.write(json.dumps(row) + "\n")
            elif color and ANSI[event.kind]:
                out.write(ANSI[event.kind] + event.text + ANSI["reset"])
            else:
                out.write(event.text)
        elif isinstance(event, DraftRejected):
            if as_json:
                out.write(json.dumps({"type": "rejected", "text": event.text, "tokens": list(event.tokens), "step": event.step}) + "\n")
            elif ghosts and color:
                out.write(ANSI["ghost"] + event.text + ANSI["reset"])
        elif isinstance(event, ContextTrimmed):
            if as_json:
                out.write(json.dumps({"type": "context_trimmed", "dropped_messages": event.dropped_messages,
                                      "tokens_before": event.tokens_before, "tokens_after": event.tokens_after}) + "\n")
            else:
                print(f"(context full: dropped the {event.dropped_messages} oldest messages)", file=sys.stderr)
        elif isinstance(event, ReplyFinished):
            finish = event.finish_reason
            if as_json:
                out.write(json.dumps({"type": "summary", "finish_reason": finish, **event.stats.summary()}) + "\n")
            else:
                line = summary_line(event.stats, finish)
                out.write("\n" + (ANSI["dim"] + line + ANSI["reset"] if color else line) + "\n")
        out.flush()
    return finish


class StopOnInterrupt:
    """While active, Ctrl+C asks the reply to stop between steps instead of raising wherever Python happens to be
    (inside the engine's generator that would end it without its summary); a second Ctrl+C stops at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def __enter__(self) -> StopOnInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, _signum: int, _frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


def cmd_ask(args: argparse.Namespace) -> int:
    engine = open_engine(args)
    try:
        for note in engine.notes:
            print(f"specchat: note: {note}", file=sys.stderr)
        with StopOnInterrupt() as stop:
            events = engine.reply(args.prompt, max_tokens=args.max_tokens, should_stop=stop)
            finish = render_events(events, sys.stdout, color=use_color(args.color, sys.stdout) and not args.json,
                                   ghosts=args.ghosts, as_json=args.json)
    finally:
        engine.close()
    return 130 if finish == "cancelled" else 0


def cmd_chat(args: argparse.Namespace) -> int:
    from .app.chat_app import make_app
    from .app.settings import Settings

    make_app(Settings(profile=args.profile)).run()
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ask": cmd_ask,
    "chat": cmd_chat,
    "profiles": profile_commands.run,
    "bench": bench_command.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["chat", *(argv or sys.argv[1:])])
    try:
        return COMMANDS[args.command](args)
    except SpecchatError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
