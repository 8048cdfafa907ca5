"""``specchat repl``: the line-based chat (prompt-toolkit); piped lines are answered one by one."""

from __future__ import annotations

import argparse
import os
import sys

from .. import paths
from ..engine.engine_config import DEFAULT_MAX_TOKENS
from .options import add_profile_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    repl = sub.add_parser("repl", help="a line-based chat for plain terminals, SSH, logs, screen readers and pipes")
    add_profile_option(repl)
    repl.add_argument("--vi", action="store_true", help="Vi editing keys (Emacs keys by default)")
    repl.add_argument("--no-color", action="store_true", help="plain text (so does the NO_COLOR variable)")
    repl.add_argument("--plain", action="store_true", help="for screen readers: only the replies' text and summaries")
    repl.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help=f"longest reply (default {DEFAULT_MAX_TOKENS})")


def run(args: argparse.Namespace) -> int:
    from ..repl import ReplSettings, make_repl

    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    color = not (args.no_color or args.plain or os.environ.get("NO_COLOR")) and sys.stdout.isatty()
    settings = ReplSettings(args.profile, color=color, plain=args.plain, vi=args.vi, db_path=paths.chats_db(),
                            history_path=paths.repl_history(), max_tokens=args.max_tokens)
    repl = make_repl(settings, interactive=interactive)
    code = repl.run() if interactive else repl.run_lines(sys.stdin)
    if repl.replies.working:  # a backend that hung: leave without the exit handlers that would free its models
        from ..backends.server_process import stop_all

        stop_all()  # a server is a child process: stopping it frees nothing the worker still uses
        os._exit(code)
    return code
