"""What several test modules share, in one place: the engine's runs, the app driven through Pilot, the REPL on a
pipe, the command line as a user runs it, and stored chats built by hand. (Fixtures are conftest.py's; the backend
kinds of the conformance suite are backend_kinds.py's; GGUF files written for a test, gguf_fixtures.py's.)"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.vt100 import Vt100_Output

from specchat import paths
from specchat.app.chat.column import ChatColumn
from specchat.app.chat_app import SpecchatApp
from specchat.app.chat.prompt import PromptInput
from specchat.app.chat.reply import ReplyView
from specchat.chats.replies import Frame
from specchat.chats.session import ChatSession
from specchat.engine import Engine, Message
from specchat.engine.engine_config import default_threads
from specchat.engine.events import (ContextTrimmed, DraftRejected, Event, ReplyFinished, ReplyStarted, StepVerified,
                                    TokenEmitted)
from specchat.engine.repetition import LoopRule
from specchat.repl import Repl, ReplSettings, make_repl

THREADS = default_threads()  # every model of the tests decodes with one thread per core of its worker (machine_share.py)


class BusyLoops:
    """A busy machine made inside a test: ``n`` processes that keep a core each busy until ``stop()``."""

    def __init__(self, n: int = 2) -> None:
        self.loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
        time.sleep(0.3)  # running, not starting

    def stop(self) -> None:
        for loop in self.loops:
            loop.kill()
            loop.wait()
        time.sleep(0.3)


@contextlib.contextmanager
def on_cores(cores: set[int]) -> Iterator[None]:
    """This thread on ``cores`` only, as ``taskset`` or a container's cpuset would hold it (what ``engine.cpu.cores()``
    and the busy check read); the cores it had are given back after."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- the engine ------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """Everything one reply produced, split by event type."""

    events: list[Event]
    tokens: list[TokenEmitted] = field(default_factory=list)
    rejected: list[DraftRejected] = field(default_factory=list)
    steps: list[StepVerified] = field(default_factory=list)
    trimmed: list[ContextTrimmed] = field(default_factory=list)

    def __post_init__(self) -> None:
        for e in self.events:
            {TokenEmitted: self.tokens, DraftRejected: self.rejected, StepVerified: self.steps,
             ContextTrimmed: self.trimmed}.get(type(e), []).append(e)

    @property
    def started(self) -> ReplyStarted:
        return next(e for e in self.events if isinstance(e, ReplyStarted))

    @property
    def finished(self) -> ReplyFinished:
        assert isinstance(self.events[-1], ReplyFinished)
        return self.events[-1]

    @property
    def ids(self) -> list[int]:
        return [t.token for t in self.tokens]


def run(engine: Engine, prompt: str, **kwargs) -> Run:
    return Run(list(engine.reply(prompt, **kwargs)))


# -- replies stuck in a loop (the rule read from its words alone, sharing nothing with LoopWatch) ----------
# Prompts the bundled target answers in a loop (found by asking it): accented Spanish, an emoji row, Chinese.
LOOPS = ("Repite: código de código de código", "Escribe una lista de 30 emojis 🙂", "写一首关于猫的诗")
LIMIT = 120  # tokens: each of LOOPS falls into its loop well before


def first_loop(ids: list, rule: LoopRule = LoopRule()) -> tuple[int, int] | None:
    """Where a reply stops and the span it repeats, read from the rule's words alone: the first length n whose last
    max(span × repeats, min_tokens) tokens are one span of at most window // repeats tokens over and over (slowly,
    token by token, sharing nothing with LoopWatch)."""
    for n in range(1, len(ids) + 1):
        for span in range(1, rule.window // rule.repeats + 1):
            stretch = max(span * rule.repeats, rule.min_tokens)
            if stretch <= n and all(ids[i] == ids[i - span] for i in range(n - stretch + span, n)):
                return n, span
    return None


def loop_cut(ids: list[int], piece) -> tuple[int, int] | None:
    """Where a reply in a loop ends (``first_loop``), moved on to the token that ends a character when the loop was
    completed inside one (``piece``: a token's bytes)."""
    loop = first_loop(ids)
    if loop is None:
        return None
    n, span = loop
    while n < len(ids):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        decoder.decode(b"".join(piece(t) for t in ids[:n]))
        if not decoder.getstate()[0]:  # no bytes waiting for the rest of their character
            break
        n += 1
    return n, span


# -- profiles --------------------------------------------------------------------------------------------------


def endless_profile(base: str = "tiny") -> str:
    """A user profile: the preset ``base`` with loops not stopped. Greedy SmolLM2 tells a long story in a loop, and
    the loop rule can end it by itself ("loop") a few seconds in; a test that acts on a reply still streaming (quit,
    Ctrl+C, Esc an A/B) runs this one, whose reply can only end at its token cap. Returns the profile's name."""
    folder = paths.user_profiles_dir()
    folder.mkdir(parents=True, exist_ok=True)
    preset = (paths.bundled_profiles_dir() / f"{base}.toml").read_text()
    assert "[chat]" in preset, f"{base}.toml has no [chat] section: its replies would stop in a loop after all"
    name = f"{base}-endless"
    (folder / f"{name}.toml").write_text(preset.replace("[chat]", "[chat]\nstop_on_loop = false", 1))
    return name


# -- the app through Pilot -------------------------------------------------------------------------------------


SIZE = (140, 45)  # the terminal the app tests run in


async def statuses_while_loading(pilot, every: float = 0.01, timeout: float = 120.0) -> list[str]:
    """Each status line the app showed, in order, until its first load is done (the empty line last)."""
    app, statuses = pilot.app, []
    for _ in range(int(timeout / every)):
        if app.jobs.status not in statuses[-1:]:
            statuses.append(app.jobs.status)
        if app.backend is not None and app.busy is None:
            break
        await pilot.pause(every)
    return statuses


def arrive(app: SpecchatApp, events: list[Event]) -> None:
    """``events`` come up to the app as one frame of a reply (``Replies.frame``: absorbed, then posted)."""
    app.chat_view.column.post_message(ChatColumn.FrameArrived(Frame(events, app.controller.absorb(events), None,
                                                                      False)))


async def wait_until(pilot, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


async def at_rest(pilot, widget, timeout: float = 30.0) -> None:
    """Wait until ``widget`` stays where it is on screen for three frames in a row: a reply's last frame re-renders it
    (markdown) and the anchored chat scrolls after it, and a drag or click that straddles that move lands elsewhere."""
    deadline = time.monotonic() + timeout
    seen, still = None, 0
    while still < 3:
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the widget to stop moving")
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.05)
        region = (widget.region, widget.virtual_size)
        still = still + 1 if region == seen else 0
        seen = region


async def ready(pilot) -> SpecchatApp:
    app = pilot.app
    await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
    return app


async def ask(pilot, text: str) -> ReplyView:
    app = pilot.app
    prompt = app.query_one(PromptInput)
    prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.busy is None and app.chat_view.chat_log.last_reply is not None and app.chat_view.chat_log.last_reply.finish_reason)
    return app.chat_view.chat_log.last_reply


