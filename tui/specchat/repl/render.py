"""What the REPL shows: the provenance colours as a prompt-toolkit style, and the one-line figures of the toolbar —
the same colours and definitions as the app."""

from __future__ import annotations

from prompt_toolkit.styles import Style

from ..colours import PROVENANCE
from ..telemetry.live import LiveTelemetry

# prompt-toolkit spells a Rich colour name as "ansi…"; hex colours are the same.
STYLE = Style.from_dict({
    kind: (f"ansi{rich}" if rich and not rich.startswith("#") else rich) or "" for kind, (rich, _) in PROVENANCE.items()
} | {"ghost": "strike #808080", "dim": "#808080", "toolbar": "reverse", "warn": "#ffaf00 bold"})


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def figures(t: LiveTelemetry, profile: str, method: str, memory: str) -> str:
    """The toolbar: profile, method, ACTIVE/INACTIVE, acceptance, mean length, tok/s, vs plain, memory, context."""
    spec = t.speculation
    state = "–" if spec is None else "ACTIVE" if spec.active else "INACTIVE"
    mean = t.reply.mean_acceptance_length
    now, reply = t.tps_now(), t.reply_rate()
    rate = now if t.generating and now is not None else reply
    speedup = t.speedup()
    vs = "–" if speedup is None else f"{speedup:.2f}×" + (" slower than plain!" if speedup < 1 and spec and spec.active
                                                         else "")
    context = f"{t.context_used}/{t.n_ctx}" if t.n_ctx else "–"
    return (f" {profile} · {method} · {state} · accept {_pct(t.reply.acceptance_rate)} · mean "
            f"{'–' if mean is None else f'{mean:.2f}'} · {'–' if rate is None else f'{rate:.0f}'} tok/s · vs plain {vs}"
            f" · {memory} · ctx {context} " + (f"· ⚠ {t.busy_machine} " if t.busy_machine else ""))
