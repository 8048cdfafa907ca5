"""llama.cpp's server as a backend: one specchat starts for the profile (``[backend] kind = "llama-server"``, this
module's kind), or one already running (``remote``, whose module reuses this class).

With the target's GGUF on this machine (always, managed; optionally, remote) specchat renders the conversation with its
own template and tokenizer and sends token ids to ``/completion`` (``completion``): greedy output through the server is
then specchat's in-process plain output, token for token (the server is built from the same llama.cpp sources, see
``server_build``), and the conversation keeps every generated id, as the engine's does. A remote llama-server without
the GGUF here gets the text its own template renders. Any other OpenAI-compatible server (vLLM) gets chat completions
(``openai_chat``); which of the two a server speaks is an object (``server_api``). A managed server is stopped before
another starts: two copies of a 12 B target do not fit a 12 GB card.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..engine.chat_template import ChatTemplate
from ..engine.engine_config import SWITCHED_OFF_BY_HAND, without_speculation
from ..engine.conversation import UNSTORED, ChatKey, Forgotten, Message, TokenWindow, as_dicts
from ..engine.drafters.stored_chats import StoredChats
from ..engine.cpu import cpu_sample, others_cores
from ..engine.draft_length.costs import MIN_WINDOW_S, quiet, watched
from ..engine.events import Event, PlainMeasured, ReplyFinished, SpeculationState, TokenEmitted
from ..engine.llama import Model, model_identity
from ..engine.phases import announce
from ..engine.reference import PLAIN_RATE_TOKENS, PlainReference
from ..engine.stats import rate
from ..errors import BackendError, ConfigError, SpecchatError, SwitchFailed
from ..telemetry.memory import peak_rss_bytes, reset_peak_rss
from .completion import CompletionStream
from .run_config import RunConfig
from .held_tokens import PieceIndex
from .run_config import BackendKind
from .server_caches import ServerCaches
from .server_flags import (SERVER_DEFAULT_N_MAX, learns_across_requests, loads_draft, restart_needed, server_args,
                           spec_type)
from .offload import asked_gpu_layers, cpu_only_warning
from .openai_chat import spec_counters
from .server_api import BY_NAME, CompletionApi, Link, ServerApi, Turn, detect
from .server_build import find_server, server_build_info
from .server_process import ServerProcess

T = TypeVar("T")


class LlamaServerBackend:
    rejected_tails = False  # the server says how many draft tokens it rejected, never which
    no_reference = ""

    def __init__(self, config: RunConfig, stored: StoredChats | None = None) -> None:
        self.config = config
        self.process: ServerProcess | None = None
        self._vocab: Model | None = None
        self.chat: TokenWindow | None = None
        self.template: ChatTemplate | None = None
        self._template_choice: str | None = None
        # The stored chats, as lookup caches for a managed server that drafts with ngram-cache (``learn_stored_chats``).
        self.caches = ServerCaches()
        self._holds_private: ChatKey | None = None  # the private chat whose requests the server's n-gram tables hold
        self._busy_reference = False  # the last plain run ran beside busy cores: it runs again when they are quiet
        try:
            self._open(config)
        except BaseException:
            self.close()
            raise
        self._running = config  # what the server process was started with
        if stored is not None:
            self.learn_stored_chats(stored)

    def _open(self, config: RunConfig) -> None:
        """Start (managed) or reach (remote) the server for ``config``; the tokenizer and the conversation are kept
        when the target and its template stay, so a restart keeps a trimmed chat's window."""
        backend, kind = config.backend, config.backend_kind
        self.key_env = backend.api_key_env
        self.headers = auth_headers(backend.api_key_env)
        self._props: dict[str, Any] = {}
        local = not kind.own_models or config.target.path.is_file()
        same_vocab = self._vocab is not None and local and self._vocab.path == config.target.path
        if not same_vocab:
            self._close_vocab()
            # The vocabulary first: a GGUF llama.cpp cannot read is one line here, not a server that died at start.
            self._vocab = Model(config.target.path, role="target", vocab_only=True) if local else None
        if kind.starts_process:
            caches = self.caches.ready_args(config)
            announce(f"starting llama-server with {config.target.path.name} (it loads the model before it answers)")
            self.process = ServerProcess(find_server(backend.binary), server_args(config) + caches,
                                         ready_timeout=backend.ready_timeout)
            self.caches.running_args = caches
            self._holds_private = None  # a new process holds no request yet
            self.url = self.process.url
        else:
            self.url = (backend.url or "").rstrip("/")
        try:
            self._connect(config, same_vocab)
        except BaseException:
            self._stop_process()  # a server started for a profile that failed after all: not left running
            raise

    def _connect(self, config: RunConfig, same_vocab: bool) -> None:
        """The server's API, the chat template and the conversation, once the server is there."""
        link = Link(self.url, self.headers, self.key_env)
        api = config.backend.api
        if api == "auto":
            api, self._props = detect(link)
        same_template = same_vocab and self.chat is not None and self._template_choice == config.chat_template
        if not same_template:
            self.template = (ChatTemplate.of_model(self._vocab, config.chat_template) if self._vocab is not None
                             else BY_NAME[api].server_template(link, self._props))
            self.chat = TokenWindow(self._vocab, self.template) if self._vocab is not None and self.template else None
        self._template_choice = config.chat_template
        stream = CompletionStream(self._vocab, PieceIndex(self._vocab) if self._vocab else None, self.chat)
        self.api: ServerApi = BY_NAME[api](link, stream, self.chat, self.template)
        # A/B's plain arm goes through llama.cpp's /completion (token ids both ways) whichever API the replies use.
        self._plain_api = (self.api if isinstance(self.api, CompletionApi)
                           else CompletionApi(link, stream, self.chat, self.template))
        self._target_id = (model_identity(config.target.path) if self._vocab is not None
                           else f"{self.url}|{self._props.get('model_path', '')}")

    def _close_vocab(self) -> None:
        if self._vocab is not None:
            self._vocab.close()
            self._vocab = None

    # -- the protocol --------------------------------------------------------------------------------------------

    @property
    def target_id(self) -> str:
        return self._target_id

    @property
    def notes(self) -> list[str]:
        notes = [self.template.note] if self.template is not None and self.template.note else []
        notes += self.caches.notes()
        if self.config.spec.adaptive and spec_type(self.config) != "none":
            notes.append("n_max = \"auto\" is specchat's own cost model; llama-server drafts its default length"
                         f" ({SERVER_DEFAULT_N_MAX}) instead")
        offload = self.cpu_only  # (asks NVML which fix to name: once)
        notes += [offload] if offload else []
        return notes + ([self.api.note] if self.api.note else [])

    @property
    def cpu_only(self) -> str:
        """A server specchat starts is its own build: a CPU one runs GPU layers on the CPU without a word. (A remote
        server's build is not this machine's to judge.)"""
        if self.process is None:
            return ""
        return cpu_only_warning(asked_gpu_layers(self.config), server_build_info(self.process.binary))

    @property
    def draft_length(self) -> int:
        if spec_type(self.config) == "none":
            return 0
        n_max = self.config.spec.n_max
        return n_max if isinstance(n_max, int) else SERVER_DEFAULT_N_MAX

    @property
    def where(self) -> str:
        if self.process is not None:
            return f"llama-server pid {self.process.pid} · {self.url}"
        return f"remote {self.url} ({self.api.name})"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def speculation_state(self) -> SpeculationState:
        kind = spec_type(self.config)
        if kind == "none":
            return SpeculationState(self.config.spec.method, False, SWITCHED_OFF_BY_HAND if self.config.spec.off_by_hand
                                    else "spec type 'none' (plain decoding on the server)")
        return SpeculationState(f"{self.config.spec.method} ({kind})", True)

    def apply(self, config: RunConfig) -> str:
        """Sampling goes with each request; anything else needs another server process (or another URL). The old
        process stops before the new one starts; a new one that fails to start gives way to the old one again."""
        if not restart_needed(self._running, config):
            self.config = config
            return "parameters"
        previous = self._running
        self._stop_process()
        try:
            self._open(config)
        except SpecchatError as exc:
            try:
                self._open(previous)
            except SpecchatError as again:
                self.close()
                raise SwitchFailed(f"{exc} — and the previous server could not be started again: {again}",
                                   None) from None
            again = "started again" if self.process is not None else f"in use again ({self.url})"
            raise SwitchFailed(f"{exc} — the previous server was {again}", self) from None
        self.config = self._running = config
        if self.caches.stale_for(config):
            self._write_lookup_caches()  # a target of its own: its token ids, its caches
        return "server restarted" if self.process is not None else "reconnected"

    def _stop_process(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None

    def answer(self, earlier: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False, top: int = 0,
               chat: ChatKey = UNSTORED) -> Iterator[Event]:
        if self.process is not None:
            self._leave_private_chat(chat)
            self._follow_history()
            self.process.ensure_running()
            reset_peak_rss(self.process.pid)
            if chat.private and learns_across_requests(self.config):
                self._holds_private = chat
            return self._watched(self._reply(earlier, text, max_tokens, should_stop, top), self.process.pid)
        return self._reply(earlier, text, max_tokens, should_stop, top)

    def _watched(self, events: Iterator[Event], pid: int) -> Iterator[Event]:
        """A managed server's reply, with what other processes did meanwhile (the server's CPU time is ours): one they
        kept waiting says so (its undrafted steps are no plain rate of this machine), and after a quiet one a plain
        run taken beside busy cores runs again (issue #47)."""
        before = cpu_sample((pid,))
        for event in events:
            if isinstance(event, ReplyFinished):
                after = cpu_sample((pid,))
                others = others_cores(before, after) if before and after and after.when - before.when >= MIN_WINDOW_S \
                    else None
                if not quiet(others):
                    event.stats.busy_cores = others
                elif self._busy_reference and event.finish_reason not in ("cancelled", "error"):
                    yield from self._plain_again()
            yield event

    def _plain_again(self) -> Iterator[PlainMeasured]:
        reference = self.plain_reference()
        if reference is not None and reference.busy is None:
            yield reference.remeasured()

    def _leave_private_chat(self, chat: ChatKey) -> None:
        """A reply in another chat than the private one whose requests the server's n-gram tables hold: the server
        starts again first (``_follow_history``), so nothing of the private chat is drafted there."""
        if self._holds_private is not None and chat != self._holds_private:
            self._holds_private = None
            self.caches.start_afresh()

    def _reply(self, earlier: list[Message], text: str, max_tokens: int, should_stop: Callable[[], bool],
               top: int = 0, api: ServerApi | None = None) -> Iterator[Event]:
        turn = Turn(self.config, self.speculation_state(), self.draft_length, max_tokens, should_stop, top)
        return (api or self.api).answer(earlier, text, turn)

    def spec_counters(self) -> dict[str, float]:
        """The server's own speculative counters (``/metrics``): draft_tokens, accepted_tokens, drafts."""
        return spec_counters(self.url, self.headers)

    def plain_reference(self) -> PlainReference | None:
        """A plain run of the server's own loop, timed as a reply's decode rate is — only when the server decodes
        plainly anyway: a speculating one would need a restart (an A/B run does that, and gives the reference). The
        server's slope over context depth is not measured, so the reference holds near the depth it was taken at."""
        self.no_reference = unmeasurable(self.api, self.config, self.process is not None)
        if self.no_reference or self.chat is None:
            return None
        saved = self.chat.snapshot()
        announce(f'measuring plain decoding on the server for "vs plain" ({PLAIN_RATE_TOKENS} tokens)')
        try:
            events, others = self._watch(lambda: list(self._reply([], "Count from one to fifty.", PLAIN_RATE_TOKENS,
                                                                  lambda: False)))
        finally:
            self.chat.resume(saved)
        times = [e.elapsed for e in events if isinstance(e, TokenEmitted)]
        finished = events[-1]
        tps = rate(len(times) - 1, times[-1] - times[0]) if len(times) > 1 else None
        if tps is None or not isinstance(finished, ReplyFinished):
            self.no_reference = "not measured — the server's plain run gave no rate"
            return None
        depth = finished.stats.prompt_tokens + len(times) // 2
        # Beside busy cores such a run is marked, divides nothing, and runs again after a quiet reply (issue #47).
        self._busy_reference = not quiet(others)
        return PlainReference.measured(tps, depth, None, not self.config.sampling.greedy,
                                       f"a plain run of {PLAIN_RATE_TOKENS} tokens on the server",
                                       others if self._busy_reference else None)

    def _watch(self, measure: Callable[[], T]) -> tuple[T, float | None]:
        """``measure()`` and the cores other processes kept busy meanwhile; a server specchat did not start may run
        anywhere (on this machine its CPU time would read as another process's), so its runs are not judged."""
        if self.process is None:
            return measure(), None
        return watched(measure, (self.process.pid,))

    def rerun_plain(self, earlier: list[Message], text: str, reused_tokens: int, max_tokens: int,
                    should_stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], list[int]]:
        if self.process is None:
            raise BackendError(f"A/B needs a server specchat starts: speculation on {self.url} cannot be switched off"
                               " from here")
        # A server restarted without speculation starts with an empty cache: the plain arm decodes the whole prompt,
        # and its "prompt tokens decoded" says so.
        original = self.config
        saved = self.chat.snapshot() if self.chat is not None else None
        self.apply(without_speculation(original))
        try:
            emitted, finished = [], None
            for event in self._reply(earlier, text, max_tokens, should_stop, api=self._plain_api):
                if isinstance(event, TokenEmitted):
                    emitted.append(event.token)
                elif isinstance(event, ReplyFinished):
                    finished = event
            assert finished is not None
            peak = peak_rss_bytes(self.pid)
            return finished.stats.summary() | {"peak_rss": peak, "finish_reason": finished.finish_reason}, emitted
        finally:
            self.apply(original)
            if saved is not None and self.chat is not None:
                self.chat.resume(saved)

    def render(self, messages: list[Message]) -> str:
        if self.template is None:
            raise BackendError(f"{self.url} renders its own prompts (chat completions): no text to show")
        return self.template.render(as_dicts(messages), add_generation_prompt=True)

    def clear_cache(self, *, replies: bool = False) -> None:
        if replies and self.process is not None:
            # What the server learned across requests (ngram-mod's map, ngram-cache) lives in the process.
            self.process.stop()
            self.process.start()
        else:
            self.api.erase_cache()
        if self.chat is not None:
            self.chat.restore([])

    def learn_stored_chats(self, read: StoredChats, *, wait: bool = False) -> None:
        """The stored replies as llama.cpp's lookup caches, where a server specchat starts drafts with ngram-cache
        ("suffix" runs there as it): written on a thread of their own, then the server is restarted with them before
        the next reply — unless ``wait``, which returns once it runs with them (a script's one reply). A remote server
        and the other spec types draft without them."""
        self.caches.read = read
        self._write_lookup_caches()
        if wait and self.caches.wait_written():
            self._follow_history()

    def forget(self, what: Forgotten) -> None:
        """A stored chat was deleted or made private, or messages of one deleted: before the next reply a server that
        keeps what it was told (its n-gram tables hold every request since it started) is started again, without
        caches that hold them, and they are written again without them (deleted messages are no longer stored)."""
        self.caches.forget(what, self.process is not None and learns_across_requests(self.config))

    def _write_lookup_caches(self) -> None:
        """A new build of the caches for this configuration (none where the server does not read them)."""
        reads = self.process is not None and self._vocab is not None
        self.caches.write(self.config if reads else None, self._target_id, self.template)

    def _follow_history(self) -> None:
        """Before a reply: the server restarted with the caches just written, or without a chat forgotten."""
        if self.process is not None:
            self.caches.follow(self.process, server_args(self._running), self.config, self._write_lookup_caches)

    def model_files(self) -> dict[str, Path]:
        if self.process is None:
            return {}
        files = {"target": self.config.target.path}
        if loads_draft(self.config):
            files["draft"] = self.config.draft.path
        return files

    def close(self) -> None:
        self._stop_process()
        self._close_vocab()
        self.caches.close()


def auth_headers(key_env: str | None) -> dict[str, str]:
    """The request headers for the API key in ``$key_env`` (None: no key)."""
    if key_env is None:
        return {}
    key = os.environ.get(key_env)
    if not key:
        raise ConfigError(f"${key_env} is not set — put the server's API key in it ([backend] api_key_env names"
                          " the variable; the key itself never goes in the profile)")
    return {"Authorization": f"Bearer {key}"}


def unmeasurable(api: ServerApi, config: RunConfig, managed: bool) -> str:
    """Why a plain run cannot be timed as a reply is on a server speaking ``api`` for ``config`` (``managed``: one
    specchat started); "" when it can."""
    if not api.times_plain_runs:
        return ("not measured — specchat times a plain run only on a llama-server whose model it tokenizes (the"
                " target's GGUF on this machine, llama.cpp's API)")
    if spec_type(config) == "none":
        return ""
    if managed:
        return "not measured — a speculating server decodes plainly only after a restart: A/B (Ctrl+B, /ab) does that"
    return "not measured — speculation on a server specchat does not start cannot be switched off from here"


KIND = BackendKind("llama-server", "llama-server", LlamaServerBackend, starts_process=True, server_keys=True)
