"""llama.cpp's server as a backend: one specchat starts for the profile (managed), or one already running (remote).

Managed, specchat renders the conversation with its own template and tokenizer (the GGUF is on this machine) and sends
token ids to ``/completion``: greedy output through the server is then specchat's in-process plain output, token for
token (the server is built from the same llama.cpp sources, see ``server_build``). Each token's provenance comes from
the stream's cumulative draft counters (``provenance``). A remote llama-server gets the text its own template renders.
Any other OpenAI-compatible server (vLLM) gets chat completions; it reports drafts only as totals, so its tokens are
not coloured and the reply's counts are the change of its ``/metrics`` counters over the reply.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter
from typing import Any

from ..engine.chat_template import ChatTemplate
from ..engine.config import EngineConfig
from ..engine.conversation import Conversation, Message
from ..engine.events import (
    Event,
    ReplyFinished,
    ReplyStarted,
    SpeculationState,
    StepVerified,
    TokenEmitted,
    TokenKind,
)
from ..engine.llama import Model, model_identity
from ..engine.stats import ReplyStats, rate
from ..errors import BackendError, ConfigError
from .http import EventStream, get_json, get_text, post_json
from .provenance import StepTracker
from .server_build import find_server
from .server_process import ServerProcess

# The llama.cpp spec type a profile's method means, when [backend] spec_type does not say.
SPEC_TYPE_OF_METHOD = {"none": "none", "draft": "draft-simple", "ngram": "ngram-simple", "mtp": "draft-mtp"}
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
SERVER_DEFAULT_N_MAX = 3  # llama-server's --spec-draft-n-max default
PLAIN_RATE_TOKENS = 32
FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
METRICS = re.compile(r"^(?:vllm|llamacpp):spec_decode_num_(draft_tokens|accepted_tokens|drafts)_total(?:\{[^}]*\})? "
                     r"([0-9.e+]+)$", re.MULTILINE)


def spec_type(config: EngineConfig) -> str:
    """llama.cpp's spec type for a configuration; method "none" is plain decoding whatever [backend] spec_type says."""
    if config.spec.method == "none":
        return "none"
    return config.backend.spec_type or SPEC_TYPE_OF_METHOD[config.spec.method]


def server_args(config: EngineConfig) -> list[str]:
    """llama-server's command line for a profile (host and port are added when it starts)."""
    target, spec, kind = config.target, config.spec, spec_type(config)
    args = ["-m", str(target.path), "-c", str(config.n_ctx), "-t", str(target.threads), "-tb", str(target.threads),
            "-ngl", str(target.n_gpu_layers), "-ctk", config.kv_cache, "-ctv", config.kv_cache, "-np", "1", "--metrics",
            "--no-webui", "--spec-type", kind]
    if kind in DRAFT_MODEL_TYPES:
        if config.draft is None:
            raise ConfigError(f"spec type {kind} needs a draft model — set [draft] model in the profile")
        args += ["-md", str(config.draft.path), "-td", str(config.draft.threads), "-ngld", str(config.draft.n_gpu_layers)]
    if kind != "none" and isinstance(spec.n_max, int):
        args += ["--spec-draft-n-max", str(spec.n_max), "--spec-draft-n-min", str(spec.n_min),
                 "--spec-draft-p-min", str(spec.p_min)]
    return args + list(config.backend.args)


def _restart_needed(running: EngineConfig, new: EngineConfig) -> bool:
    """What only a new server process can change: everything but sampling. (llama-server's per-request speculative
    parameters are compiled out of this build — ``#if 0`` in tools/server/server-schema.cpp — so a new draft length
    or method means a new process.)"""
    def fixed(c: EngineConfig) -> tuple:
        return dataclasses.replace(c, sampling=running.sampling, system_prompt=None)
    return fixed(running) != fixed(new)


