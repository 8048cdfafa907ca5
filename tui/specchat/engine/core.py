"""The speculative chat engine: draft → verify → accept → roll back, readable in one place.

Each step the target decodes ``[pending, d1..dk]`` in one batch with logits on every row, where ``pending`` is the
last emitted token (not yet in the target's cache) and ``d1..dk`` the draft. Row i judges d(i+1); the first rejected
position yields the target's own token (a correction), a fully accepted draft earns the token after it (a bonus).
Rejected positions are removed from the KV cache before the next step, so the cache always holds the conversation
minus the pending token.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

import numpy as np

from ..errors import ConfigError, ContextError, IncompatibleDraftError
from .adaptive import AdaptiveDraftLength
from .chat_template import ChatTemplate
from .compat import check_pair
from .config import EngineConfig, ModelSpec, SpecConfig
from .drafters import Draft, Drafter, ModelDrafter, NgramDrafter
from .events import (
    ContextTrimmed,
    DraftRejected,
    Event,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    TokenEmitted,
    TokenKind,
)
from .llama import Context, Model, check_gguf_file, common_prefix
from .sampling import accept_or_resample, distribution, greedy_token
from .telemetry import ReplyStats

DEFAULT_MAX_TOKENS = 512


@dataclass
class Message:
    role: str
    content: str
    # The tokens the engine generated for an assistant message, so a restored chat sees exactly what was produced.
    tokens: list[int] | None = None
    finish_reason: str | None = None


@dataclass
class _Reply:
    """Bookkeeping of the reply being generated."""

    stats: ReplyStats
    started: float
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))


def check_draft_compatible(target: Path, draft: Path) -> None:
    problems = check_pair(target, draft)
    if problems:
        raise IncompatibleDraftError(
            f"draft {draft.name} cannot speculate for target {target.name}: {problems[0]}"
            " — pick a draft of the same model family (see: specchat profiles drafts)"
        )


def _target_identity(config: EngineConfig) -> tuple[object, ...]:
    """What a target's weights and KV cache depend on; anything else changes without a reload."""
    return (config.target.path, config.target.n_gpu_layers, config.n_ctx)


def _draft_identity(spec: ModelSpec) -> tuple[object, ...]:
    """What a draft's weights depend on; threads change without a reload."""
    return (spec.path, spec.n_gpu_layers)


@dataclass
class _LoadedTarget:
    model: Model
    ctx: Context
    template: ChatTemplate

    @classmethod
    def open(cls, config: EngineConfig) -> _LoadedTarget:
        model = Model(config.target.path, role="target", n_gpu_layers=config.target.n_gpu_layers)
        try:
            ctx = Context(model, n_ctx=config.n_ctx, threads=config.target.threads)
            template = ChatTemplate(
                model.chat_template(),
                bos_token=model.raw_piece(model.bos, special=True).decode("utf-8", "replace"),
                eos_token=model.raw_piece(model.eos, special=True).decode("utf-8", "replace"),
            )
        except BaseException:
            model.close()
            raise
        return cls(model, ctx, template)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


@dataclass
class _LoadedDraft:
    model: Model
    ctx: Context
    drafter: ModelDrafter
    identity: tuple[object, ...]  # see _draft_identity
    threads: int

    @classmethod
    def open(cls, config: EngineConfig) -> _LoadedDraft:
        spec = config.draft
        assert spec is not None  # EngineConfig guarantees it for method "draft"
        check_gguf_file(spec.path, "draft")
        # Judge the pair from the headers first: an incompatible draft is refused before its weights load.
        check_draft_compatible(config.target.path, spec.path)
        model = Model(spec.path, role="draft", n_gpu_layers=spec.n_gpu_layers)
        try:
            ctx = Context(model, n_ctx=config.n_ctx, threads=spec.threads)
        except BaseException:
            model.close()
            raise
        return cls(model, ctx, ModelDrafter(ctx), _draft_identity(spec), spec.threads)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