LONG_STORY = "Write a very long story about a dragon and a knight."
HELD_LONG_STORY = {LONG_STORY: 8}
# The next turn after a cut story, which the model ends by itself in 15 to 38 tokens wherever the story was cut (at
# every cut from 8 to 100 tokens in, greedy): a follow-up held to plain decoding then decodes tens of tokens in each of
# its runs, not max_tokens. ("Who is braver? Answer in one sentence." ran to the limit after some cuts: a server
# streams past 8 tokens before Esc lands, and the test took 36 s instead of 6.)
FOLLOW_UP = "Describe the dragon in one sentence."  # a recorded test that cuts the long story holds it where the front end sees 8 tokens


async def start_long_reply(pilot) -> None:
    """Send a prompt with a long answer and wait until a few tokens of it are on screen."""
    app = pilot.app
    app.query_one(PromptInput).load_text(LONG_STORY)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.chat_view.chat_log.last_reply is not None and len(app.chat_view.chat_log.last_reply.segments) >= 8)


def kept_messages(backend) -> list[Message]:
    """The conversation the in-process backend went on from in its last reply, that reply included: the engine's own
    (real, or recording) or the one a recorded backend was handed (tests/cassettes.py)."""
    import cassettes

    if isinstance(backend, cassettes.RecordedBackend):
        return backend.messages
    return getattr(backend, "real", backend).engine.messages


