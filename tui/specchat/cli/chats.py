"""``specchat chats list | search WORDS | show ID | export ID [DIR] | private ID [--off]``: the stored chats, for scripts (as ``llm logs``)."""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import time
from pathlib import Path

from ..errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    chats = sub.add_parser("chats", help="the stored chats: list, search, show or export them, or mark"
                                                " one private")
    action = chats.add_subparsers(dest="action", required=True, metavar="{list,search,show,export,private}")
    action.add_parser("list", help="every chat, the most recently used first: id, messages, last used, title")
    search = action.add_parser("search", help="the messages holding every word given (accents and case aside; the"
                                              " last word may be the start of one): chat id, title, the text")
    search.add_argument("words", nargs="+", help="the words to find")
    search.add_argument("--limit", type=int, default=50, help="at most this many hits (default 50)")
    show = action.add_parser("show", help="a chat's messages as text")
    show.add_argument("id", type=int, help="the chat's id (as `specchat chats list` prints it)")
    export = action.add_parser("export", help="a chat as Markdown and JSON (every token's provenance)")
    export.add_argument("id", type=int, help="the chat's id")
    export.add_argument("dir", nargs="?", default="", help="the folder to write to (default: specchat's exports)")
    private = action.add_parser("private", help="never draft from this chat in another one (the suffix method), or"
                                                " again with --off")
    private.add_argument("id", type=int, help="the chat's id")
    private.add_argument("--off", action="store_true", help="draft from it again")


@contextlib.contextmanager
def stored_chats():
    """The chat database as it is; a missing or damaged one is one line (and left as it is)."""
    from .. import paths
    from ..chats.store import StoreError
    from ..chats.store_opening import open_waiting

    path = paths.chats_db()
    if not path.exists():
        raise ConfigError(f"no chats yet ({path} does not exist) — chat first: `specchat` or `specchat repl`")
    try:
        store = open_waiting(path, lambda line: print(line, file=sys.stderr, flush=True))
    except (StoreError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot read the chat database {path}: {exc}") from None
    try:
        yield store
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    from ..chats.store import StoreError

    with stored_chats() as store:
        try:
            return ACTIONS[args.action](store, args)
        except StoreError as exc:
            raise ConfigError(str(exc)) from None


def _list(store, _args) -> int:
    counts = store.message_counts()
    for chat in store.conversations():
        count = counts.get(chat.id, 0)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.updated))
        print(f"{chat.id}\t{count}\t{when}\t{chat.title}")
    return 0


def _search(store, args) -> int:
    from ..chats.search import fts_query

    words = " ".join(args.words)
    if fts_query(words) is None:
        raise ConfigError(f"{words!r} holds no word to search for — give letters or digits")
    if args.limit < 1:
        raise ConfigError(f"--limit must be ≥ 1, got {args.limit}")
    bold = sys.stdout.isatty()
    for hit in store.search(words, args.limit):
        excerpt, spans = hit.excerpt(words)
        if bold:
            for a, b in reversed(spans):
                excerpt = f"{excerpt[:a]}\x1b[1m{excerpt[a:b]}\x1b[0m{excerpt[b:]}"
        print(f"{hit.chat_id}\t{hit.title}\t{hit.where}: {excerpt}")
    return 0


def _show(store, args) -> int:
    chat = store.get(args.id)
    print(f"# {chat.title} (chat {chat.id}, profile {chat.profile})")
    if chat.system_prompt:
        print(f"\n[system] {chat.system_prompt}")
    for n, message in enumerate(store.messages(chat.id), start=1):
        finish = f" ({message.finish_reason})" if message.role == "assistant" and message.finish_reason not in (
            None, "stop") else ""
        print(f"\n[{n} {message.role}{finish}]\n{message.content}")
    return 0


def _export(store, args) -> int:
    from .. import paths
    from ..chats.export import export
    from ..chats.session import ChatSession

    session = ChatSession(store, "", None, lambda line, error: None)
    session.open(args.id)
    directory = Path(args.dir).expanduser() if args.dir else paths.exports_dir()
    try:
        written = export(session, directory)
    except OSError as exc:
        raise ConfigError(f"cannot export to {directory}: {exc.strerror or exc} — name a folder you can write to")
    for path in written:
        print(path)
    return 0


def _private(store, args) -> int:
    store.set_private(args.id, not args.off)
    chat = store.get(args.id)
    print(f"chat {chat.id} ({chat.title}): " + ("drafted from again in other chats" if args.off else
          "private — not drafted from in other chats (a specchat already running forgets it before its next"
          " reply)"))
    return 0


ACTIONS = {"list": _list, "search": _search, "show": _show, "export": _export, "private": _private}

