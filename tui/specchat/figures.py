"""How every front end writes a figure: one dash for what cannot be measured, one summary line, one status line.

A figure that cannot be measured is "–" (U+2013) everywhere — sidebar, REPL, ``ask``, A/B tables — never 0 and never
a hyphen. An estimated count (tokens counted with tiktoken where a server sends text without token ids) is prefixed
with "≈".
"""

from __future__ import annotations

from typing import Any

DASH = "–"
ESTIMATE = "≈"


def num(value: float | None, pattern: str, scale: float = 1.0, suffix: str = "") -> str:
    """``value × scale`` in ``pattern`` followed by ``suffix``, or the dash."""
    if value is None:
        return DASH
    return format(value * scale if scale != 1 else value, pattern) + suffix  # an int stays an int for "d"


def pct(value: float | None) -> str:
    return num(value, ".0%")


def mb(value: float | None) -> str:
    return num(value, ",.0f", 1e-6, " MB")


def draft_length(stats: Any) -> str:
    """The draft length a reply ran with: "auto" for the adaptive policy (the length it chose last is no setting)."""
    return "auto" if stats.adaptive else str(stats.draft_length)


def looped(span: int, tokens: int, estimated: bool = False) -> str:
    """How a reply that stopped in a loop (finish reason "loop", engine/repetition.py) says so; ``estimated`` when its
    tokens are tiktoken's count of the text (a server that sends no ids)."""
    approx = ESTIMATE if estimated else ""
    what = (f"the same {approx}{span}-token span over and over ({approx}{tokens} tokens)" if span
            else "it repeated itself")
    return f"stopped in a loop: {what} — [chat] stop_on_loop = false lets a reply run on"


def finish_said(finish_reason: str, stats: Any) -> str:
    """A finish reason for a summary line: the word itself, a loop with what it repeated."""
    if finish_reason == "loop":
        return looped(stats.loop_span, stats.loop_tokens, stats.estimated)
    return finish_reason


def summary_line(stats: Any, finish_reason: str) -> str:
    """The one line after a reply, for ``ask`` and the REPL."""
    approx = ESTIMATE if getattr(stats, "estimated", False) else ""
    parts = [f"[{stats.method}" + (f" n_max={draft_length(stats)}]" if stats.speculation_active else "]")]
    parts.append(f"{approx}{stats.generated} tokens")
    if stats.decode_tps:
        parts.append(f"{approx}{stats.decode_tps:.1f} tok/s")
    if stats.ttft is not None:
        parts.append(f"TTFT {stats.ttft * 1000:.0f} ms")
    if stats.drafted:
        parts.append(f"accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})")
        parts.append(f"mean accept length {stats.mean_acceptance_length:.2f}")
    if not stats.speculation_active and stats.speculation_reason:
        parts.append(f"speculation off: {stats.speculation_reason}")
    parts.append(finish_said(finish_reason, stats))
    return " · ".join(parts)


def fit_fields(fields: list[tuple[int, str]], width: int, separator: str = " · ") -> str:
    """The fields that fit in ``width`` columns, in their order; ``fields`` are (rank, text), rank 0 the most useful.
    The least useful fields go first, so a narrow terminal keeps the figures that matter whole instead of cutting the
    line at its edge."""
    kept = sorted(fields, key=lambda f: f[0])
    while kept and len(" " + separator.join(text for _, text in _in_order(fields, kept)) + " ") > width:
        kept.pop()
    return " " + separator.join(text for _, text in _in_order(fields, kept)) + " "


def _in_order(fields: list[tuple[int, str]], kept: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [f for f in fields if f in kept]
