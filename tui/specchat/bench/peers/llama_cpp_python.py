"""Peer "llama-cpp-python": llama-cpp-python's own high-level API (``Llama.create_chat_completion``) on the profile's
target — the same llama.cpp, through the API most Python users reach for. ``lookup`` runs it with prompt lookup."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ...engine import Message
from ...engine.conversation import as_dicts
from ...engine.repetition import loop_watch
from ...telemetry.memory import reset_peak_rss
from ...backends.run_config import RunConfig
from ..runners import PeerError, RunResult, combine_turns, decode_seconds, conversation_before
from ..tasks import Task
from . import Opened, Peer, PeerContext


@contextlib.contextmanager
def _model_params_like_the_engine() -> Iterator[None]:
    """``Llama()`` takes llama.cpp's default model parameters and offers no keyword for ``use_extra_bufts``; where
    those crash (a VM reporting AMX it cannot run, see engine/cpu_probe.py) the defaults it reads are the engine's."""
    import llama_cpp.llama_cpp as low  # the module whose default Llama() reads

    from ...engine.cpu_probe import extra_buffers_work

    default = low.llama_model_default_params
    if extra_buffers_work():
        yield
        return

    def without_extra_buffers():
        params = default()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = without_extra_buffers
    try:
        yield
    finally:
        low.llama_model_default_params = default


class LlamaCppPythonRunner:
    """llama-cpp-python's own high-level API: ``Llama.create_chat_completion``, optionally with prompt lookup."""

    def __init__(self, config: RunConfig, *, lookup_tokens: int | None = None) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.label = "llama-cpp-python" + (f" lookup({lookup_tokens})" if lookup_tokens else "")
        draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens) if lookup_tokens else None
        try:
            with _model_params_like_the_engine():
                self.llm = Llama(model_path=str(config.target.path), n_ctx=config.n_ctx,
                                 n_threads=config.target.threads, n_threads_batch=config.target.threads,
                                 draft_model=draft, verbose=False)
        except ValueError as exc:
            raise PeerError(f"{self.label} could not load {config.target.path.name}: {exc}") from None
        self.config = config

    def name(self) -> str:
        return self.label

    def run(self, task: Task, rep: int) -> RunResult:
        messages = conversation_before(self.config, task)
        self.llm.reset()
        reset_peak_rss()
        turns = []
        for prompt in task.turns():
            messages.append(Message("user", prompt))
            try:
                turn = self._turn(messages, task.max_tokens)
            except ValueError as exc:  # llama-cpp-python's word for a prompt larger than the context, among others
                raise PeerError(f"{self.label} failed on task {task.name}: {exc}") from None
            turns.append(turn)
            messages.append(Message("assistant", turn.text))
        return combine_turns(self.label, task.name, rep, turns, spec=False)

    def _turn(self, messages: list[Message], max_tokens: int) -> RunResult:
        sampling = self.config.sampling
        chunks: list[str] = []
        start = time.perf_counter()
        ttft = None
        stream = self.llm.create_chat_completion(
            messages=as_dicts(messages),
            max_tokens=max_tokens, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
            min_p=sampling.min_p, seed=sampling.seed, stream=True,
        )
        # The same rule as every other runner, over the tokens of its chunks (a chunk holds a whole character: a
        # character spelled over several tokens comes as one chunk).
        watch = loop_watch(self.config.loop)
        finish = "stop"
        for chunk in stream:
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content")
            finish = choice.get("finish_reason") or finish
            if piece:
                ttft = ttft if ttft is not None else time.perf_counter() - start
                chunks.append(piece)
                tokens = self.llm.tokenize(piece.encode(), add_bos=False, special=True) if watch is not None else []
                if any(watch.add(token) for token in tokens):
                    finish = "loop"
                    stream.close()
                    break
        total = time.perf_counter() - start
        return RunResult(self.label, "", 0, ttft, total, len(chunks), None,
                         "".join(chunks), extra={"finish_reason": finish, "decode_s": decode_seconds(ttft, total)})

    def close(self) -> None:
        self.llm.close()


def opened(context: PeerContext, lookup_tokens: int | None = None) -> Iterator[Opened]:
    try:
        yield LlamaCppPythonRunner(context.config, lookup_tokens=lookup_tokens)
    except PeerError as exc:
        yield exc


PEER = Peer("llama-cpp-python", "llama-cpp-python (its create_chat_completion)", lambda context, _value: opened(context),
            order=10)
