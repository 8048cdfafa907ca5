"""Every kind of backend that runs here, as a profile a user would write: in-process, a llama-server specchat starts,
a llama-server already running (started by the tests on a loopback port, the GGUF here for its tokenizer), and that
server's OpenAI-compatible chat completions standing in for vLLM. Shared by the conformance suite and its front-end
tests. With $SPECCHAT_CONFORMANCE_BACKEND set to another ``[backend] kind`` (a module dropped into the package:
test_backend_seam.py), the suite runs on that kind alone, held to the expectations of the kind it behaves like."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from helpers import THREADS
from specchat.backends.local import LocalBackend
from specchat.backends.run_config import BackendSettings, RunConfig
from specchat.backends.run_config import kind_named
from specchat.backends.server_flags import server_args
from specchat.backends.server_process import ServerProcess
from specchat.engine import Message, ModelSettings, SpecConfig
from specchat.engine.events import Event, TokenEmitted
from specchat.engine.repetition import LoopRule

SUITE_KINDS = ("in-process", "managed", "remote-llama", "remote-openai")


class UnderTest(str):
    """A kind the suite runs: equal to one of ``SUITE_KINDS``, whose expectations it is held to, and run on ``backend``,
    another ``[backend] kind`` that behaves like it."""

    backend: str

    def __new__(cls, like: str, backend: str) -> UnderTest:
        kind = super().__new__(cls, like)
        kind.backend = backend
        return kind

    def __repr__(self) -> str:
        return f"{self.backend}-as-{str(self)}"


def kinds_under_test() -> tuple[str, ...]:
    """The four kinds, or the one $SPECCHAT_CONFORMANCE_BACKEND names, as the kind its capabilities make it like."""
    name = os.environ.get("SPECCHAT_CONFORMANCE_BACKEND")
    if not name:
        return SUITE_KINDS
    kind = kind_named(name)
    return (UnderTest("in-process" if kind.runs_engine else "managed" if kind.starts_process else "remote-llama", name),)


KINDS = kinds_under_test()


def kind_id(kind: str) -> str:
    """A test's id for a kind: its name, or the other kind's and the one it is held to (``second-engine-as-in-process``)."""
    return repr(kind) if isinstance(kind, UnderTest) else kind
SYSTEM = "You are a helpful assistant."
N_MAX = 4
TURNS = ("Name two planets.", "And one more?", "Which of them is the largest?")
MULTIBYTE = ("Write the word 'hello' in Japanese, Chinese and Korean.", "Translate to Chinese: I love tea.",
             "Give me a smiley face emoji 😀 and a heart ❤️.",
             "Écris une phrase en français avec des accents: été, très, où.")


class Servers:
    """llama-servers already running, one per context size, started for the tests and stopped after them."""

    def __init__(self, binary: Path, target: Path, draft: Path) -> None:
        self.binary, self.target, self.draft = binary, target, draft
        self._running: dict[int, ServerProcess] = {}

    def url(self, n_ctx: int) -> str:
        if n_ctx not in self._running:
            config = speculative_config(self.target, self.draft, n_ctx)
            self._running[n_ctx] = ServerProcess(self.binary, server_args(config))
        return self._running[n_ctx].url

    def pids(self) -> set[int]:
        return {server.pid for server in self._running.values() if server.pid is not None}

    def close(self) -> None:
        for server in self._running.values():
            server.close()


def speculative_config(target: Path, draft: Path, n_ctx: int) -> RunConfig:
    return RunConfig(ModelSettings(target, threads=THREADS), ModelSettings(draft, threads=THREADS),
                     SpecConfig("draft", n_max=N_MAX), n_ctx=n_ctx, system_prompt=SYSTEM)


def profile_text(kind: str, *, binary: Path, servers: Servers, n_ctx: int = 2048) -> str:
    """The TOML a user would write for ``kind``: the embedded pair, greedy, draft-simple with n_max 4."""
    backend = {"in-process": "", "managed": f'kind = "llama-server"\nspec_type = "draft-simple"\nbinary = "{binary}"',
               "remote-llama": f'kind = "remote"\nurl = "{servers.url(n_ctx) if kind == "remote-llama" else ""}"'
                               '\napi = "llama.cpp"',
               "remote-openai": f'kind = "remote"\nurl = "{servers.url(n_ctx) if kind == "remote-openai" else ""}"'
                                '\napi = "openai"'}[kind]
    return (f'[target]\nmodel = "embedded:target"\nn_ctx = {n_ctx}\nthreads = {THREADS}\nadapt_threads = false\n'
            f'[draft]\nmethod = "draft"\nmodel = "embedded:draft"\nthreads = {THREADS}\nn_max = {N_MAX}\n'
            f'[sampling]\ntemperature = 0.0\n[chat]\nsystem_prompt = "{SYSTEM}"\n'
            + (f"[backend]\n{_named(kind, backend)}\n" if backend or isinstance(kind, UnderTest) else ""))


def _named(kind: str, backend: str) -> str:
    """The [backend] table of ``kind``, with another kind's name where the kind under test is another."""
    if not isinstance(kind, UnderTest):
        return backend
    lines = [line for line in backend.splitlines() if not line.startswith("kind = ")]
    return "\n".join([f'kind = "{kind.backend}"', *lines])


