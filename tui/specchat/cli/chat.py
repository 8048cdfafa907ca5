"""``specchat chat`` (and plain ``specchat``): the full-screen chat app."""

from __future__ import annotations

import argparse
import os

from .options import add_profile_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    chat = sub.add_parser("chat", help="the chat app (also what plain `specchat` opens)")
    add_profile_option(chat, remembered=True)


def run(args: argparse.Namespace) -> int:
    from ..app.chat_app import make_app
    from ..app.settings import Settings, starting_profile

    settings = Settings()
    settings.profile, settings.start_note = starting_profile(args.profile, settings.last_profile)
    app = make_app(settings)
    app.run()
    if app.engine_running:  # a backend that hung: leave without the exit handlers that would free its models
        from ..backends.server_process import stop_all

        stop_all()  # a server is a child process: stopping it frees nothing the engine thread still uses
        os._exit(app.return_code or 0)
    return 0
