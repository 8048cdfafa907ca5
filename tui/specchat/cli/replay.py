"""``specchat replay``: a stored reply, step by step — or, with ``--json``, the events ``ask --json`` printed for it."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ConfigError
from ..text import is_number


def add_parser(sub: argparse._SubParsersAction) -> None:
    replay = sub.add_parser("replay", help="step through a stored reply: each draft, its verification, the figures")
    replay.add_argument("chat", nargs="?", default="",
                        help="the chat: its number (as `specchat replay --list` shows) or words of its title;"
                             " the last chat by default")
    replay.add_argument("--reply", type=int, default=0, metavar="N",
                        help="the chat's Nth reply (1 = the first; -1 = the last, the default)")
    replay.add_argument("--json", action="store_true",
                        help="the reply's events as JSON lines, as `specchat ask --json --probs 5` printed them")
    replay.add_argument("--list", action="store_true", help="list the stored chats with their numbers")


def run(args: argparse.Namespace) -> int:
    from ..chats.replay import NO_TRACE, Replay, step_lines
    from ..chats.session import turn_of
    from .chats import stored_chats

    with stored_chats() as store:
        chats = store.conversations()
        if args.list:
            for chat in chats:
                print(f"{chat.id:>5}  {chat.title}  ({chat.profile})")
            return 0
        chat = _chosen(chats, args.chat)
        replies = [m for m in store.messages(chat.id) if m.role == "assistant"]
    if not replies:
        raise ConfigError(f"chat {chat.id} ({chat.title!r}) has no reply yet")
    n = args.reply or -1
    if not (1 <= n <= len(replies) or -len(replies) <= n <= -1):
        raise ConfigError(f"--reply {n}: chat {chat.id} has {len(replies)} replies (1 … {len(replies)}, or -1 for the last)")
    record = turn_of(replies[n - 1 if n > 0 else n])
    if not record.trace:
        raise ConfigError(NO_TRACE)
    if args.json:
        for row in record.trace:
            sys.stdout.write(json.dumps(row) + "\n")
        return 0
    try:
        replay = Replay.of(record.trace)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    steps = f"steps 0 … {replay.steps[-1].number}" if replay.steps else "no step (an empty reply)"
    print(f"chat {chat.id} {chat.title!r} · reply {n if n > 0 else len(replies) + n + 1} of {len(replies)} · {steps}")
    for i in range(len(replay.steps)):
        print("\n".join(step_lines(replay, i)))
    return 0


def _chosen(chats: list, wanted: str):
    if not chats:
        raise ConfigError("no chats are stored yet — chat first: `specchat` or `specchat repl`")
    if not wanted:
        return chats[0]  # the most recently updated
    if is_number(wanted):
        found = [c for c in chats if c.id == int(wanted)]
    else:
        words = wanted.lower().split()
        found = [c for c in chats if all(w in c.title.lower() for w in words)]
    if not found:
        raise ConfigError(f"no stored chat is {wanted!r} — `specchat replay --list` lists them")
    return found[0]
