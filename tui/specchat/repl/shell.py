"""The REPL: read a line, answer it into the scrollback, repeat — on the same backend, session and store as the app.

Every call into the backend runs on the worker thread of ``chats.replies.Replies``, the same for the REPL's whole life.
While a reply is generated there, this thread prints each frame of it (at most five times a second, like the app's
frames, so printing never takes the cores from decoding) and keeps the status line current.
Ctrl+C stops a reply (kept, marked cancelled); a second Ctrl+C, or the terminal closing, quits with the partial
reply saved as interrupted.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from prompt_toolkit import PromptSession, print_formatted_text
from prompt_toolkit.completion import Completer
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.output import ColorDepth, Output, create_output

from .. import paths
from ..chats.choice import Choice
from ..chats.controller import ChatController, ControllerViews
from ..chats.switcher import Switched
from ..chats.exchange import Exchange
from ..chats.records import INTERRUPTED, ReplyRecord
from ..chats.replies import Frame, Replies
from ..chats.store import DIR_MODE, FILE_MODE, Store, private
from ..chats.store_opening import open_store
from ..engine import DraftRejected, ReplyStarted, TokenEmitted
from ..errors import Refused, SpecchatError
from ..figures import summary_line
from ..engine import phases
from ..profiles.embedded import DERIVING
from ..text import valid_text
from . import render
from .interrupts import Interrupts, Patience, unechoed
from .status import MemoryLine, StatusLine

FRAME_S = 0.2
CLOSE_WAIT_S = 60.0  # every long operation stops when cancelled; this only bounds a backend that hangs outright
TOOLBAR_REFRESH_S = 0.5  # the toolbar is drawn again this often at the prompt: "loading…" turns into the figures


@dataclass
class ReplSettings:
    profile: str
    color: bool = True
    plain: bool = False  # for screen readers: only the text and the summary
    vi: bool = False
    db_path: Path | None = None  # None: chats in memory only
    history_path: Path | None = None  # None: prompt history in memory only
    max_tokens: int = 1024
    settings_file: Path = field(default_factory=paths.settings_file)  # the favourite profiles


@dataclass(frozen=True)
class Commands:
    """The slash commands, given to the REPL by whoever makes it (``repl.make_repl``): the shell runs a line through
    ``run`` and completes through ``completer``, and knows nothing else of them (they know the shell)."""

    run: Callable[[Repl, str], None]
    completer: Callable[[Repl], Completer]


class Repl(ControllerViews):
    def __init__(self, settings: ReplSettings, commands: Commands, *, input: Input | None = None,
                 output: Output | None = None, text_out: TextIO | None = None, interactive: bool = True) -> None:

        self.settings = settings
        self.commands = commands
        self.interactive = interactive
        self.text_out = text_out or sys.stdout
        self.output = output or create_output()
        self.ghosts = False
        self.quitting = False
        self._advised: set[str] = set()  # profiles whose "slower than plain" advice was given
        self.unsent = ""  # a message refused before it began (too long for the context): the next prompt holds it
        self.editing: int | None = None  # the message /edit put into the prompt: what is sent next replaces it
        self._loading: tuple[Future, list[str]] | None = None  # the first load, while it runs, and what it said
        self.failed_start = False
        self.memory = MemoryLine()
        self.controller = ChatController(self._open_store(), settings.profile, self._problem,
                                         max_tokens=settings.max_tokens)
        # A job that raised says so on this thread, at the next line read or reply ended (printing is not thread-safe).
        self._job_errors: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.replies = Replies(self.controller, self._job_errors.put)
        self.replies.start()
        self.prompt: PromptSession | None = None
        if interactive:  # piped lines need no line editor
            if settings.history_path is not None:
                settings.history_path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
                settings.history_path.touch(mode=FILE_MODE)
                private(settings.history_path, FILE_MODE)  # a prompt history is as private as the chats
            history = FileHistory(str(settings.history_path)) if settings.history_path else InMemoryHistory()
            self.prompt = PromptSession(history=history, input=input, output=self.output,
                                        completer=commands.completer(self), complete_while_typing=True,
                                        key_bindings=self._keys(), vi_mode=settings.vi,
                                        color_depth=None if settings.color else ColorDepth.MONOCHROME,
                                        bottom_toolbar=None if settings.plain else self._toolbar,
                                        refresh_interval=TOOLBAR_REFRESH_S)

    # -- output --------------------------------------------------------------------------------------------------

    def say(self, line: str, style: str = "") -> None:
        """A line of the REPL's own (not model output)."""
        self._print(FormattedText([(style, line + "\n")]))

    def print_turns(self, start: int = 0) -> None:
        """The chat's turns from ``start`` on: the user's dimmed, the replies in their colours."""
        for turn in self.session.turns[start:]:
            if isinstance(turn, ReplyRecord):
                self.print_record(turn)
            else:
                self.say(f"› {turn.text}", "class:dim")

    def print_record(self, record: ReplyRecord) -> None:
        fragments = []
        for i, (text, kind) in enumerate(record.segments):
            fragments.append((f"class:{kind}", text))
            if self.ghosts and i in record.ghosts:
                fragments.append(("class:ghost", record.ghosts[i]))
        self._print(FormattedText([*fragments, ("", "\n")]))

    def _print(self, text: FormattedText) -> None:
        if self.settings.color and not self.settings.plain:
            print_formatted_text(text, style=render.STYLE, end="", output=self.output)
        else:
            self.text_out.write("".join(fragment for _, fragment, *_ in text))
            self.text_out.flush()

    def _say_job_errors(self) -> None:
        while not self._job_errors.empty():
            self._problem(f"the engine stopped: {self._job_errors.get()}", True)

    def _problem(self, line: str, error: bool) -> None:
        self.say(("specchat: " if error else "") + line, "class:warn" if error else "class:dim")

    def _toolbar(self) -> FormattedText:
        name = self.profile.name if self.profile else self.settings.profile
        if self._loading is not None and not self._loading[0].done():
            said = self._loading[1]
            doing = f": {said[-1]}" if said else "…"  # the phase the load is in (engine/phases.py)
            return FormattedText([("class:toolbar", f"loading {name}{doing} (a message sent now waits for it)")])
        width = self.output.get_size().columns
        return FormattedText([("class:toolbar", render.figures(self.telemetry, name, self.controller.switcher.method,
                                                               self.memory.text(self.controller.facts), width))])

    # -- set-up ----------------------------------------------------------------------------------------------------

    def _open_store(self) -> Store | None:
        if self.settings.db_path is None:
            return None
        store, problem = open_store(self.settings.db_path, lambda line: self._problem(line, False))
        if problem:
            self._problem(problem, True)
        return store

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()

        @keys.add("escape", "enter")
        def _newline(event) -> None:  # Alt+Enter or Esc then Enter: a newline inside the message
            event.current_buffer.insert_text("\n")

        return keys

    def load(self, name: str) -> str:
        """Load (or switch to) a profile with the least work; returns the line that says what it took."""
        return self.switch(Choice(name))

    def switch(self, choice: Choice) -> str:
        """Run ``choice`` (a profile, or a toggle of the one in use) with the least work; returns the line that says
        what it took. Ctrl+C meanwhile does not end the REPL: a load runs to its end (the previous profile stays on
        failure)."""
        before = self.controller.choice
        with Patience() as patience, phases.told(lambda line: self.say(line, "class:dim")):
            try:
                switched = self.on_engine(self.controller.switcher.switch, choice)
            except SpecchatError:
                self.controller.switcher.switch_failed()
                raise
        notes = self.controller.switcher.profile_switched(switched)
        if not self.settings.plain:
            for note in notes:
                self._problem(f"note: {note}", False)
        if patience.interrupted:
            self.say("(Ctrl+C: a profile loads to its end — /profile NAME switches again)", "class:dim")
        return switched.announcement(before)

    def on_engine(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call`` run on the backend's worker thread; its result (or exception) here."""
        return self.replies.call(call, *args, **kwargs)

    def _start(self) -> bool:
        """Load the first profile. False (having said why) when it cannot."""
        try:
            self.load(self.settings.profile)
        except SpecchatError as exc:
            self._problem(str(exc), True)
            return False
        return True

    def _start_loading(self) -> None:
        """The first profile loads on the worker thread while the prompt is already up: a message sent before it is
        ready waits for it (``_loaded``). The phase it is in shows in the toolbar; a first start's deriving of the
        demo draft is said again after, with its progress."""
        said: list[str] = []

        def load() -> Switched:
            with phases.told(said.append):
                return self.controller.switcher.switch(Choice(self.settings.profile))

        self._loading = (self.replies.future(load), said)

    def _loaded(self) -> bool:
        """The first load finished, its lines said; False when it failed (said, and the REPL ends) or the user
        withdrew the message waiting for it (Ctrl+C: it goes back to the prompt)."""
        if self._loading is None:
            return True
        future, said = self._loading
        if not future.done():
            self.say("(waiting for the model to load — the message is sent then; Ctrl+C withdraws it)", "class:dim")
        try:
            switched = future.result()
        except KeyboardInterrupt:
            self.say("(withdrawn — it is back in the prompt; the model goes on loading)", "class:dim")
            return False
        except SpecchatError as exc:
            self._loading = None
            for line in said:
                self.say(line, "class:dim")
            self.controller.switcher.switch_failed()
            self._problem(str(exc), True)
            self.quitting, self.failed_start = True, True
            return False
        self._loading = None
        for line in said:
            if line.startswith(DERIVING):  # once per machine, and long: said; the other phases were the toolbar's
                self.say(line, "class:dim")
        notes = self.controller.switcher.profile_switched(switched)
        if not self.settings.plain:
            for note in notes:
                self._problem(f"note: {note}", False)
            self.say(f"loaded {switched.profile.name} · {self.backend.where}", "class:dim")
        return True

    # -- the loop --------------------------------------------------------------------------------------------------

    def run(self) -> int:
        assert self.prompt is not None
        self._start_loading()
        if not self.settings.plain:
            self.say(f"specchat repl · loading {self.settings.profile}… (a message sent meanwhile waits for it) ·"
                     " /help for commands, Ctrl+D to quit", "class:dim")
        try:
            while not self.quitting:
                try:
                    text = valid_text(self.prompt.prompt("› ", default=self.unsent))  # slash commands' too
                    self.unsent = ""
                except KeyboardInterrupt:
                    self.unsent, self.editing = "", None
                    continue  # Ctrl+C at the prompt clears the line (and leaves an edited message as it was)
                except EOFError:
                    break  # Ctrl+D on an empty line
                if not self._loaded():
                    self.unsent = text if not self.quitting else ""
                    continue
                self._handle(text)
        finally:
            self.close()
        return 2 if self.failed_start else 0

    def run_lines(self, lines: TextIO) -> int:
        """Not a terminal (``echo hi | specchat repl``): answer each line (a slash command runs, as typed), no
        toolbar, then exit."""
        if not self._start():
            return 2
        try:
            for line in lines:
                self._handle(line.rstrip("\n"))
                if self.quitting:
                    break
        finally:
            self.close()
        return 0

    def _handle(self, text: str) -> None:
        """A line read: a slash command, the text of the message /edit opened, or a message."""

        self._say_job_errors()
        editing, self.editing = self.editing, None  # an edit emptied, or a command typed, ends it
        if not text.strip():
            return
        if text.startswith("/"):
            if editing is not None:
                self.say(f"(message {editing + 1} was left as it was)", "class:dim")
            self.commands.run(self, text)
        else:
            self.answer_or_say_why(text, editing)

    def answer(self, text: str, editing: int | None = None) -> None:
        """Ask ``text`` (in place of message ``editing``), print the reply as it streams, then its summary."""
        self.run_exchange(self.controller.begin(text) if editing is None else self.controller.edit(editing, text))
        if self.unsent and editing is not None and self.prompt is not None:
            self.editing = editing  # refused before it began: what the prompt holds again is still that edit

    def answer_or_say_why(self, text: str, editing: int | None = None) -> None:
        try:
            self.answer(text, editing)
        except Refused as exc:  # refused before anything changed (a file that cannot be attached): kept to change
            if self.prompt is not None:  # (piped lines go on: the next is a message of its own)
                self.unsent, self.editing = text, editing
            self._problem(str(exc), True)
        except SpecchatError as exc:  # e.g. no model loaded after a failed switch: one line, the REPL goes on
            self._problem(str(exc), True)

    def run_exchange(self, exchange: Exchange) -> None:
        """Run an exchange the controller began (a question, a regenerated one), printing it as it streams."""
        record = self.session.last_reply
        assert record is not None
        status = StatusLine(self.output) if self.interactive and not self.settings.plain else None
        finished = failed = None
        with Interrupts(exchange.cancel, self.quit_soon), status or nullcontext(), \
                unechoed(self.prompt and self.prompt.input):
            self.replies.answer(exchange)
            for frame in self.replies.frames(FRAME_S):
                closes = finished is None and (frame.finished is not None or frame.ended)  # the reply's line ends
                self._print_frame(frame, status, closes)
                finished, failed = frame.finished or finished, frame.failure
        if failed is not None:
            self.unsent = self.controller.failed(failed) or ""
        self.session.save()
        self._say_job_errors()
        if failed is not None:
            self._problem(failed.error, True)
        elif finished is not None:
            self.say(summary_line(finished.stats, record.finish_reason or finished.finish_reason), "class:dim")
            self._advise()

    def _advise(self) -> None:
        """Once a profile: why speculation is slower than plain here, and what pays instead."""
        tip = self.controller.advice()
        name = self.profile.name if self.profile else ""
        if tip is None or name in self._advised:
            return
        self._advised.add(name)
        instead = f"/profile {tip.suggestion}" if tip.suggestion else "/spec off"
        self.say(f"slower than plain: {tip.why} — {instead} ({tip.does})", "class:warn")

    def _print_frame(self, frame: Frame, status: StatusLine | None, closes: bool) -> None:
        """A frame of the reply: its tokens in their colours (a rejected tail as ghost text, where shown)."""
        fragments: list[tuple[str, str]] = []
        for event in frame.events:
            if isinstance(event, TokenEmitted):
                fragments.append((f"class:{event.kind.value}", event.text))
            elif isinstance(event, ReplyStarted) and event.stored_chats and not self.settings.plain:
                fragments.append(("class:dim", f"({event.stored_chats})\n"))
            elif isinstance(event, DraftRejected) and self.ghosts and not self.settings.plain:
                fragments.append(("class:ghost", event.text))
        if closes:
            fragments.append(("", "\n"))
        if fragments:
            self._print(FormattedText(fragments))
        if status is not None:
            status.show(self._toolbar()[0][1])

    def quit_soon(self) -> None:
        """The terminal closed (or a second Ctrl+C): stop what runs, then leave; a reply it stops is kept, marked
        interrupted (``close``)."""
        self.quitting = True
        self.controller.quitting()

    def close(self) -> None:
        if self._loading is not None:  # leaving before the first load ended: it ends first (nothing frees under it)
            self._loading[0].exception()
        self.replies.close(CLOSE_WAIT_S)


__all__ = ["INTERRUPTED", "Commands", "Repl", "ReplSettings"]
