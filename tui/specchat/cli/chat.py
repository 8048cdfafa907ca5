"""``specchat chat`` (and plain ``specchat``): the full-screen chat app."""

from __future__ import annotations

import argparse

from .options import add_profile_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    chat = sub.add_parser("chat", help="the chat app (also what plain `specchat` opens)")
    add_profile_option(chat)


def run(args: argparse.Namespace) -> int:
    from ..app.chat_app import make_app
    from ..app.settings import Settings

    make_app(Settings(profile=args.profile)).run()
    return 0
