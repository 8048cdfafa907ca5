"""The REPL's commands that change the chat itself: its messages, their versions (branches), forks, deletion, title,
and finding a chat by what was said in it. Messages are numbered from 1, as ``/messages`` shows them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..chats.records import UserTurn
from ..chats.search import fts_query

if TYPE_CHECKING:
    from .shell import Repl


def _number(repl: Repl, arg: str, usage: str, *, default: int | None = None) -> int | None:
    """Message ``arg`` (from 1, -1 the last) as a turn index, or None having said how to name one."""
    count = len(repl.session.turns)
    if not arg and default is not None:
        return default
    if re.fullmatch(r"-?[0-9]+", arg):
        n = int(arg)
        if 1 <= n <= count or -count <= n <= -1:
            return n - 1 if n > 0 else count + n
    repl.say(f"usage: {usage} — N from 1 to {count} (/messages numbers them)" if count else
             "no messages in this chat yet — ask something first", "class:warn")
    return None


def versions(repl: Repl, index: int) -> str:
    where = repl.session.alternatives(index)
    return f" ‹ {where[0]}/{where[1]} ›" if where else ""


def messages(repl: Repl, _arg: str) -> None:
    turns = repl.session.turns
    if not turns:
        repl.say("no messages in this chat yet", "class:dim")
        return
    for i, turn in enumerate(turns):
        first = " ".join(turn.text.split())
        repl.say(f"  {i + 1:>3} {turn.role:<9}{versions(repl, i):<10} {first[:90]}{'…' if len(first) > 90 else ''}")
    if repl.session.branches.forks:
        repl.say("/branch N prev|next shows another version of message N", "class:dim")


def edit(repl: Repl, arg: str) -> None:
    last = next((i for i in range(len(repl.session.turns) - 1, -1, -1)
                 if isinstance(repl.session.turns[i], UserTurn)), None)
    index = _number(repl, arg, "/edit [N]", default=last)
    if index is None:
        return
    turn = repl.session.turns[index]
    if not isinstance(turn, UserTurn):
        repl.say(f"message {index + 1} is a reply — /edit edits your own messages; /retry answers again",
                 "class:warn")
        return
    repl.editing = index
    repl.unsent = turn.text
    repl.say(f"editing message {index + 1}: Enter sends it in place of the old one (kept as a version:"
             f" /branch {index + 1} prev); Ctrl+C leaves it as it was", "class:dim")


def branch(repl: Repl, arg: str) -> None:
    number, _, direction = arg.partition(" ")
    index = _number(repl, number, "/branch N [prev|next]")
    if index is None:
        return
    if direction not in ("", "prev", "next"):
        repl.say("usage: /branch N [prev|next] — the version of message N shown", "class:warn")
        return
    if not direction:
        where = repl.session.alternatives(index)
        repl.say(f"message {index + 1}: version {where[0]} of {where[1]}" if where else
                 f"message {index + 1} has one version — /edit {index + 1} (or /retry for a reply) makes another",
                 "class:dim")
        return
    shown, count = repl.controller.session.step_alternative(index, -1 if direction == "prev" else 1)
    repl.say(f"message {index + 1}: version {shown} of {count}", "class:dim")
    repl.print_turns(index)


def fork(repl: Repl, arg: str) -> None:
    index = _number(repl, arg, "/fork [N]", default=len(repl.session.turns) - 1)
    if index is None:
        return
    before = repl.session.title
    repl.controller.fork(index)
    private = " — private, as the chat it came from: never drafted from in another chat" if repl.session.private else ""
    repl.say(f"new chat {repl.session.title!r} with messages 1 … {index + 1} of {before!r} (which is kept as it"
             f" was){private}", "class:dim")


def delete(repl: Repl, arg: str) -> None:
    index = _number(repl, arg, "/delete N")
    if index is None:
        return
    count = len(repl.session.turns) - index
    repl.controller.delete_from(index)
    shown = len(repl.session.turns) - index
    repl.say(f"deleted message {index + 1}" + (f" and the {count - 1} after it" if count > 1 else ""), "class:dim")
    if shown > 0:  # another version was there: it is shown now
        repl.say(f"message {index + 1} shows another of its versions now{versions(repl, index)}:", "class:dim")
        repl.print_turns(index)


def title(repl: Repl, arg: str) -> None:
    if not arg:
        repl.say(f"this chat is {repl.session.title!r} — /title TEXT renames it" if repl.session.title else
                 "this chat has no title yet: its first message names it (/title TEXT names it now)", "class:dim")
        return
    repl.controller.rename(arg)
    repl.say(f"renamed: {repl.session.title!r}", "class:dim")


def search(repl: Repl, words: str) -> None:
    store = repl.session.store
    if store is None:
        repl.say("chats are not being saved (no database): there is nothing to search", "class:warn")
        return
    if fts_query(words) is None:
        repl.say("usage: /search WORDS — the messages of every chat holding them (/open N opens one)", "class:warn")
        return
    hits = store.search(words, 20)
    for hit in hits:
        excerpt, _ = hit.excerpt(words, 80)
        repl.say(f"  {hit.chat_id:>4}  {hit.title[:30]:<30}  {hit.where}: {excerpt}")
    repl.say(f"{len(hits)} hit{'s' * (len(hits) != 1)}" + (" — /open N opens chat N" if hits else ""), "class:dim")
