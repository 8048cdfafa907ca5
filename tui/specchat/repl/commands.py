"""The REPL's slash commands: what each does, how it completes, and a "did you mean" for the rest."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from .. import paths
from ..chats.ab import compare
from ..chats.export import export
from ..chats.records import ReplyRecord, UserTurn
from ..errors import SpecchatError, one_line
from ..profiles import available_profiles

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
        repl.say(f"profile {repl.profile.name if repl.profile else '–'} — /profile NAME switches (Tab completes)")
        return
    repl.say(f"profile {name}: {repl.load(name)}", "class:dim")


def _ghosts(repl: Repl, _arg: str) -> None:
    repl.ghosts = not repl.ghosts
    if repl.ghosts and repl.backend is not None and not repl.backend.rejected_tails:
        repl.say(f"ghosts on — but {repl.backend.where} reports how many draft tokens it rejected, never which",
                 "class:warn")
    else:
        repl.say(f"ghosts {'on: rejected drafts show struck through' if repl.ghosts else 'off'}", "class:dim")


def _last(repl: Repl) -> tuple[int, str, ReplyRecord] | None:
    exchange, record = repl.session.last_exchange(), repl.session.last_reply
    if exchange is None or record is None or record.stats is None:
        repl.say("nothing to compare yet — ask something first", "class:warn")
        return None
    return exchange[0], exchange[1], record


def _ab(repl: Repl, _arg: str) -> None:
    last = _last(repl)
    if last is None or repl.backend is None:
        return
    index, text, record = last
    backend = repl.backend
    repl.say("A/B: the last prompt again without speculation…", "class:dim")
    history = repl.session.engine_messages(backend.target_id, upto=index)
    plain, tokens = repl.on_engine(backend.rerun_plain, history, text, record.reused_tokens or 0,
                                   repl.settings.max_tokens)
    result = compare(dict(record.stats), list(record.tokens), plain, tokens, not backend.config.sampling.greedy)
    if plain.get("decode_tps"):
        repl.telemetry.set_plain_reference(plain["decode_tps"], "A/B plain run of the last prompt")
    rows = [("", f"speculation ({result.spec.get('method')})", "plain")]
    for label, key, scale, pattern in (("prompt tokens decoded", "prefill_tokens", 1, "d"), ("TTFT ms", "ttft", 1000, ".0f"),
                                       ("decode tok/s", "decode_tps", 1, ".1f"), ("total s", "t_total", 1, ".2f")):
        rows.append((label, *(("–" if side.get(key) is None else format(side[key] * scale, pattern))
                              for side in (result.spec, result.plain))))
    for row in rows:
        repl.say(f"  {row[0]:<22}{row[1]:>24}{row[2]:>12}")
    if result.spec.get("decode_tps") and result.plain.get("decode_tps"):
        repl.say(f"  speed-up {result.spec['decode_tps'] / result.plain['decode_tps']:.2f}×")
    repl.say("  replies identical: " + ("not compared (sampled: they differ by chance)" if result.sampled else
                                        "yes" if result.identical else "NO — the replies differ"))


def _stats(repl: Repl, _arg: str) -> None:
    last = _last(repl)
    if last is not None:
        repl.say(json.dumps(last[2].stats, indent=1, default=str))


def _system(repl: Repl, text: str) -> None:
    repl.session.set_system_prompt(text.strip() or None)
    repl.say(f"system prompt {'set' if text.strip() else 'cleared'} for this chat", "class:dim")


def _new(repl: Repl, _arg: str) -> None:
    repl.session.new(repl.profile_system_prompt())
    repl.telemetry.reset_chat()
    repl.say("new chat", "class:dim")


def _chats(repl: Repl, _arg: str) -> None:
    if repl.session.store is None:
        repl.say("chats are not being saved (no database)", "class:warn")
        return
    for chat in repl.session.store.conversations()[:20]:
        repl.say(f"  {chat.id:>4}  {chat.title}  ({chat.profile})")


def _open(repl: Repl, arg: str) -> None:
    if repl.session.store is None or not arg.strip().isdigit():
        repl.say("usage: /open N, N from /chats", "class:warn")
        return
    repl.session.open(int(arg))
    repl.telemetry.reset_chat()
    for turn in repl.session.turns:
        if isinstance(turn, UserTurn):
            repl.say(f"› {turn.text}", "class:dim")
        else:
            repl.print_record(turn)


def _export(repl: Repl, arg: str) -> None:
    written = export(repl.session, Path(arg).expanduser() if arg.strip() else paths.exports_dir())
    repl.say(f"exported to {written[0]} and {written[1].name}", "class:dim")


def _retry(repl: Repl, _arg: str) -> None:
    exchange = repl.session.last_exchange()
    if exchange is None:
        repl.say("nothing to answer again yet", "class:warn")
        return
    repl.session.drop_from(exchange[0])
    repl.answer(exchange[1])


def _quit(repl: Repl, _arg: str) -> None:
    repl.quitting = True


COMMANDS: dict[str, Command] = {
    "/help": Command("/help", "this list", _help),
    "/profile": Command("/profile NAME", "switch profile, reloading only what changed", _profile,
                        lambda _repl: sorted(available_profiles())),
    "/ghosts": Command("/ghosts", "show rejected draft tokens, struck through", _ghosts),
    "/ab": Command("/ab", "rerun the last prompt without speculation and compare", _ab),
    "/stats": Command("/stats", "the last reply's telemetry in full", _stats),
    "/system": Command("/system TEXT", "this chat's system prompt (empty: none)", _system),
    "/new": Command("/new", "start a new chat", _new),
    "/chats": Command("/chats", "saved chats, newest first", _chats),
    "/open": Command("/open N", "open saved chat N", _open,
                     lambda repl: [str(c.id) for c in repl.session.store.conversations()] if repl.session.store else []),
    "/export": Command("/export [DIR]", "this chat as Markdown and JSON", _export),
    "/retry": Command("/retry", "answer the last message again", _retry),
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


class SlashCompleter(Completer):
    def __init__(self, repl: Repl) -> None:
        self.repl = repl

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
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
