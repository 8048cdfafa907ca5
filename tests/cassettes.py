"""A recorded backend (issue #49): the app's, the REPL's and the controller's flow tests play back what the real
in-process engine did in that very test, so they test the front ends in seconds, while every promise about outputs
stays with the engine and conformance suites, on the real model and the real llama-server.

A test marked ``@pytest.mark.recorded`` has the in-process kind opened by this module (``tests/conftest.py``):
- ``play`` (the default): a ``RecordedBackend`` answers from the test's own cassette,
  ``fixtures/recorded/<module>/<test>.json.gz``;
- ``record`` (``SPECCHAT_RECORDED=record``): the real ``LocalBackend`` answers, and what the front end asked of it and
  what it answered is written to the cassette, when the test passes (its asserts ran on the real engine);
- ``off``: the real backend, as if the test were not marked.
One command records them all again: ``python tests/recorded.py`` (test ids after it: only those). A cassette names
the llama-cpp-python and the engine code it was recorded under (``engine_fingerprint``): after a change to either, it
fails rather than play what the engine no longer does.

A cassette's entries are keyed by what decides them: a reply by the configuration (its models' names and sizes, never
their paths or threads), the conversation before it with its token ids, the message, the budget and ``top`` — so a
played reply also proves the front end handed the backend the conversation the real one was handed (not which stored
chat it is in, nor the stored chats it drafts from: what is private stays tested on the real engine, tests/chats/
test_suffix.py). A key the cassette lacks, or asked for more often than recorded, fails the test, naming the command
that records it. A reply the test cuts (Esc, Ctrl+C, quitting) is held, when recorded and when played alike, after
the step that brings it to ``holds[message]`` tokens, until the front end stops it (one that never does fails the
test): the cut falls on the same token both times. A played reply waits ``pace`` seconds after each step, so it
streams over several frames, as a real one does.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import gzip
import hashlib
import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import specchat
from specchat.backends.local import LocalBackend
from specchat.backends.run_config import RunConfig
from specchat.chats import trace
from specchat.engine.conversation import UNSTORED, ChatKey, Forgotten, Message
from specchat.engine.drafters.stored_chats import StoredChats
from specchat.engine.events import Event, ReplyFinished, SpeculationState, StepVerified, TokenEmitted
from specchat.engine.llama import model_identity
from specchat.engine.reference import PlainReference
from specchat.errors import SpecchatError

MODE = os.environ.get("SPECCHAT_RECORDED", "play")
FORMAT = 1
ROOT = Path(__file__).with_name("fixtures") / "recorded"
RECORD_COMMAND = "python tests/recorded.py"
HOLD_S = 60.0  # the longest a held reply waits for the front end to stop it
PACE_S = 0.003  # a played reply's pause after each step


class NotRecorded(SpecchatError):
    """The cassette has no entry for what the front end asked: the test or the engine changed since it was recorded."""


# -- keys -------------------------------------------------------------------------------------------------------------

_identities: dict[tuple[str, int, int], str] = {}


def identity(path: Path) -> str:
    """``model_identity``, read once per file version (a test's copy of the draft has the session draft's)."""
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _identities:
        _identities[key] = model_identity(path)
    return _identities[key]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


def model_key(path: Path) -> list[Any]:
    """A model file by its name and size: the same on every machine (the draft a test session derives may differ in
    its bytes from one derived on another CPU), and apart for the files a test tells apart (another draft, a variant
    of the target)."""
    return [path.name, path.stat().st_size]


def config_key(config: RunConfig) -> str:
    """What in a configuration decides what the engine does; not where its files lie nor how many threads run it."""
    return digest({
        "target": model_key(config.target.path),
        "draft": model_key(config.draft.path) if config.draft is not None else None,
        "spec": dataclasses.asdict(config.spec), "sampling": dataclasses.asdict(config.sampling),
        "n_ctx": config.n_ctx, "kv_cache": config.kv_cache, "system_prompt": config.system_prompt,
        "chat_template": config.chat_template, "loop": config.loop, "kind": config.backend.kind,
    })


def conversation(earlier: list[Message]) -> list[list[Any]]:
    return [[m.role, m.content, list(m.tokens) if m.tokens is not None else None, m.finish_reason] for m in earlier]


def answer_key(config: RunConfig, earlier: list[Message], text: str, max_tokens: int, top: int) -> str:
    return digest([config_key(config), conversation(earlier), text, max_tokens, top])


def rerun_key(config: RunConfig, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int) -> str:
    return digest([config_key(config), conversation(earlier), text, reused_tokens, max_tokens])


# -- what is kept of a backend between its calls ----------------------------------------------------------------------

def facts_of(backend: LocalBackend) -> dict[str, Any]:
    """What the front ends read of a backend between calls, as it stands after one."""
    return {"draft_length": backend.draft_length, "notes": list(backend.notes), "cpu_only": backend.cpu_only,
            "speculation": dataclasses.asdict(backend.speculation_state()), "no_reference": backend.no_reference,
            "files": sorted(backend.model_files())}


def error_row(exc: Exception) -> dict[str, Any]:
    args = [list(a) if isinstance(a, tuple) else a if isinstance(a, str | int | float | None) else None
            for a in exc.args]
    return {"class": f"{type(exc).__module__}:{type(exc).__qualname__}", "args": args}


def error_of(row: dict[str, Any]) -> Exception:
    module, name = row["class"].split(":")
    cls = getattr(importlib.import_module(module), name)
    args = [tuple(a) if isinstance(a, list) else a for a in row["args"]]
    try:
        return cls(*args)
    except TypeError:  # an error whose constructor takes more than its args kept: its message is what is shown
        error = Exception.__new__(cls)
        error.args = tuple(args)
        return error


@functools.cache
def engine_fingerprint() -> str:
    """The code whose events and facts a cassette holds — the engine, the in-process backend and what it reports, the
    events' encoding, the errors — as its source lines without docstrings, comment lines and blank lines: a change to
    what it does makes every cassette stale (recorded again, not played as if the engine had not changed); a comment
    or a docstring does not, nor the Python version reading it."""
    package = Path(specchat.__file__).parent
    files = [*sorted((package / "engine").rglob("*.py")), package / "backends" / "local.py",
             package / "backends" / "offload.py", package / "chats" / "trace.py", package / "errors.py"]
    hashed = hashlib.sha256()
    for file in files:
        source = file.read_text()
        docstrings = set()
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
        kept = [line.strip() for number, line in enumerate(source.splitlines(), 1)
                if number not in docstrings and line.strip() and not line.strip().startswith("#")]
        hashed.update(file.relative_to(package).as_posix().encode() + "\n".join(kept).encode())
    return hashed.hexdigest()[:16]


# -- the cassette -----------------------------------------------------------------------------------------------------

class Cassette:
    """One test's recorded calls, each kind and key a list taken in order, each entry once: a front end that asks
    more often than the recorded one did (another load, another plain run) is a miss."""

    def __init__(self, path: Path, mode: str, holds: dict[str, int] | None = None, pace: float = PACE_S) -> None:
        self.path, self.mode, self.holds, self.pace = path, mode, holds or {}, pace
        self.calls: dict[str, list[dict[str, Any]]] = {}
        self.misses: list[str] = []
        self._taken: dict[str, int] = {}
        self._lock = threading.Lock()
        if mode == "play" and path.is_file():
            data = json.loads(gzip.decompress(path.read_bytes()))
            if data["header"] == self.header():
                self.calls = data["calls"]
            else:
                self.misses.append(f"recorded under {data['header']}, played under {self.header()}")

    @staticmethod
    def header() -> dict[str, Any]:
        return {"format": FORMAT, "llama_cpp": llama_cpp.__version__, "engine": engine_fingerprint()}

    def put(self, kind: str, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self.calls.setdefault(f"{kind} {key}", []).append(entry)

    def take(self, kind: str, key: str, what: str) -> dict[str, Any]:
        name = f"{kind} {key}"
        with self._lock:
            entries = self.calls.get(name, [])
            taken = self._taken.get(name, 0)
            if taken >= len(entries):
                more = f"call {taken + 1} of " if entries else ""
                self.misses.append(f"no {more}{kind} recorded for {what}")
                raise NotRecorded(f"{self.path.name} has no {more}{kind} for {what} (recorded {len(entries)}) — "
                                  f"record it: {RECORD_COMMAND}")
            self._taken[name] = taken + 1
            return entries[taken]

    def save(self) -> None:
        """Written whole; nothing when the in-process backend was never opened (a kind the test runs for real)."""
        if not self.calls:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"header": self.header(), "calls": self.calls}, sort_keys=True, separators=(",", ":"))
        self.path.write_bytes(gzip.compress(data.encode(), mtime=0))

    def opener(self, real_open: Callable[[RunConfig, StoredChats | None], Any]) -> Callable[..., Any]:
        """The in-process kind's ``open`` for this test: one callable, so a switch between two of its profiles
        still applies in place (``switch_backend`` compares kinds' ``open``)."""
        def open_recorded(config: RunConfig, stored: StoredChats | None = None) -> Any:
            key = config_key(config)
            if self.mode == "record":
                try:
                    backend = real_open(config, stored)
                except SpecchatError as exc:
                    self.put("open", key, {"error": error_row(exc)})
                    raise
                self.put("open", key, {"facts": facts_of(backend)})
                return Recorder(backend, self)
            entry = self.take("open", key, f"the profile's configuration {key}")
            if "error" in entry:
                raise error_of(entry["error"])
            return RecordedBackend(config, self, entry["facts"])
        return open_recorded


def held(events: Iterator[Event], hold: int | None, should_stop: Callable[[], bool], pace: float,
         misses: list[str]) -> Iterator[Event]:
    """``events`` handed on; after the step that brings the reply to ``hold`` tokens, nothing more until the front end
    stops it (the engine, asked for its next event, then ends the reply as cancelled). A front end that never stops it
    is a miss: the recorded reply's cut is not one it made."""
    tokens = 0
    for event in events:
        yield event
        if isinstance(event, TokenEmitted):
            tokens += 1
        elif isinstance(event, StepVerified):
            if hold is not None and tokens >= hold:
                hold = None
                deadline = time.monotonic() + HOLD_S
                while not should_stop():
                    if time.monotonic() > deadline:
                        misses.append(f"a reply held after {tokens} tokens was never stopped by the front end")
                        break
                    time.sleep(0.01)
            elif pace:
                time.sleep(pace)


# -- recording --------------------------------------------------------------------------------------------------------

class Recorder:
    """The real in-process backend, with what it is asked and answers written to the cassette."""

    def __init__(self, real: LocalBackend, cassette: Cassette) -> None:
        self.real, self.cassette = real, cassette

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def answer(self, earlier: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False, top: int = 0,
               chat: ChatKey = UNSTORED) -> Iterator[Event]:
        key = answer_key(self.real.config, earlier, text, max_tokens, top)
        rows: list[dict[str, Any]] = []
        entry: dict[str, Any] = {"rows": rows}
        try:
            events = self.real.answer(earlier, text, max_tokens=max_tokens, should_stop=should_stop, top=top,
                                      chat=chat)
        except SpecchatError as exc:
            self.cassette.put("answer", key, entry | {"error": error_row(exc), "facts": facts_of(self.real)})
            raise

        def recorded() -> Iterator[Event]:
            try:
                for event in held(events, self.cassette.holds.get(text), should_stop, 0.0, self.cassette.misses):
                    rows.append(trace.row_of(event))
                    yield event
            except Exception as exc:  # any failure, as the front end met it (an Exchange makes it one line)
                entry["error"] = error_row(exc)
                raise
            finally:
                entry["facts"] = facts_of(self.real)
                self.cassette.put("answer", key, entry)
        return recorded()

    def apply(self, config: RunConfig) -> str:
        key = digest([config_key(self.real.config), config_key(config)])
        try:
            action = self.real.apply(config)
        except SpecchatError as exc:
            self.cassette.put("apply", key, {"error": error_row(exc), "facts": facts_of(self.real)})
            raise
        self.cassette.put("apply", key, {"action": action, "facts": facts_of(self.real)})
        return action

    def plain_reference(self) -> PlainReference | None:
        reference = self.real.plain_reference()
        self.cassette.put("reference", config_key(self.real.config),
                          {"reference": dataclasses.asdict(reference) if reference else None,
                           "facts": facts_of(self.real)})
        return reference

    def rerun_plain(self, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int,
                    should_stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], list[int]]:
        summary, tokens = self.real.rerun_plain(earlier, text, reused_tokens, max_tokens, should_stop)
        self.cassette.put("rerun", rerun_key(self.real.config, earlier, text, reused_tokens, max_tokens),
                          {"summary": summary, "tokens": tokens})
        return summary, tokens


