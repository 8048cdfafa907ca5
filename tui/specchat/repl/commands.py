"""The REPL's slash commands: what each does, how it completes, and a "did you mean" for the rest."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from .. import paths
from ..chats.attachments import candidates, mention_before
from ..chats.choice import Choice
from ..chats.replay import NO_TRACE, Replay, step_lines, token_lines
from ..errors import SpecchatError, one_line
from ..figures import DASH
from ..profiles import available_profiles
from ..profiles.favourites import favourite, load_favourites
from ..text import is_number

from . import chat_commands as editing
from .interrupts import Interrupts

if TYPE_CHECKING:
    from .shell import Repl


@dataclass(frozen=True)
class Command:
    usage: str
    does: str
    run: Callable[[Repl, str], None]
    complete: Callable[[Repl], Iterable[str]] = lambda _repl: ()


def _help(repl: Repl, _arg: str) -> None:
    width = max(len(c.usage) for c in COMMANDS.values())
    for command in COMMANDS.values():
        repl.say(f"  {command.usage:<{width}}  {command.does}")
    repl.say("  Enter sends · Alt+Enter or Esc Enter: new line · Ctrl+R: search history · Ctrl+C: stop a reply ·"
             " Ctrl+D: quit", "class:dim")


def _profile(repl: Repl, name: str) -> None:
    if not name:
        repl.say(f"profile {repl.profile.name if repl.profile else DASH} — /profile NAME switches (Tab completes),"
                 " /profile - goes back to the one before")
        return
    _switched(repl, repl.switch(repl.controller.switcher.previous_profile() if name == "-" else Choice(name)))


def _switched(repl: Repl, line: str) -> None:
    facts = repl.controller.facts
    repl.say(line + (f" · {facts.where}" if facts else ""), "class:dim")


def _spec(repl: Repl, arg: str) -> None:
    choice = repl.controller.choice
    if arg not in ("", "on", "off"):
        repl.say("usage: /spec [on|off] — speculation on or off for the next messages (alone: toggles)", "class:warn")
        return
    speculating = repl.backend is not None and repl.backend.config.spec.method != "none"
    if choice is not None and (arg == "off" and choice.speculation_off or arg == "on" and speculating):
        repl.say(f"speculation is {arg} already", "class:dim")
        return  # "on" for a profile that does not speculate is refused, with its reason, below
    _switched(repl, repl.switch(repl.controller.switcher.speculation_toggled()))


def _fav(repl: Repl, arg: str) -> None:
    if not arg.strip():
        names = load_favourites(repl.settings.settings_file)
        for number, name in enumerate(names, 1):
            repl.say(f"  {number}  {name}")
        repl.say("/fav N switches to favourite N" if names else
                 f"no favourites yet — list profiles as [favourites] profiles = [...] in {repl.settings.settings_file}",
                 "class:dim")
        return
    if not is_number(arg):
        repl.say("usage: /fav [N] — the favourite profiles, or switch to favourite N", "class:warn")
        return
    _switched(repl, repl.load(favourite(repl.settings.settings_file, int(arg))))


def _draft(repl: Repl, arg: str) -> None:
    arg = arg.strip()
    controller = repl.controller
    if arg in ("+", "-"):
        choice = controller.switcher.draft_cap(1 if arg == "+" else -1)
    elif arg == "auto" or is_number(arg):
        choice = controller.switcher.draft_cap_set("auto" if arg == "auto" else int(arg))
    else:
        repl.say(f"draft length {repl.backend.draft_length if repl.backend else DASH} — /draft + or - (one token more or"
                 " less per step), /draft N, /draft auto", "class:dim")
        return
    _switched(repl, repl.switch(choice))


def _ghosts(repl: Repl, _arg: str) -> None:
    repl.ghosts = not repl.ghosts
    if repl.ghosts and repl.backend is not None and not repl.backend.rejected_tails:
        repl.say(f"ghosts on — but {repl.backend.where} reports how many draft tokens it rejected, never which",
                 "class:warn")
    else:
        repl.say(f"ghosts {'on: rejected drafts show struck through' if repl.ghosts else 'off'}", "class:dim")


def _ab(repl: Repl, _arg: str) -> None:
    comparison = repl.controller.compare()
    repl.say("A/B: the last prompt again without speculation… (Ctrl+C stops it)", "class:dim")
    with Interrupts(comparison.cancel, repl.quit_soon):
        try:
            result = repl.on_engine(comparison.run)
        finally:
            repl.on_engine(repl.controller.switcher.refresh_facts)  # a managed server was restarted twice
    if result is None:
        repl.say("A/B cancelled", "class:dim")
        return
    repl.controller.compared(result)
    repl.say(result.title, "class:dim")
    rows = [("", f"speculation ({result.spec.get('method')})", "plain"), *result.rows()]
    width = max(len(label) for label, _, _ in rows) + 2
    for label, spec, plain in rows:
        repl.say(f"  {label:<{width}}{spec:>24}{plain:>16}")
    repl.say(f"  replies identical: {result.verdict}")


def _stats(repl: Repl, _arg: str) -> None:
    record = repl.session.last_reply
    if record is None or record.stats is None:
        repl.say("no finished reply yet — ask something first", "class:warn")
        return
    repl.say(json.dumps(record.stats, indent=1, default=str))


def _inspect(repl: Repl, arg: str) -> None:
    record = repl.session.last_reply
    if record is None or not record.segments:
        repl.say("no reply to inspect yet — ask something first", "class:warn")
        return
    count = len(record.segments)
    if not arg:
        marked = [f"#{i + 1} {text!r}" for i, (text, kind) in enumerate(record.segments) if kind == "corrected"]
        repl.say(f"the last reply has {count} tokens — /inspect N explains token N (1 = the first, -1 = the last)"
                 + (f"; its corrections: {', '.join(marked[:12])}" + (" …" if len(marked) > 12 else "") if marked
                    else ""), "class:dim")
        return
    n = int(arg) if re.fullmatch(r"-?[0-9]+", arg) else 0
    if not (1 <= n <= count or -count <= n <= -1):
        repl.say(f"usage: /inspect N — N from 1 to {count}, or -1 for the last token", "class:warn")
        return
    for line in token_lines(record, n - 1 if n > 0 else count + n):
        repl.say("  " + line)


def _replay(repl: Repl, arg: str) -> None:
    record = repl.session.last_reply
    if record is None or record.streaming:
        repl.say("no finished reply to replay yet — ask something first", "class:warn")
        return
    if not record.trace:
        repl.say(NO_TRACE, "class:warn")
        return
    try:
        replay = Replay.of(record.trace)
    except ValueError as exc:
        repl.say(str(exc), "class:warn")
        return
    numbers = [s.number for s in replay.steps]
    if not numbers:
        repl.say("the last reply is empty: it has no step to replay", "class:dim")
        return
    if arg and not (is_number(arg) and int(arg) in numbers):
        repl.say(f"usage: /replay [STEP] — the last reply's steps are 0 … {numbers[-1]}", "class:warn")
        return
    for i, step in enumerate(replay.steps):
        if not arg or step.number == int(arg):
            for line in step_lines(replay, i):
                repl.say(line, "class:dim" if line.startswith("  so far") else "")


def _system(repl: Repl, text: str) -> None:
    repl.controller.set_system_prompt(text)
    repl.say(f"system prompt {'set' if text.strip() else 'cleared'} for this chat", "class:dim")


def _new(repl: Repl, _arg: str) -> None:
    repl.controller.new_chat()
    repl.say("new chat", "class:dim")


def _chats(repl: Repl, _arg: str) -> None:
    if repl.session.store is None:
        repl.say("chats are not being saved (no database)", "class:warn")
        return
    for chat in repl.session.store.conversations()[:20]:
        repl.say(f"  {chat.id:>4}  {chat.title}  ({chat.profile})")


def _open(repl: Repl, arg: str) -> None:
    if repl.session.store is None or not is_number(arg):
        repl.say("usage: /open N, N from /chats", "class:warn")
        return
    repl.controller.open_chat(int(arg))
    repl.print_turns()
    if repl.session.private:
        repl.say("(a private chat: never drafted from in another one)", "class:dim")


def _export(repl: Repl, arg: str) -> None:
    written = repl.controller.export(Path(arg).expanduser() if arg.strip() else paths.exports_dir())
    repl.say(f"exported to {written[0]} and {written[1].name}", "class:dim")


def _retry(repl: Repl, _arg: str) -> None:
    repl.run_exchange(repl.controller.regenerate())


def _quit(repl: Repl, _arg: str) -> None:
    repl.quitting = True


COMMANDS: dict[str, Command] = {
    "/help": Command("/help", "this list", _help),
    "/profile": Command("/profile NAME|-", "switch profile (-: the one before), reloading only what changed",
                        _profile, lambda _repl: sorted(available_profiles())),
    "/spec": Command("/spec [on|off]", "speculation off for the next messages, or on again (the same target)",
                     _spec, lambda _repl: ("on", "off")),
    "/draft": Command("/draft +|-|N|auto", "the draft length, from the next step", _draft,
                      lambda _repl: ("+", "-", "auto")),
    "/fav": Command("/fav [N]", "the favourite profiles ([favourites] in settings.toml), or switch to one", _fav),
    "/ghosts": Command("/ghosts", "show rejected draft tokens, struck through", _ghosts),
    "/ab": Command("/ab", "rerun the last prompt without speculation and compare", _ab),
    "/stats": Command("/stats", "the last reply's telemetry in full", _stats),
    "/inspect": Command("/inspect [N]", "what decided token N of the last reply: candidates, draft, verdict", _inspect),
    "/replay": Command("/replay [STEP]", "the last reply step by step: drafts, verification, figures", _replay),
    "/system": Command("/system TEXT", "this chat's system prompt (empty: none)", _system),
    "/new": Command("/new", "start a new chat", _new),
    "/chats": Command("/chats", "saved chats, newest first", _chats),
    "/open": Command("/open N", "open saved chat N", _open,
                     lambda repl: [str(c.id) for c in repl.session.store.conversations()] if repl.session.store else []),
    "/export": Command("/export [DIR]", "this chat as Markdown and JSON", _export),
    "/retry": Command("/retry", "answer the last message again (the reply before is kept as a version)", _retry),
    "/messages": Command("/messages", "this chat's messages, numbered, with their versions ‹ k/n ›", editing.messages),
    "/edit": Command("/edit [N]", "edit your message N (default: the last) and send it again; the old one is kept",
                     editing.edit),
    "/branch": Command("/branch N [prev|next]", "the version of message N shown: another edit, another answer",
                       editing.branch),
    "/fork": Command("/fork [N]", "a new chat with this one's messages 1 … N (default: all)", editing.fork),
    "/delete": Command("/delete N", "delete message N and every message after it", editing.delete),
    "/title": Command("/title [TEXT]", "this chat's title, or rename it", editing.title),
    "/search": Command("/search WORDS", "the messages of every chat holding WORDS (accents and case aside)",
                       editing.search),
    "/quit": Command("/quit", "leave (Ctrl+D too)", _quit),
}


def run_command(repl: Repl, line: str) -> None:
    name, _, arg = line.strip().partition(" ")
    command = COMMANDS.get(name)
    if command is None:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        repl.say(f"unknown command {name}" + (f" — did you mean {close[0]}?" if close else " — /help lists them"),
                 "class:warn")
        return
    try:
        command.run(repl, arg.strip())
    except SpecchatError as exc:
        repl.say(f"specchat: {one_line(exc)}", "class:warn")


class PromptCompleter(Completer):
    """Completes slash commands and their arguments, and ``@path`` (a file to attach) anywhere in a message."""

    def __init__(self, repl: Repl) -> None:
        self.repl = repl

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        mention = mention_before(text)
        if mention is not None:  # a file to attach (chats/attachments.py)
            for path in candidates(mention, Path.cwd()):
                yield Completion(path, -len(mention), display_meta="folder" if path.endswith("/") else "file")
            return
        if not text.startswith("/") or "\n" in text:
            return
        name, space, arg = text.partition(" ")
        if not space:
            for candidate, command in COMMANDS.items():
                if candidate.startswith(name):
                    yield Completion(candidate, -len(name), display_meta=command.does)
            return
        command = COMMANDS.get(name)
        if command is None:
            return
        try:
            values = list(command.complete(self.repl))
        except SpecchatError:
            return  # e.g. the chats cannot be read: /open itself will say why
        for value in values:
            if value.startswith(arg):
                yield Completion(value, -len(arg))