def models_freed(backend) -> bool:
    import cassettes

    if isinstance(backend, cassettes.RecordedBackend):
        return backend.closed
    return getattr(backend, "real", backend).engine.ctx.ptr is None


def notices(app) -> list[str]:
    """The notifications an app has shown and not yet dismissed. Textual has no public reader of them: this is the
    one place that reaches into its private list."""
    return [str(n.message) for n in app._notifications]


async def noticed(pilot, fragment: str, timeout: float = 15.0) -> list[str]:
    """Wait until a notice says ``fragment``; the notices shown then. ``App.notify`` posts a message: a notice is on
    screen a moment after the handler that raised it returned, so a test that reads at once can miss it on a busy
    machine (CI did, twice)."""
    try:
        await wait_until(pilot, lambda: any(fragment in n for n in notices(pilot.app)), timeout=timeout)
    except AssertionError:
        raise AssertionError(f"no notice says {fragment!r}; shown: {notices(pilot.app)}") from None
    return notices(pilot.app)


def plain_text(widget) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(widget.content)
    return console.export_text()


# -- the REPL on a pipe ----------------------------------------------------------------------------------------


CTRL_D = "\x04"


def run_repl(settings: ReplSettings, *keys: str, during=None, pace: float = 0.5) -> tuple[Repl, str, str]:
    """Type ``keys`` into a REPL (prompt-toolkit's pipe input) and run it until they end; returns the REPL, what it
    drew on the terminal and what it wrote as plain text. Each further piece of ``keys`` is typed ``pace`` seconds
    after the one before at the prompt, as a person would: a completion menu needs half a second to appear (a test
    whose keys open no menu types faster)."""
    terminal, text = io.StringIO(), io.StringIO()
    output = Vt100_Output(terminal, lambda: Size(rows=30, columns=120), term="xterm-256color")
    with create_pipe_input() as pipe:
        pipe.send_text(keys[0])
        repl = make_repl(settings, input=pipe, output=output, text_out=text)

        def type_the_rest() -> None:
            for piece in keys[1:]:
                while not repl.prompt.app.is_running:  # the profile is still loading
                    time.sleep(0.05)
                time.sleep(pace)
                pipe.send_text(piece)

        threading.Thread(target=type_the_rest, daemon=True).start()
        if during is not None:
            threading.Thread(target=during, args=(repl,), daemon=True).start()
        assert repl.run() == 0
    return repl, terminal.getvalue(), text.getvalue()


def signal_once_streaming(signum: int):
    """What a terminal sends (Ctrl+C, a closed window), once the reply has streamed 8 segments."""
    def send(repl: Repl) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            reply = repl.session.last_reply
            if reply is not None and len(reply.segments) >= 8:
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.02)
    return send


# -- the command line ------------------------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``specchat`` as a user runs it; nothing is piped in unless ``stdin`` says what."""
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, input=stdin if stdin is not None else "")


def assert_one_clear_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""  # nothing was generated: no silent fallback to another mode


# -- stored chats ----------------------------------------------------------------------------------------------


def finished_reply(session: ChatSession, text: str) -> None:
    """A reply of one token with ``text``, finished and saved, as its events would leave it."""
    record = session.add_reply("t")
    record.segments, record.tokens, record.finish_reason = [(text, "target")], [1], "stop"
    session.reply_changed(record)