# -- playing ----------------------------------------------------------------------------------------------------------

class RecordedBackend:
    """A ``Backend`` that answers what the real in-process one answered when the test was recorded."""

    rejected_tails = LocalBackend.rejected_tails
    where = LocalBackend.where
    pid = None

    def __init__(self, config: RunConfig, cassette: Cassette, facts: dict[str, Any]) -> None:
        self.config, self._cassette, self._facts = config, cassette, facts
        self.messages: list[Message] = []  # the conversation as handed to the last reply, that reply included
        self.closed = False
        self._playing = False  # a reply's events are still being handed out: the real engine is mid-step

    @property
    def target_id(self) -> str:
        return identity(self.config.target.path)

    @property
    def notes(self) -> list[str]:
        return list(self._facts["notes"])

    @property
    def cpu_only(self) -> str:
        return self._facts["cpu_only"]

    @property
    def draft_length(self) -> int:
        return self._facts["draft_length"]

    @property
    def no_reference(self) -> str:
        return self._facts["no_reference"]

    def speculation_state(self) -> SpeculationState:
        return SpeculationState(**self._facts["speculation"])

    def answer(self, earlier: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False, top: int = 0,
               chat: ChatKey = UNSTORED) -> Iterator[Event]:
        entry = self._cassette.take("answer", answer_key(self.config, earlier, text, max_tokens, top),
                                    f"the reply to {text[:40]!r} after {len(earlier)} messages")

        def played() -> Iterator[Event]:
            cut = False
            self._playing = True
            try:
                for event in held(trace.events_of(entry["rows"]), self._cassette.holds.get(text), should_stop,
                                  self._cassette.pace, self._cassette.misses):
                    cut = cut or isinstance(event, StepVerified) and should_stop()
                    if isinstance(event, ReplyFinished) and cut and event.finish_reason != "cancelled":
                        self._cassette.misses.append(f"the reply to {text[:40]!r} was cut where its recording was "
                                                     "not: hold it (the marker's holds)")
                    if isinstance(event, ReplyFinished):
                        tokens = [row["token"] for row in entry["rows"] if row["type"] == "token"]
                        self.messages = [*earlier, Message("user", text),
                                         Message("assistant", event.text, tokens, event.finish_reason)]
                    yield event
                if "error" in entry:
                    raise error_of(entry["error"])
            finally:
                self._playing = False
                self._facts = entry["facts"]
        return played()

    def apply(self, config: RunConfig) -> str:
        key = digest([config_key(self.config), config_key(config)])
        entry = self._cassette.take("apply", key, f"a switch to {config_key(config)}")
        self._facts = entry["facts"]
        if "error" in entry:
            raise error_of(entry["error"])
        self.config = config
        return entry["action"]

    def plain_reference(self) -> PlainReference | None:
        entry = self._cassette.take("reference", config_key(self.config), "the plain reference")
        self._facts = entry["facts"]
        return PlainReference(**entry["reference"]) if entry["reference"] else None

    def rerun_plain(self, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int,
                    should_stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], list[int]]:
        entry = self._cassette.take("rerun", rerun_key(self.config, earlier, text, reused_tokens, max_tokens),
                                    f"the plain rerun of {text[:40]!r}")
        return dict(entry["summary"]), list(entry["tokens"])

    def render(self, messages: list[Message]) -> str:
        raise NotRecorded("a recorded backend renders no prompt: a front end never asks for one")

    def clear_cache(self, *, replies: bool = False) -> None:
        """Nothing is cached here."""

    def model_files(self) -> dict[str, Path]:
        paths = {"target": self.config.target.path, "draft": self.config.draft.path if self.config.draft else None}
        return {role: paths[role] for role in self._facts["files"] if paths[role] is not None}

    def learn_stored_chats(self, read: StoredChats, *, wait: bool = False) -> None:
        """The recorded replies were drafted from what the real one indexed."""

    def forget(self, what: Forgotten) -> None:
        """As ``learn_stored_chats``: what it forgot is in the recorded replies."""

    def close(self) -> None:
        """The real one frees the models: under a reply still decoding, that is a crash (exit 139)."""
        if self._playing:
            self._cassette.misses.append("closed while a reply was still playing: the real backend would have freed "
                                         "its models under a decoding step")
        self.closed = True
