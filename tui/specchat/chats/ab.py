"""A/B in a chat: the last reply against the same prompt rerun without speculation (see ``Backend.rerun_plain``).

Both arms decode the same prompt tokens from the same cache state, on the same target, context and sampling — so A/B
compares only a reply that finished by itself (a cancelled reply has no end to compare with) and was made under the
conditions the backend has now (a profile switch may have changed the target, the context or the sampling since).
Sampled replies differ by chance, so they are not compared token by token. Both front ends render the same rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.run_config import RunConfig
from ..engine.reference import PlainReference
from ..figures import DASH, num

if TYPE_CHECKING:
    from ..backends import Backend
    from ..engine.conversation import Message
    from .records import ReplyRecord

SAME_CACHE_TITLE = "A/B: the same prompt, target, context, sampling and cache state"
FRESH_CACHE_TITLE = ("A/B: the same prompt, target, context and sampling, not the same cache state — the plain arm"
                     " decoded {plain} prompt tokens, the reply {spec}")
FINISHED_BY_ITSELF = ("stop", "length", "loop")  # the plain arm stops by the same rules


NOT_RECORDED = ("this reply was stored before specchat kept what an A/B must share with it (the system prompt, the"
                " template, the sampling): the arms might not decode alike — regenerate it (Ctrl+R, /retry), then"
                " compare")


def conditions_of(config: RunConfig, system_prompt: str | None) -> dict[str, Any]:
    """What both arms of an A/B must share with the reply (kept with the reply, so a reopened chat is checked too):
    the plain arm reruns the prompt under today's system prompt and profile."""
    s, loop = config.sampling, config.loop
    return {"n_ctx": config.n_ctx, "kv_cache": config.kv_cache,
            "sampling": [s.temperature, s.top_k, s.top_p, s.min_p, s.seed],
            "loop": [loop.repeats, loop.min_tokens, loop.window] if loop is not None else None,
            "chat_template": config.chat_template, "system_prompt": system_prompt}


def refusal(record: ReplyRecord | None, config: RunConfig, target_id: str, system_prompt: str | None) -> str | None:
    """Why the last reply cannot be compared now, as one line; None when it can."""
    if record is None or record.stats is None:
        return "A/B needs a finished reply to compare — ask something first"
    if record.stats.get("method") == "none":
        return ("this reply was decoded without speculation: A/B would compare plain decoding with itself — turn"
                " speculation on (Ctrl+T, /spec on), regenerate it (Ctrl+R, /retry), then compare")
    if record.finish_reason not in FINISHED_BY_ITSELF:
        return (f"A/B compares a reply that finished by itself, and this one was {record.finish_reason} —"
                " regenerate it (Ctrl+R, /retry), then compare")
    kept = record.conditions
    if kept is None or "system_prompt" not in kept:
        return NOT_RECORDED
    now = conditions_of(config, system_prompt)
    changed = []
    if record.target_id != target_id:
        changed.append("the target model")
    for key, label in (("sampling", "the sampling"), ("n_ctx", "the context size"), ("kv_cache", "the KV cache"),
                       ("loop", "when a reply stops in a loop"), ("chat_template", "the chat template")):
        # (A reply stored before specchat stopped loops ran without the rule: its missing "loop" is None.)
        if kept.get(key) != now[key]:
            changed.append(label)
    parts = [f"the profile changed {' and '.join(changed)}"] if changed else []
    if kept["system_prompt"] != system_prompt:
        parts.append("the system prompt changed")
    if parts:
        return (f"{' and '.join(parts)} since this reply: the arms would not decode alike — regenerate it (Ctrl+R,"
                " /retry), then compare")
    return None


