"""``specchat ask``: one answer on the terminal, coloured by token provenance, then a one-line summary (or JSON lines)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from .. import paths
from ..colours import ANSI, ANSI_GHOST, ANSI_RESET, ansi
from ..engine.engine_config import DEFAULT_MAX_TOKENS
from ..engine.conversation import Message
from ..engine.drafters import METHODS
from ..errors import ConfigError
from ..figures import summary_line
from ..text import valid_text
from .options import add_profile_option

MAX_PROBS = 20  # each candidate is one more pass over the vocabulary per token


def add_generation_options(parser: argparse.ArgumentParser) -> None:
    add_profile_option(parser)
    # (mtp is a server profile's own method: its heads are not something another profile can switch to)
    parser.add_argument("--method", choices=[name for name, m in METHODS.items() if not m.server_only],
                        help="override the profile's method")
    parser.add_argument("--n-max", type=int, help="most draft tokens per step")
    parser.add_argument("--temperature", type=float, help="0 = greedy")
    parser.add_argument("--seed", type=int, help="sampling seed")
    parser.add_argument("--threads", type=int, help="CPU threads for both models (the most; fewer on a busy machine)")
    parser.add_argument("--fixed-threads", action="store_true",
                        help="keep the thread count even when other processes keep the cores busy")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"longest reply (default {DEFAULT_MAX_TOKENS})")


def add_parser(sub: argparse._SubParsersAction) -> None:
    ask = sub.add_parser("ask", help="answer one prompt, coloured by token provenance")
    add_generation_options(ask)
    ask.add_argument("--json", action="store_true", help="one JSON object per line: tokens, rejected drafts, summary")
    ask.add_argument("--probs", type=int, default=0, metavar="N",
                     help="with --json: each token's N most likely candidates as the target saw them (a 'top' field)")
    ask.add_argument("--ghosts", action="store_true", help="show rejected draft tokens as struck-through ghost text")
    ask.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                     help="colour tokens by provenance: auto (a terminal, unless NO_COLOR is set), always or never")
    ask.add_argument("prompt", nargs="?", default="",
                     help="the message to answer; text piped in (or given as -) is read and joined to it")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {
        "draft.method": args.method,
        "draft.n_max": args.n_max,
        "sampling.temperature": args.temperature,
        "sampling.seed": args.seed,
        "target.threads": args.threads,
        "draft.threads": args.threads,
        "target.adapt_threads": False if args.fixed_threads else None,
    }
    return {k: v for k, v in chosen.items() if v is not None}


def open_backend_for(args: argparse.Namespace):  # -> Backend, imported lazily so --help stays instant
    from ..backends import open_backend
    from ..profiles import load_profile, run_config

    return open_backend(run_config(load_profile(args.profile), **overrides(args)))


def use_color(choice: str, stream: TextIO) -> bool:
    """--color auto: a terminal, unless NO_COLOR is set (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and not os.environ.get("NO_COLOR")


def render_events(events: Iterable[Any], out: TextIO, *, color: bool, ghosts: bool, as_json: bool) -> str:
    """Write a reply's events to ``out``; returns the finish reason."""
    from ..chats.trace import row_of
    from ..engine.events import ContextTrimmed, DraftRejected, ReplyFinished, TokenEmitted

    finish = "stop"
    for event in events:
        if isinstance(event, ReplyFinished):
            finish = event.finish_reason
        if as_json:
            out.write(json.dumps(row_of(event)) + "\n")
        elif isinstance(event, TokenEmitted):
            out.write(ansi(event.text, event.kind) if color else event.text)
        elif isinstance(event, DraftRejected):
            if ghosts and color:
                out.write(ANSI_GHOST + event.text + ANSI_RESET)
        elif isinstance(event, ContextTrimmed):
            print(f"(context full: dropped the {event.dropped_messages} oldest messages)", file=sys.stderr)
        elif isinstance(event, ReplyFinished):
            line = summary_line(event.stats, finish)
            out.write("\n" + (ANSI["dim"] + line + ANSI_RESET if color else line) + "\n")
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


def read_prompt(argument: str, stdin: TextIO) -> str:
    """The argument, followed by what was piped in (as the `llm` CLI does): ``cat notes.txt | specchat ask "Summarise:"``.
    ``-`` alone means: only what is piped in."""
    piped = stdin.read() if argument == "-" or not stdin.isatty() else ""
    argument = "" if argument == "-" else argument
    prompt = valid_text("\n\n".join(part for part in (argument.strip(), piped.strip()) if part))
    if not prompt:
        raise ConfigError("nothing to answer — give a prompt, or pipe text in")
    return prompt


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.probs <= MAX_PROBS or (args.probs and not args.json):
        raise ConfigError(f"--probs N needs --json and N from 1 to {MAX_PROBS}: e.g. specchat ask --json --probs 5"
                          ' "…"')
    prompt = read_prompt(args.prompt, sys.stdin)
    from ..engine import phases
    from ..profiles.embedded import DERIVING

    def said(line: str) -> None:
        # A script's stderr gets the once-a-machine derivation only; a person at a terminal sees every phase.
        if line.startswith(DERIVING) or sys.stderr.isatty():
            print(f"specchat: {line}", file=sys.stderr, flush=True)

    with phases.told(said):
        backend = open_backend_for(args)
    try:
        from ..chats.recall import learn_stored_chats

        if problem := learn_stored_chats(backend, paths.chats_db(),
                                         lambda line: print(f"specchat: {line}", file=sys.stderr, flush=True)):
            print(f"specchat: note: {problem}", file=sys.stderr)
        for note in backend.notes:
            print(f"specchat: note: {note}", file=sys.stderr)
        system = backend.config.system_prompt
        history = [Message("system", system)] if system else []
        with StopOnInterrupt() as stop:
            events = backend.answer(history, prompt, max_tokens=args.max_tokens, should_stop=stop, top=args.probs)
            finish = render_events(events, sys.stdout, color=use_color(args.color, sys.stdout) and not args.json,
                                   ghosts=args.ghosts, as_json=args.json)
    finally:
        backend.close()
    return 130 if finish == "cancelled" else 0