class LlamaServerBackend:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.process: ServerProcess | None = None
        self._vocab: Model | None = None
        self._open(config)
        self._running = config  # what the server process was started with

    def _open(self, config: EngineConfig) -> None:
        backend = config.backend
        self.key_env = backend.api_key_env
        self.headers = self._auth(backend.api_key_env)
        self._props: dict[str, Any] = {}
        if backend.kind == "llama-server":
            # The vocabulary first: a GGUF llama.cpp cannot read is one line here, not a server that died at start.
            self._vocab = Model(config.target.path, role="target", vocab_only=True)
            self.process = ServerProcess(find_server(backend.binary), server_args(config),
                                         ready_timeout=backend.ready_timeout)
            self.url = self.process.url
        else:
            self.url = (backend.url or "").rstrip("/")
            if config.target.path.is_file():
                self._vocab = Model(config.target.path, role="target", vocab_only=True)
        self.api = backend.api if backend.api != "auto" else self._detect_api()
        self.template = self._template(config)
        self.chat = Conversation(self._vocab, self.template) if self._vocab is not None and self.template else None
        self._target_id = (model_identity(config.target.path) if self._vocab is not None
                           else f"{self.url}|{self._props.get('model_path', '')}")

    @staticmethod
    def _auth(key_env: str | None) -> dict[str, str]:
        if key_env is None:
            return {}
        key = os.environ.get(key_env)
        if not key:
            raise ConfigError(f"${key_env} is not set — put the server's API key in it ([backend] api_key_env names"
                              " the variable; the key itself never goes in the profile)")
        return {"Authorization": f"Bearer {key}"}

    def _detect_api(self) -> str:
        """A llama-server answers /props with its chat template; anything else is taken for OpenAI-compatible."""
        try:
            self._props = get_json(f"{self.url}/props", self.headers, key_env=self.key_env)
        except BackendError as exc:
            if "HTTP 404" not in str(exc):
                raise
            self._props = {}
        return "llama.cpp" if "chat_template" in self._props else "openai"

    def _template(self, config: EngineConfig) -> ChatTemplate | None:
        if self._vocab is not None:
            vocab = self._vocab
            return ChatTemplate.choose(vocab.chat_template(), config.chat_template, vocab.path.name,
                                       bos_token=vocab.raw_piece(vocab.bos, special=True).decode("utf-8", "replace"),
                                       eos_token=vocab.raw_piece(vocab.eos, special=True).decode("utf-8", "replace"))
        if self.api == "llama.cpp":
            return ChatTemplate(self._props.get("chat_template") or None, builtin="chatml",
                                bos_token=self._props.get("bos_token", ""), eos_token=self._props.get("eos_token", ""),
                                source=f"{self.url}'s template")
        return None  # chat completions: the server applies its own template

    # -- the protocol --------------------------------------------------------------------------------------------

    @property
    def target_id(self) -> str:
        return self._target_id

    @property
    def notes(self) -> list[str]:
        notes = [self.template.note] if self.template is not None and self.template.note else []
        if self.config.spec.adaptive and spec_type(self.config) != "none":
            notes.append("n_max = \"auto\" is specchat's own cost model; llama-server drafts its default length"
                         f" ({SERVER_DEFAULT_N_MAX}) instead")
        if self.api == "openai":
            notes.append(f"{self.url} reports drafts only as totals: tokens are not coloured, and the reply's counts"
                         " come from its /metrics")
        return notes

    @property
    def n_max(self) -> int:
        if spec_type(self.config) == "none":
            return 0
        n_max = self.config.spec.n_max
        return n_max if isinstance(n_max, int) else SERVER_DEFAULT_N_MAX

    rejected_tails = False  # the server says how many draft tokens it rejected, never which

    @property
    def where(self) -> str:
        if self.process is not None:
            return f"llama-server pid {self.process.pid} · {self.url}"
        return f"remote {self.url} ({self.api})"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def speculation_state(self) -> SpeculationState:
        kind = spec_type(self.config)
        if kind == "none":
            return SpeculationState(self.config.spec.method, False, "spec type 'none' (plain decoding on the server)")
        return SpeculationState(f"{self.config.spec.method} ({kind})", True)

    def apply(self, config: EngineConfig) -> str:
        if not _restart_needed(self._running, config):
            self.config = config
            return "parameters"
        old = (self.process, self._vocab, self.config)
        try:
            self._open(config)
        except BaseException:
            self.process, self._vocab, self.config = old
            raise
        if old[0] is not None:
            old[0].close()
        if old[1] is not None:
            old[1].close()
        self.config = self._running = config
        return "server restarted" if self.process is not None else "reconnected"

    def answer(self, history: list[Message], text: str, *, max_tokens: int,
               should_stop: Callable[[], bool] = lambda: False) -> Iterator[Event]:
        if self.process is not None:
            self.process.ensure_running()
        if self.api == "openai":
            return self._chat_completion(history, text, max_tokens, should_stop)
        return self._completion(history, text, max_tokens, should_stop)

    def _sampling(self) -> dict[str, Any]:
        sampling = self.config.sampling
        return {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                "min_p": sampling.min_p, "seed": sampling.seed}

    def _prompt(self, history: list[Message], text: str, max_tokens: int) -> tuple[list[int] | str, list[Event]]:
        """What to send: token ids (a local tokenizer) or text, and a ContextTrimmed event if turns were dropped."""
        user = Message("user", text)
        if self.chat is None:
            assert self.template is not None
            messages = [{"role": m.role, "content": m.content} for m in [*history, user]]
            return self.template.render(messages, add_generation_prompt=True), []
        self.chat.restore(history)
        tokens, rendered, kept, trimmed = self.chat.prompt(user, min(max_tokens, self.config.n_ctx // 4),
                                                           self.config.n_ctx)
        self.chat.begin_turn(kept, user, tokens, rendered)
        return tokens, [trimmed] if trimmed else []

    def _completion(self, history: list[Message], text: str, max_tokens: int,
                    should_stop: Callable[[], bool]) -> Iterator[Event]:
        started = perf_counter()
        prompt, early = self._prompt(history, text, max_tokens)
        yield from early
        state = self.speculation_state()
        stats = ReplyStats(method=state.method, speculation_active=state.active, speculation_reason=state.reason,
                           n_max=self.n_max if state.active else 0, prompt_tokens=len(prompt), n_ctx=self.config.n_ctx)
        body = {"prompt": prompt, "n_predict": max_tokens, "stream": True, "timings_per_token": True,
                "return_tokens": True, "cache_prompt": True, **self._sampling()}
        stream = EventStream(f"{self.url}/completion", body, self.headers, key_env=self.key_env)
        tracker = StepTracker()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        tokens: list[int] = []
        pieces: list[str] = []
        finish: str | None = None
        announced = False
        try:
            for chunk in stream:
                timings = chunk.get("timings") or {}
                if not announced:  # the server has the prompt: the reply has begun
                    announced = True
                    stats.prefill_tokens = int(timings.get("prompt_n", 0))
                    stats.t_prefill = float(timings.get("prompt_ms", 0)) / 1000
                    cached = int(timings.get("cache_n", 0))
                    yield ReplyStarted(len(prompt) if isinstance(prompt, list) else cached + stats.prefill_tokens,
                                       cached, stats.prefill_tokens, self.config.n_ctx, state)
                ids = chunk.get("tokens") or []
                content = chunk.get("content", "")
                for i, token in enumerate(ids):
                    # Every token counts in its step, the end of generation too; like the engine's, that one is not
                    # shown (without a local vocabulary: a token with no text is taken for it).
                    kind, step, closed = tracker.token(timings.get("draft_n"), timings.get("draft_n_accepted"))
                    yield from self._closed(closed, stats, len(prompt) + len(tokens) if isinstance(prompt, list) else 0)
                    if self._vocab.is_eog(token) if self._vocab is not None else not content:
                        continue
                    piece = decoder.decode(self._vocab.piece(token)) if self._vocab is not None else \
                        (content if i == 0 else "")
                    tokens.append(token)
                    pieces.append(piece)
                    yield self._emit(stats, started, token, piece, kind, step)
                if chunk.get("stop"):
                    finish = FINISH.get(chunk.get("stop_type", ""), "stop")
                    break
                if should_stop():
                    finish = "cancelled"
                    break
            else:  # the stream ended without its final chunk: the server went away
                raise BackendError(f"the server at {self.url} stopped in the middle of the reply — the partial reply"
                                   " is kept")
            yield from self._closed(tracker.close(), stats, 0)
        except BaseException:
            finish = "error" if finish is None else finish
            raise
        finally:
            stream.close()
            reply = "".join(pieces) + decoder.decode(b"", final=True)
            if self.chat is not None:
                self.chat.end_turn(reply, tokens, finish)
            stats.context_used = len(self.chat.tokens) if self.chat is not None else 0
            stats.t_total = perf_counter() - started
        yield ReplyFinished(reply, finish or "stop", stats)

    @staticmethod
    def _closed(steps: list[StepVerified], stats: ReplyStats, context: int) -> Iterator[StepVerified]:
        for step in steps:
            stats.record_step(step.drafted, step.accepted)
            yield dataclasses.replace(step, context_used=context)

    @staticmethod
    def _emit(stats: ReplyStats, started: float, token: int, text: str, kind: TokenKind, step: int) -> TokenEmitted:
        elapsed = perf_counter() - started
        stats.generated += 1
        stats.by_kind[kind] += 1
        stats.ttft = elapsed if stats.ttft is None else stats.ttft
        stats.t_last_token = elapsed
        return TokenEmitted(token, text, kind, step, elapsed)

    def spec_counters(self) -> dict[str, float]:
        """The server's own speculative counters (``/metrics``): draft_tokens, accepted_tokens, drafts."""
        text = get_text(f"{self.url}/metrics", self.headers) or ""
        return {name: float(value) for name, value in METRICS.findall(text)}

    def _chat_completion(self, history: list[Message], text: str, max_tokens: int,
                         should_stop: Callable[[], bool]) -> Iterator[Event]:
        started = perf_counter()
        before = self.spec_counters()
        messages = [{"role": m.role, "content": m.content} for m in [*history, Message("user", text)]]
        sampling = self.config.sampling
        body = {"messages": messages, "max_tokens": max_tokens, "stream": True, "temperature": sampling.temperature,
                "top_p": sampling.top_p, "seed": sampling.seed}
        state = SpeculationState(self.config.spec.method, True, "")
        stats = ReplyStats(method=state.method, speculation_active=True, n_ctx=self.config.n_ctx)
        stream = EventStream(f"{self.url}/v1/chat/completions", body, self.headers, key_env=self.key_env)
        yield ReplyStarted(0, 0, 0, self.config.n_ctx, state)
        pieces: list[str] = []
        finish = None
        try:
            for chunk in stream:
                choice = (chunk.get("choices") or [{}])[0]
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    pieces.append(piece)
                    yield self._emit(stats, started, -1, piece, TokenKind.TARGET, 0)
                if choice.get("finish_reason"):
                    finish = {"length": "length"}.get(choice["finish_reason"], "stop")
                if should_stop():
                    finish = "cancelled"
                    break
        finally:
            stream.close()
        after = self.spec_counters()
        drafted = int(after.get("draft_tokens", 0) - before.get("draft_tokens", 0))
        accepted = int(after.get("accepted_tokens", 0) - before.get("accepted_tokens", 0))
        steps = int(after.get("drafts", 0) - before.get("drafts", 0))
        stats.drafted, stats.accepted, stats.rejected, stats.drafting_steps = drafted, accepted, drafted - accepted, steps
        stats.speculation_reason = "" if after else f"{self.url} has no /metrics: draft counts unknown"
        stats.t_total = perf_counter() - started
        yield ReplyFinished("".join(pieces), finish or "stop", stats)

    def measure_plain_rate(self) -> float | None:
        """A plain run of the server's own loop, timed as a reply's decode rate is — only when the server decodes
        plainly anyway: a speculating one would need a restart (an A/B run does that, and gives the reference)."""
        if self.api == "openai" or self.chat is None or spec_type(self.config) != "none":
            return None
        times = [event.elapsed for event in self._completion([], "Count from one to fifty.", PLAIN_RATE_TOKENS,
                                                             lambda: False) if isinstance(event, TokenEmitted)]
        return rate(len(times) - 1, times[-1] - times[0]) if len(times) > 1 else None

    def rerun_plain(self, history: list[Message], text: str, reused_tokens: int,
                    max_tokens: int) -> tuple[dict[str, Any], list[int]]:
        if self.process is None:
            raise BackendError(f"A/B needs a server specchat starts: speculation on {self.url} cannot be switched off"
                               " from here")
        # A server restarted without speculation starts with an empty cache: the plain arm decodes the whole prompt,
        # and its "prompt tokens decoded" says so.
        original = self.config
        self.apply(dataclasses.replace(original, spec=dataclasses.replace(original.spec, method="none")))
        try:
            emitted, finished = [], None
            for event in self._completion(history, text, max_tokens, lambda: False):
                if isinstance(event, TokenEmitted):
                    emitted.append(event.token)
                elif isinstance(event, ReplyFinished):
                    finished = event
            assert finished is not None
            return finished.stats.summary(), emitted
        finally:
            self.apply(original)

    def render(self, messages: list[Message]) -> str:
        if self.template is None:
            raise BackendError(f"{self.url} renders its own prompts (chat completions): no text to show")
        return self.template.render([{"role": m.role, "content": m.content} for m in messages],
                                    add_generation_prompt=True)

    def clear_cache(self, *, replies: bool = False) -> None:
        if replies and self.process is not None:
            # What the server learned across requests (ngram-mod's map, ngram-cache) lives in the process.
            self.process.stop()
            self.process.start()
        elif self.api == "llama.cpp":
            try:
                post_json(f"{self.url}/slots/0?action=erase", {}, self.headers, key_env=self.key_env)
            except BackendError:
                pass  # a server with slot actions switched off keeps its cache; the next prompt reuses what matches
        if self.chat is not None:
            self.chat.restore([])

    def model_files(self) -> dict[str, Path]:
        if self.process is None:
            return {}
        files = {"target": self.config.target.path}
        if self.config.draft is not None and spec_type(self.config) in DRAFT_MODEL_TYPES:
            files["draft"] = self.config.draft.path
        return files

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
        if self._vocab is not None:
            self._vocab.close()