def write_profile(folder: Path, kind: str, **options) -> Path:
    path = folder / f"{kind!r}.toml" if isinstance(kind, UnderTest) else folder / f"{kind}.toml"
    path.write_text(profile_text(kind, **options))
    return path


def controller_for(profile: Path, max_tokens: int = 40):
    from specchat.chats.controller import ChatController

    controller = ChatController(None, str(profile), lambda line, error: None, max_tokens=max_tokens)
    controller.switcher.profile_switched(controller.switcher.switch_profile(str(profile)))
    return controller


def ask(controller, text: str, *, stop_after: int | None = None, on_event: Callable[[Event], None] | None = None):
    """One exchange through the controller, as a front end runs it; ``stop_after`` tokens, it is cancelled."""
    exchange = controller.begin(text)
    events: list[Event] = []
    shown = 0

    def sink(event: Event) -> None:
        nonlocal shown
        events.append(event)
        if on_event is not None:
            on_event(event)
        if isinstance(event, TokenEmitted):
            shown += 1
            if stop_after is not None and shown >= stop_after:
                exchange.cancel.set()

    failure = exchange.run(sink)
    controller.absorb(events)
    assert failure is None, failure
    record = controller.session.last_reply
    assert record is not None and not record.streaming
    return record


class PlainDecoding:
    """In-process plain decoding of the same target and context: what every greedy reply must equal."""

    def __init__(self, target: Path, draft: Path) -> None:
        self.target, self.draft = target, draft
        self._backends: dict[tuple[int, bool], object] = {}
        self._cache: dict[tuple, tuple[list[int], str]] = {}
        self.looped: set[str] = set()  # the texts of plain replies that stopped in a loop

    def answer(self, history: list[Message], text: str, *, n_ctx: int = 2048, max_tokens: int = 40,
               loop: bool = True) -> tuple[list[int], str]:
        """The plain reply's ids and text to ``text`` after ``history`` (ids of earlier replies kept as given),
        stopped in a loop as a profile stops it (``loop``: test_repetition.py checks that rule apart)."""
        key = (tuple((m.role, m.content, tuple(m.tokens or ())) for m in history), text, n_ctx, max_tokens, loop)
        if key not in self._cache:
            if (n_ctx, loop) not in self._backends:
                config = dataclasses.replace(speculative_config(self.target, self.draft, n_ctx), spec=SpecConfig("none"),
                                             draft=None, backend=BackendSettings(), loop=LoopRule() if loop else None)
                # the engine itself, never the kind registry a recorded test plays (tests/cassettes.py)
                self._backends[n_ctx, loop] = LocalBackend(config)
            backend = self._backends[n_ctx, loop]
            events = list(backend.answer(history, text, max_tokens=max_tokens))
            ids = [e.token for e in events if isinstance(e, TokenEmitted)]
            self._cache[key] = (ids, events[-1].text)
            if events[-1].finish_reason == "loop":
                self.looped.add(events[-1].text)
        return self._cache[key]

    def piece(self, token: int) -> bytes:
        """A token's bytes, in the target's vocabulary."""
        if not self._backends:
            self.answer([], "Hi.", max_tokens=1)
        return next(iter(self._backends.values())).engine.target.piece(token)

    def chat(self, texts: tuple[str, ...], *, n_ctx: int = 2048, max_tokens: int = 40, loop: bool = True,
             as_text: bool = False) -> list[tuple[list[int], str]]:
        """Plain replies to ``texts`` in one chat; ``as_text``: earlier replies go on as their text alone, as they do
        through a server that sends no token ids (a reply cut inside a character then lacks its unfinished bytes)."""
        history = [Message("system", SYSTEM)]
        replies = []
        for text in texts:
            ids, reply = self.answer(history, text, n_ctx=n_ctx, max_tokens=max_tokens, loop=loop)
            replies.append((ids, reply))
            history += [Message("user", text), Message("assistant", reply, None if as_text else ids)]
        return replies

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()


def llama_servers_running() -> set[int]:
    """Every llama-server process this test run's worker started, itself or through a command it ran (read from
    /proc, not from specchat: one whose environment names the worker — the other workers' servers are theirs)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    mark = f"PYTEST_XDIST_WORKER={worker}".encode() if worker else None
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0].endswith(b"llama-server") and \
                        (mark is None or mark in (entry / "environ").read_bytes().split(b"\0")):
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
