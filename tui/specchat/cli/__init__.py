"""The ``specchat`` command line: one module per command, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import io
import sys

from .. import __version__
from ..errors import SpecchatError
from . import ask, bench, chat, chats, doctor, profiles, repl, replay, server

COMMANDS = {"ask": ask, "chat": chat, "repl": repl, "replay": replay, "chats": chats, "profiles": profiles, "bench": bench,
            "server": server, "doctor": doctor}
DEFAULT_COMMAND = "chat"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specchat", description="Chat with local GGUF models and watch speculative decoding.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args([DEFAULT_COMMAND, *(argv or sys.argv[1:])])
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")  # piped bytes that are not UTF-8 are U+FFFD, not a traceback
    try:
        return COMMANDS[args.command].run(args)
    except SpecchatError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
