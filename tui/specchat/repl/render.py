"""What the REPL shows: the provenance colours as a prompt-toolkit style, and the one-line figures of the toolbar —
the same colours and definitions as the app."""

from __future__ import annotations

from prompt_toolkit.styles import Style

from ..colours import PROVENANCE
from ..figures import DASH, ESTIMATE, fit_fields, num, pct
from ..telemetry.live import LiveTelemetry

# prompt-toolkit spells a Rich colour name as "ansi…"; hex colours are the same.
STYLE = Style.from_dict({
    kind: (f"ansi{shown.style}" if shown.style and not shown.style.startswith("#") else shown.style) or ""
    for kind, shown in PROVENANCE.items()
} | {"ghost": "strike #808080", "dim": "#808080", "toolbar": "reverse", "warn": "#ffaf00 bold"})


def figures(t: LiveTelemetry, profile: str, method: str, memory: str, width: int = 10_000) -> str:
    """The toolbar and status line: profile, method, ACTIVE/INACTIVE, acceptance, mean length, tok/s, vs plain,
    memory, context — within ``width`` columns, the least useful fields left out first."""
    speculation = t.speculation
    state = DASH if speculation is None else "ACTIVE" if speculation.active else "INACTIVE"
    now, reply = t.tps_now(), t.reply_rate()
    rate = now if t.generating and now is not None else reply
    approx = ESTIMATE if t.estimated else ""
    speedup = t.speedup()
    vs = num(speedup, ".2f", 1, "×") + (" slower than plain!" if speedup is not None and speedup < 1 and speculation
                                        and speculation.active else " nothing drafted" if t.nothing_drafted else "")
    context = f"{approx}{t.context_used}/{t.n_ctx}" if t.n_ctx else DASH
    fields = [(8, profile), (4, method), (0, state), (3, f"accept {pct(t.reply.acceptance_rate)}"),
              (5, f"mean {num(t.reply.mean_acceptance_length, '.2f')}"), (1, f"{approx}{num(rate, '.0f')} tok/s"),
              (2, f"vs plain {vs}"), (7, memory), (6, f"ctx {context}")]
    if t.busy_machine:
        fields.append((9, f"⚠ {t.busy_machine}"))
    return fit_fields(fields, width)