class Engine:
    """A chat with one target model, optionally sped up by a drafter. Not thread-safe: drive it from one thread."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._target = _LoadedTarget.open(config)
        try:
            self._draft = _LoadedDraft.open(config) if config.spec.method == "draft" else None
        except BaseException:
            self._target.close()
            raise
        self.messages: list[Message] = []
        self.tokens: list[int] = []  # the conversation as the target reads it; the KV cache mirrors a prefix of it
        self._rendered = ""  # the text that ``tokens`` encode
        self._learned: dict[SpecConfig, AdaptiveDraftLength] = {}
        self._configure_speculation()
        self.new_chat()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def target(self) -> Model:
        return self._target.model

    @property
    def ctx(self) -> Context:
        return self._target.ctx

    @property
    def template(self) -> ChatTemplate:
        return self._target.template

    @property
    def draft_model(self) -> Model | None:
        return self._draft.model if self._draft is not None else None

    def close(self) -> None:
        if self._draft is not None:
            self._draft.close()
        self._target.close()

    def _configure_speculation(self) -> None:
        spec = self.config.spec
        self._ngram = NgramDrafter(spec.ngram_min, spec.ngram_max)
        # What "auto" learned about a configuration survives a switch away and back (an A/B run, a toggle).
        self._adaptive = self._learned.setdefault(spec, AdaptiveDraftLength()) if spec.adaptive else None
        self._reseed()

    def apply(self, config: EngineConfig) -> str:
        """Switch to ``config`` with the least work, keeping the conversation; returns what was done.

        "parameters": draft length, sampling or method none/ngram change from the next step on, nothing reloads.
        "draft reloaded": only the draft model changed. "full reload": the target changed (both models reload and
        the conversation is re-tokenized for it). If a load fails the engine keeps its previous configuration.
        """
        old = self.config
        if _target_identity(config) != _target_identity(old):
            target = _LoadedTarget.open(config)
            try:
                draft = _LoadedDraft.open(config) if config.spec.method == "draft" else None
            except BaseException:
                target.close()
                raise
            self.close()
            self._target, self._draft, self.config = target, draft, config
            self._learned.clear()  # step costs measured on the old target mean nothing for the new one
            self._configure_speculation()
            # Token ids of the old target mean nothing to the new one: keep the text, re-tokenize.
            self.tokens, self._rendered = [], ""
            self.restore([Message(m.role, m.content, None, m.finish_reason) for m in self.messages])
            return "full reload"
        action = "parameters"
        wanted_draft = config.draft if config.spec.method == "draft" else None
        if wanted_draft is not None and (self._draft is None or self._draft.identity != _draft_identity(wanted_draft)):
            draft = _LoadedDraft.open(config)
            if self._draft is not None:
                self._draft.close()
            self._draft = draft
            action = "draft reloaded"
        elif self._draft is not None and (config.draft is None or self._draft.identity != _draft_identity(config.draft)):
            # The profile no longer names this draft: free its memory rather than keep it for a toggle back.
            self._draft.close()
            self._draft = None
        if config.target.threads != old.target.threads:
            self.ctx.set_threads(config.target.threads)
        if self._draft is not None and config.draft is not None and config.draft.threads != self._draft.threads:
            self._draft.ctx.set_threads(config.draft.threads)
            self._draft.threads = config.draft.threads
        self.config = config
        if config.spec != old.spec or config.sampling != old.sampling:
            self._configure_speculation()
        return action

    def _reseed(self) -> None:
        seed = self.config.sampling.seed
        self._rng = np.random.default_rng(seed)
        self._draft_rng = np.random.default_rng(seed + 1)

    @property
    def drafter(self) -> Drafter | None:
        method = self.config.spec.method
        if method == "draft" and self._draft is not None:
            return self._draft.drafter
        if method == "ngram":
            return self._ngram
        return None

    def speculation_state(self) -> SpeculationState:
        method = self.config.spec.method
        if method == "none":
            return SpeculationState(method, False, "method is 'none' (plain decoding)")
        if self._adaptive is not None and not self._adaptive.active:
            return SpeculationState(method, False, self._adaptive.reason)
        return SpeculationState(method, True)

    @property
    def n_max(self) -> int:
        """The draft length in use: fixed by the profile, or the adaptive controller's current choice."""
        return self._adaptive.k if self._adaptive is not None else int(self.config.spec.n_max)

    # -- conversation -> tokens ----------------------------------------------------------------------------------

    def _tokenize_full(self, text: str) -> list[int]:
        bos_text = self.template.bos_token
        add_bos = self.target.add_bos and not (bos_text and text.startswith(bos_text))
        return self.target.tokenize(text, add_special=add_bos)

    def _extend(self, tokens: list[int], rendered: str, messages: list[Message]) -> tuple[list[int], str]:
        """Tokens and text of ``messages`` (ending with a user turn) plus the assistant prompt, reusing a prefix.

        Only the text after what ``tokens`` already encode is tokenized, so generated tokens are kept as generated
        instead of being re-tokenized from their text (which need not give the same ids).
        """
        full = self.template.render([{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=True)
        if tokens and full.startswith(rendered):
            return tokens + self.target.tokenize(full[len(rendered) :], add_special=False), full
        # Templates that rewrite earlier turns (e.g. Qwen3 dropping old <think> blocks) need a fresh tokenization.
        return self._tokenize_full(full), full

    def _rebuild(self, messages: list[Message]) -> tuple[list[int], str]:
        """Tokens and text of a finished conversation, built the same way a live chat builds them."""
        tokens: list[int] = []
        rendered = ""
        for i, message in enumerate(messages):
            if message.role != "assistant":
                continue
            tokens, rendered = self._extend(tokens, rendered, messages[:i])
            tokens = tokens + (message.tokens if message.tokens is not None else self.target.tokenize(message.content, add_special=False))
            rendered += message.content
        return tokens, rendered

    def measure_plain_step(self, samples: int = 9) -> float | None:
        """Seconds of one plain single-token step of the target, measured at the end of the cache and undone.

        This is the reference a live speed-up is compared against: plain decoding of the same target, right now.
        """
        keep = len(self.ctx.cached)
        if keep + 1 >= self.ctx.n_ctx:
            return None
        token = self.tokens[-1] if self.tokens else self.target.bos
        times = []
        for _ in range(samples + 2):  # the first decodes after a load run on cold caches: not counted
            start = perf_counter()
            self.ctx.decode([token])
            times.append(perf_counter() - start)
            self.ctx.truncate(keep)
        return sorted(times[2:])[samples // 2]

    def clear_cache(self) -> None:
        """Empty the KV caches, so the next reply decodes its whole prompt (benchmarks time cold prompts)."""
        self.ctx.truncate(0)
        if self._draft is not None:
            self._draft.ctx.truncate(0)

    def new_chat(self) -> None:
        """Start over with only the system prompt; the KV cache keeps whatever prefix still matches."""
        system = self.config.system_prompt
        self.restore([Message("system", system)] if system else [])

    def restore(self, messages: list[Message]) -> None:
        """Continue an earlier conversation; the KV cache is reused as far as it matches."""
        self.messages = list(messages)
        self._adopt(*self._rebuild(self.messages))

    def _adopt(self, tokens: list[int], rendered: str) -> None:
        """Make ``tokens`` the conversation; drafters that index it start over unless it only grew."""
        if common_prefix(self.tokens, tokens) < len(self.tokens):
            self._ngram.reset()
        self.tokens, self._rendered = tokens, rendered

    def _prompt(self, user: Message, reserve: int) -> tuple[list[int], str, ContextTrimmed | None]:
        n_ctx = self.config.n_ctx
        history = self.messages + [user]
        tokens, rendered = self._extend(self.tokens, self._rendered, history)
        before = len(tokens)
        dropped = 0
        while len(tokens) + reserve > n_ctx:
            keep_from = next((i for i, m in enumerate(history) if m.role != "system"), 0)
            turn_end = next((i for i in range(keep_from + 1, len(history)) if history[i].role == "user"), None)
            if turn_end is None:
                break  # only the system prompt and this message are left
            dropped += turn_end - keep_from
            history = history[:keep_from] + history[turn_end:]
            base_tokens, base_text = self._rebuild(history[:-1])
            tokens, rendered = self._extend(base_tokens, base_text, history)
        if len(tokens) >= n_ctx:
            raise ContextError(
                f"the prompt needs {len(tokens)} tokens but the context holds {n_ctx} — raise n_ctx in the profile"
                " or shorten the message"
            )
        if dropped:
            self.messages = history[:-1]
            return tokens, rendered, ContextTrimmed(dropped, before, len(tokens), n_ctx)
        return tokens, rendered, None

    # -- generation ------------------------------------------------------------------------------------------------

    def reply(
        self,
        user_text: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Answer ``user_text``, yielding events as tokens are decided. Stops between steps when ``should_stop()``."""
        if not user_text.strip():
            raise ConfigError("the message is empty — type something to send")
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be ≥ 1, got {max_tokens}")
        started = perf_counter()
        cfg = self.config
        user = Message("user", user_text)
        prompt, rendered, trimmed = self._prompt(user, reserve=min(max_tokens, cfg.n_ctx // 4))
        if trimmed:
            yield trimmed
        state = self.speculation_state()
        stats = ReplyStats(
            method=cfg.spec.method,
            speculation_active=state.active,
            speculation_reason=state.reason,
            n_max=self.n_max if cfg.spec.method != "none" else 0,
            adaptive=cfg.spec.adaptive,
            prompt_tokens=len(prompt),
            n_ctx=cfg.n_ctx,
        )
        reused = min(common_prefix(self.ctx.cached, prompt), len(prompt) - 1)
        yield ReplyStarted(len(prompt), reused, len(prompt) - reused, cfg.n_ctx, state)

        t = perf_counter()
        stats.prefill_tokens = self.ctx.sync(prompt)
        stats.t_prefill = perf_counter() - t
        # The user's message is part of the conversation from here on, whatever happens to the reply.
        self.messages.append(user)
        self._adopt(prompt, rendered)

        reply = _Reply(stats, started)
        emitted: list[tuple[int, TokenKind]] = [(self._pick(self.ctx.logits()[-1]), TokenKind.TARGET)]
        step = 0
        finish = None
        try:
            while True:
                for token, kind in emitted:
                    if self.target.is_eog(token):
                        finish = "stop"
                        break
                    yield self._emit(reply, token, kind, step)
                    if stats.generated >= max_tokens:
                        finish = "length"
                        break
                if finish:
                    break
                if should_stop():
                    finish = "cancelled"
                    break
                room = cfg.n_ctx - len(self.ctx.cached) - 1  # slots left after the pending token
                if room < 0:
                    finish = "context_full"
                    break
                step += 1
                # Leave room for the target's own token after the draft, so nothing judged goes unshown.
                emitted, events = self._step(step, stats, max_draft=min(room, max_tokens - stats.generated - 1))
                yield from events
        finally:
            text = "".join(reply.text) + reply.decoder.decode(b"", final=True)
            reason = finish or "cancelled"  # a consumer that stops iterating has cancelled the reply
            final_state = self.speculation_state()
            stats.speculation_active, stats.speculation_reason = final_state.active, final_state.reason
            self.messages.append(Message("assistant", text, list(reply.tokens), reason))
            self._rendered += text
            stats.context_used = len(self.tokens)
            stats.t_total = perf_counter() - started
        yield ReplyFinished(text, reason, stats)

    def _emit(self, reply: _Reply, token: int, kind: TokenKind, step: int) -> TokenEmitted:
        stats = reply.stats
        text = reply.decoder.decode(self.target.piece(token))
        reply.tokens.append(token)
        reply.text.append(text)
        self.tokens.append(token)
        stats.generated += 1
        stats.by_kind[kind] += 1
        elapsed = perf_counter() - reply.started
        if stats.ttft is None:
            stats.ttft = elapsed
        return TokenEmitted(token, text, kind, step, elapsed)

    def _pick(self, logits: np.ndarray) -> int:
        sampling = self.config.sampling
        if sampling.greedy:
            return greedy_token(logits)
        return distribution(logits, sampling).sample(self._rng)

    def _step(self, step: int, stats: ReplyStats, max_draft: int) -> tuple[list[tuple[int, TokenKind]], list[Event]]:
        """One draft → verify → accept → roll back step. Returns the tokens to emit and the step's other events."""
        spec = self.config.spec
        drafter = self.drafter
        adaptive = self._adaptive
        planned = adaptive.plan() if adaptive is not None else self.n_max
        draft = Draft([])
        ignored = 0
        t_start = perf_counter()
        if drafter is not None and min(planned, max_draft) > 0:
            draft = drafter.propose(self.tokens, min(planned, max_draft), spec.p_min, self.config.sampling, self._draft_rng)
            stats.t_draft += perf_counter() - t_start
            draft = self._until_end_of_generation(draft)
            if len(draft.tokens) < spec.n_min:
                ignored = len(draft.tokens)
                draft = Draft([])

        t = perf_counter()
        base = len(self.tokens)  # the cache holds tokens[:-1]; the pending token goes in first
        self.ctx.decode([self.tokens[-1], *draft.tokens], all_logits=True)
        rows = self.ctx.logits()
        n_accepted, next_token = self._verify(rows, draft)
        self.ctx.truncate(base + n_accepted)
        t_end = perf_counter()
        stats.t_verify += t_end - t

        drafted = len(draft.tokens)
        stats.record_step(drafted, n_accepted, ignored)
        events: list[Event] = []
        if adaptive is not None and drafter is not None:
            if adaptive.observe(min(planned, max_draft), drafted, n_accepted, n_accepted + 1, t_end - t_start):
                events.append(SpeculationChanged(self.speculation_state()))
            stats.n_max = adaptive.k
        if n_accepted < drafted:
            tail = draft.tokens[n_accepted:]
            # The correction replaces the first rejected token; everything after it was never judged.
            events.append(DraftRejected(tuple(tail), self.target.detokenize(tail), step))
        events.append(StepVerified(step, drafted, n_accepted, ignored, self.n_max, base + n_accepted + 1))
        if drafted == 0:
            last_kind = TokenKind.TARGET
        elif n_accepted == drafted:
            last_kind = TokenKind.BONUS
        else:
            last_kind = TokenKind.CORRECTED
        emitted = [(t, TokenKind.ACCEPTED) for t in draft.tokens[:n_accepted]] + [(next_token, last_kind)]
        return emitted, events

    def _until_end_of_generation(self, draft: Draft) -> Draft:
        """Drop draft tokens from the first end-of-generation token on.

        The reply ends there anyway, and an accepted end token would be a counted draft token that is never shown;
        letting the target produce the end token keeps drafted, accepted and the emitted kinds in agreement.
        """
        for i, token in enumerate(draft.tokens):
            if self.target.is_eog(token):
                return Draft(draft.tokens[:i], draft.q[:i] if draft.q is not None else None)
        return draft

    def _verify(self, rows: np.ndarray, draft: Draft) -> tuple[int, int]:
        """How many draft tokens the target accepts, and the target's token after them."""
        sampling = self.config.sampling
        for i, token in enumerate(draft.tokens):
            if sampling.greedy:
                chosen = greedy_token(rows[i])
                ok = chosen == token
            else:
                q = draft.q[i] if draft.q is not None else None
                ok, chosen = accept_or_resample(distribution(rows[i], sampling), q, token, self._rng, self.target.n_vocab)
            if not ok:
                return i, chosen
        return len(draft.tokens), self._pick(rows[len(draft.tokens)])