@dataclass(frozen=True)
class ABResult:
    spec: dict[str, Any]
    plain: dict[str, Any]
    identical: bool | None  # None when sampling: equal text is then not expected
    sampled: bool
    memory_of: str  # whose peak memory the table shows: this process, or the model server's
    prompt: str = ""  # the prompt both arms answered: what a reference taken from the plain arm names

    @property
    def title(self) -> str:
        """What the arms shared, no more: a managed server restarted for the plain arm has lost the cache the reply
        met, and a reopened chat's reply does not say what it found cached."""
        spec, plain = self.spec.get("prefill_tokens"), self.plain.get("prefill_tokens")
        if spec == plain:
            return SAME_CACHE_TITLE
        return FRESH_CACHE_TITLE.format(plain=num(plain, "d"), spec=num(spec, "d"))

    @property
    def speedup(self) -> float | None:
        spec, plain = self.spec.get("decode_tps"), self.plain.get("decode_tps")
        return spec / plain if spec and plain else None

    def rows(self) -> list[tuple[str, str, str]]:
        """(figure, speculation, plain), for every front end's table."""
        spec, plain = self.spec, self.plain

        def row(label: str, key: str, pattern: str, scale: float = 1, suffix: str = "") -> tuple[str, str, str]:
            return label, num(spec.get(key), pattern, scale, suffix), num(plain.get(key), pattern, scale, suffix)

        rows = [row("prompt tokens decoded", "prefill_tokens", "d"), row("TTFT", "ttft", ".0f", 1000, " ms"),
                row("decode tok/s", "decode_tps", ".1f"), row("total", "t_total", ".2f", 1, " s"),
                row(f"peak memory ({self.memory_of})", "peak_rss", ",.0f", 1e-6, " MB"),
                ("acceptance", num(spec.get("acceptance_rate"), ".0%"), DASH)]
        rows.append(("speed-up", num(self.speedup, ".2f", 1, "×"), "1.00×"))
        return rows

    @property
    def verdict(self) -> str:
        if self.sampled:
            return ("not compared — sampled replies differ by chance (the output follows the target's distribution;"
                    " compare at temperature 0 for identical tokens)")
        return "yes — identical tokens" if self.identical else "NO — the replies differ"

    def plain_reference(self, slope: float | None) -> PlainReference | None:
        """The plain arm as the reference "vs plain" uses: its rate at its own mean depth, with its sampling."""
        tps = self.plain.get("decode_tps")
        if not tps:
            return None
        depth = int(self.plain.get("prompt_tokens", 0) + self.plain.get("generated", 0) / 2)
        return PlainReference.measured(tps, depth, slope, self.sampled, f"A/B plain run of {quoted(self.prompt)}")


class Comparison:
    """An A/B about to run: ``run`` it on the worker thread; ``cancel`` stops its plain arm between steps."""

    def __init__(self, backend: Backend, record: ReplyRecord, earlier: list[Message], text: str, max_tokens: int,
                 cancel: threading.Event) -> None:
        self.backend, self.earlier, self.text, self.max_tokens, self.cancel = backend, earlier, text, max_tokens, cancel
        self.spec, self.spec_tokens = dict(record.stats or {}), list(record.tokens)
        self.reused = record.reused_tokens or 0
        self.sampled = not backend.config.sampling.greedy

    def run(self) -> ABResult | None:
        """Both arms' figures; None when cancelled."""
        plain, tokens = self.backend.rerun_plain(self.earlier, self.text, self.reused, self.max_tokens,
                                                 should_stop=self.cancel.is_set)
        if plain.get("finish_reason") == "cancelled" or self.cancel.is_set():
            return None
        identical = None if self.sampled else self.spec_tokens == tokens
        memory_of = "this process" if self.backend.pid is None else "the server"
        return ABResult(self.spec, plain, identical, self.sampled, memory_of, self.text)


QUOTED_CHARS = 32  # of a prompt named on screen


def quoted(prompt: str) -> str:
    """A prompt named in a line: its first words, in quotes (a reference says which prompt it was measured on — not
    "this prompt", which stops being true at the next message)."""
    words = " ".join(prompt.split())
    return f"'{words if len(words) <= QUOTED_CHARS else words[:QUOTED_CHARS - 1] + '…'}'"
