"""llama-server's ``/completion`` stream as the engine's events: every token with its id, its text and its provenance.

Each streamed chunk carries the reply's cumulative draft counters (``"timings_per_token": true``), from which
``provenance.StepTracker`` tells each token's kind, and ``predicted_n``, from which ``held_tokens`` recovers the tokens
the server held back inside a UTF-8 character. With a local vocabulary (the GGUF on this machine) a token's text is
decoded from its id, as the in-process engine does, and the conversation keeps the ids; without one, the chunk's own
text is shown.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from ..engine.conversation import TokenWindow
from ..engine.events import (
    Candidate,
    Event,
    Judgement,
    ReplyFinished,
    ReplyStarted,
    SpeculationState,
    StepVerified,
    TokenEmitted,
    TokenKind,
)
from ..engine.llama import Model
from ..engine.repetition import LoopRule, LoopWatch, loop_watch
from ..engine.stats import ReplyStats
from ..errors import BackendError
from .held_tokens import PieceIndex, chunk_tokens
from .http import EventStream
from .provenance import StepTracker

FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
# Asked for a few tokens beyond the reply's limit: a last token that ends inside a UTF-8 character is sent only once a
# later one completes it (at most three more), and its id is needed; the stream is closed at the limit itself.
UTF8_MARGIN = 3
# llama-server computes n_probs only for the tokens it samples one at a time, never for a drafting step's.
NO_CANDIDATES = "llama-server sends no candidates for the tokens of a drafting step"
UNTOLD_REJECTIONS = "llama-server does not say which draft tokens it rejected, only how many"
HELD_BACK = "llama-server sent this token's candidates with another token of its chunk (a UTF-8 character split)"


@dataclass
class Request:
    """What one ``/completion`` call sends and knows before it starts."""

    url: str
    headers: dict[str, str]
    key_env: str | None
    prompt: list[int] | str  # token ids (a local tokenizer) or text
    body: dict[str, Any]  # sampling, beside the prompt
    max_tokens: int
    n_ctx: int
    state: SpeculationState
    draft_length: int
    top: int = 0  # candidates asked for per token (``n_probs``), for the token inspector
    loop: LoopRule | None = None  # stop a reply that repeats itself, as the engine does


@dataclass
class _Reply:
    stats: ReplyStats
    started: float
    prompt_tokens: int = 0  # as the server counted them, when the prompt went as text
    tokens: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    ids_known: bool = True  # every token's id was sent or recovered
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))


class CompletionStream:
    def __init__(self, vocab: Model | None, index: PieceIndex | None, chat: TokenWindow | None) -> None:
        self.vocab, self.index, self.chat = vocab, index, chat

    def events(self, request: Request, should_stop: Callable[[], bool]) -> Iterator[Event]:
        """The reply as events, in the engine's order; ``should_stop`` ends it between chunks, or mid-prefill."""
        state = request.state
        reply = _Reply(ReplyStats(method=state.method, speculation_active=state.active,
                                  speculation_reason=state.reason, draft_length=request.draft_length if state.active else 0,
                                  prompt_tokens=len(request.prompt) if isinstance(request.prompt, list) else 0,
                                  n_ctx=request.n_ctx), perf_counter())
        stream = EventStream(f"{request.url}/completion", self._body(request), request.headers,
                             key_env=request.key_env, should_stop=should_stop)
        tracker = StepTracker()
        watch = loop_watch(request.loop)
        finish: str | None = None
        announced = False
        seen = 0  # tokens generated so far, as the server counts them
        try:
            for chunk in stream:
                timings = chunk.get("timings") or {}
                if not announced:
                    announced = True
                    yield self._started(request, reply, timings)
                ids = chunk_tokens(self.index, chunk.get("content", ""), chunk.get("tokens") or [],
                                   timings.get("predicted_n"), seen)
                seen += len(ids)
                finish = yield from self._chunk_tokens(chunk, timings, ids, tracker, watch, reply, request)
                if finish is not None:
                    yield from self._closed(tracker.cut(), reply, request)
                    break
                if chunk.get("stop"):
                    finish = FINISH.get(chunk.get("stop_type", ""), "stop")
                    break
                if should_stop():
                    finish = "cancelled"
                    break
            else:
                if not stream.aborted:  # the stream ended without its final chunk: the server went away
                    raise BackendError(f"the server at {request.url} stopped in the middle of the reply — the partial"
                                       " reply is kept")
                finish = "cancelled"
            yield from self._closed(tracker.close(), reply, request)
            if not announced:  # stopped before the server said anything (Esc during its prefill)
                yield self._started(request, reply, {})
        except BaseException:
            finish = "error" if finish is None else finish
            raise
        finally:
            stream.close()
            text = self._end(reply, finish)
        yield ReplyFinished(text, finish or "stop", reply.stats)

    @staticmethod
    def _body(request: Request) -> dict[str, Any]:
        body = {"prompt": request.prompt, "n_predict": request.max_tokens + UTF8_MARGIN, "stream": True,
                "timings_per_token": True, "return_tokens": True, "cache_prompt": True, **request.body}
        if request.top:
            body |= {"n_probs": request.top, "post_sampling_probs": False}  # the raw softmax, as the engine's
        return body

    def _chunk_tokens(self, chunk: dict[str, Any], timings: dict[str, Any], ids: list[int | None],
                      tracker: StepTracker, watch: LoopWatch | None, reply: _Reply,
                      request: Request) -> Generator[Event, None, str | None]:
        """A chunk's tokens as events (``timings``: the chunk's); returns "loop" or "length" where the reply ends
        within it."""
        content = chunk.get("content", "")
        unknown = None in ids  # then the chunk's own text is shown, not its last token's piece alone
        probabilities = _by_token(ids, chunk.get("completion_probabilities") or [])
        for i, token in enumerate(ids):
            kind, step, position, closed = tracker.token(timings.get("draft_n"), timings.get("draft_n_accepted"))
            yield from self._closed(closed, reply, request)
            judgement = _judgement(probabilities[i], position, tracker.drafting) if request.top else None
            event = self._token(reply, token, content, i == len(ids) - 1, unknown, kind, step, judgement)
            if event is None:
                continue
            yield event
            # (An id not recovered is like no other token: two of them are no repeat.)
            whole = not reply.decoder.getstate()[0]
            if watch is not None and watch.add(token if token is not None else object(), whole):
                reply.stats.loop_span, reply.stats.loop_tokens = watch.span, watch.covered
                return "loop"
            if reply.stats.generated >= request.max_tokens:
                return "length"
        return None

    @staticmethod
    def _started(request: Request, reply: _Reply, timings: dict[str, Any]) -> ReplyStarted:
        stats = reply.stats
        stats.prefill_tokens = int(timings.get("prompt_n", 0))
        stats.t_prefill = float(timings.get("prompt_ms", 0)) / 1000
        cached = int(timings.get("cache_n", 0))
        prompt = len(request.prompt) if isinstance(request.prompt, list) else cached + stats.prefill_tokens
        reply.prompt_tokens = stats.prompt_tokens = prompt
        return ReplyStarted(prompt, cached, stats.prefill_tokens, request.n_ctx, request.state)

    def _token(self, reply: _Reply, token: int | None, content: str, last: bool, unknown: bool, kind: TokenKind,
               step: int, judgement: Judgement | None) -> TokenEmitted | None:
        """Every token counts in its step, the end of generation too; like the engine's, that one is not shown."""
        vocab = self.vocab
        if vocab is not None and token is not None and vocab.is_eog(token):
            return None
        if vocab is not None and not unknown:
            text = reply.decoder.decode(vocab.piece(token))
        elif last:
            if not content and vocab is None:
                return None  # without a vocabulary, a token with no text is taken for the end of generation
            text = content  # what the server sent for the chunk, held-back tokens included
            reply.decoder.reset()
        else:
            text = ""
        if token is None:
            reply.ids_known = False
        elif self.chat is not None:
            self.chat.generated(token)
        reply.tokens.append(-1 if token is None else token)
        reply.pieces.append(text)
        elapsed = perf_counter() - reply.started
        reply.stats.token_emitted(kind, step, elapsed)
        return TokenEmitted(-1 if token is None else token, text, kind, step, elapsed, judgement)

    @staticmethod
    def _closed(steps: list[StepVerified], reply: _Reply, request: Request) -> Iterator[StepVerified]:
        context = reply.prompt_tokens + len(reply.tokens)
        for step in steps:
            reply.stats.record_step(step.drafted, step.accepted)
            yield dataclasses.replace(step, draft_length=request.draft_length, context_used=context)

    def _end(self, reply: _Reply, finish: str | None) -> str:
        text = "".join(reply.pieces)  # as the engine's: an unfinished character's bytes were never shown
        chat = self.chat
        if chat is not None:
            chat.end_turn(text, reply.tokens if reply.ids_known else None, finish)
            if not reply.ids_known:  # an id could not be recovered: the conversation tokenizes the text instead
                chat.tokens, chat.rendered = chat.rebuild(chat.messages)
        reply.stats.context_used = len(chat.tokens) if chat is not None else reply.prompt_tokens + len(reply.tokens)
        reply.stats.t_total = perf_counter() - reply.started
        return text


def _by_token(ids: list[int | None], probabilities: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The server's ``completion_probabilities`` entry of each token of a chunk (None where it sent none)."""
    if len(probabilities) == len(ids):
        return list(probabilities)
    entries = {entry.get("id"): entry for entry in probabilities}
    return [entries.get(token) for token in ids]


def _judgement(entry: dict[str, Any] | None, position: int, drafting: bool) -> Judgement:
    """A token's candidates as the server sent them (``top_logprobs``, raw softmax), and what it did not say."""
    untold = UNTOLD_REJECTIONS if drafting else ""
    if entry is None or not entry.get("top_logprobs"):  # none sent, or an empty list (an accepted draft token's)
        why = NO_CANDIDATES if drafting else HELD_BACK
        return Judgement(position, (), unknown=why + ("; " + untold if untold else ""))
    top = tuple(Candidate(int(c.get("id", -1)), str(c.get("token", "")), math.exp(float(c.get("logprob", -math.inf))))
                for c in entry.get("top_logprobs") or [])
    return Judgement(position, top, unknown=untold)
