"""The live telemetry sidebar: a view of ``LiveTelemetry`` plus memory, refreshed on a timer while generating."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Sparkline, Static

from ...telemetry.live import LiveTelemetry
from ...telemetry.memory import GpuMemory, GpuUnavailable

BAR = "█"


@dataclass(frozen=True)
class MemorySnapshot:
    gpu: GpuMemory | GpuUnavailable
    rss: int | None
    model_bytes: dict[str, int]  # role → weights size


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    method: str
    status: str = ""  # e.g. "loading models…" or a load error


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _mb(value: int | None) -> str:
    return "–" if value is None else f"{value / 1e6:,.0f} MB"


def _grid(rows: list[tuple[str, str | Text]], *, right: bool = False) -> tuple[Table, str]:
    """A label/value grid, and its text to tell whether it changed since the last refresh."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim")
    table.add_column(justify="right" if right else "left")
    for label, value in rows:
        table.add_row(label, value)
    return table, "\n".join(f"{label}\t{value}" for label, value in rows)


def _bar(fraction: float, width: int = 10) -> str:
    full = max(0, min(width, round(fraction * width)))
    return BAR * full + "░" * (width - full)


class Sidebar(VerticalScroll):
    def __init__(self) -> None:
        super().__init__(id="sidebar")
        self.box_profile = Static(id="sb-profile")
        self.box_acceptance = Static(id="sb-acceptance")
        self.box_spark = Sparkline([], id="sb-spark")
        self.box_positions = Static(id="sb-positions")
        self.box_speed = Static(id="sb-speed")
        self.box_counts = Static(id="sb-counts")
        self.box_memory = Static(id="sb-memory")
        self.box_context = Static(id="sb-context")

    def compose(self) -> ComposeResult:
        yield self.box_profile
        yield self.box_acceptance
        yield self.box_spark
        yield self.box_positions
        yield self.box_speed
        yield self.box_counts
        yield self.box_memory
        yield self.box_context

    def _set(self, box: Static, content: Text | Table, key: str | None = None) -> None:
        """Update a section only when what it shows changed: every update costs a layout pass."""
        key = content.plain if key is None else key
        if getattr(box, "_shown", None) != key:
            box._shown = key
            box.update(content)

    def show(self, t: LiveTelemetry, profile: ProfileInfo, memory: MemorySnapshot | None) -> None:
        spec = t.speculation
        head = Text()
        head.append(f"{profile.name}\n", style="bold")
        head.append(f"method {profile.method}" + (f" · n_max {t.n_max}" if t.n_max else "") + "\n")
        if profile.status:
            head.append(profile.status + "\n", style="italic")
        if spec is None:
            head.append(" IDLE ", style="reverse dim")
        elif spec.active:
            head.append(" ACTIVE ", style="bold black on green")
        else:
            head.append(" INACTIVE ", style="bold black on #ffaf00")
            head.append(f"\n{spec.reason}", style="dim")
        self._set(self.box_profile, head)

        mean = t.reply.mean_acceptance_length or t.chat.mean_acceptance_length
        self._set(self.box_acceptance, *_grid([
            ("acceptance", f"reply {_pct(t.reply.acceptance_rate)} · chat {_pct(t.chat.acceptance_rate)}"),
            ("mean length", "–" if mean is None else f"{mean:.2f} tokens/step"),
        ]))
        spark = list(t.spark) or [0.0]
        if spark != self.box_spark.data:
            self.box_spark.data = spark

        rates = t.reply.position_rates or t.chat.position_rates
        positions = Text("per position\n", style="dim")
        for i, rate in enumerate(rates[:8]):
            positions.append(f" {i + 1} ")
            positions.append(_bar(rate or 0.0), style="green")
            positions.append(f" {_pct(rate)}\n")
        self._set(self.box_positions, positions if rates else Text("per position –", style="dim"))

        now, reply = t.tps_now(), t.reply_rate()
        speed: list[tuple[str, str | Text]] = [
            ("tok/s", f"now {'–' if now is None else f'{now:.0f}'} · reply {'–' if reply is None else f'{reply:.0f}'}"),
            ("TTFT", "–" if t.ttft is None else f"{t.ttft * 1000:.0f} ms"),
        ]
        speedup = t.speedup()
        if speedup is None:
            speed.append(("vs plain", "–" if t.plain_tps is None else f"plain {t.plain_tps:.0f} tok/s"))
        else:
            speed.append(("vs plain", Text(f"{speedup:.2f}×", style="bold green" if speedup >= 1 else "bold #ffaf00")))
            speed.append(("", Text(f"plain {t.plain_tps:.0f} tok/s ({t.plain_source})", style="dim")))
            if speedup < 1 and spec is not None and spec.active:
                speed.append(("", Text("⚠ slower than plain decoding", style="#ffaf00")))
        self._set(self.box_speed, *_grid(speed))

        r = t.reply
        self._set(self.box_counts, *_grid([
            ("drafted", str(r.drafted)),
            ("accepted", str(r.accepted)),
            ("rejected", str(r.drafted - r.accepted)),
            ("ignored", str(r.ignored)),
        ], right=True))

        mem = Text("memory\n", style="dim")
        if memory is None:
            mem.append("–")
        elif isinstance(memory.gpu, GpuMemory):
            g = memory.gpu
            mem.append(f"{g.name}\nVRAM {_mb(g.used)} / {_mb(g.total)}\nthis process {_mb(g.process)}\n")
        else:
            mem.append(f"no GPU: {memory.gpu.reason}\n")
            mem.append(f"RAM (RSS) {_mb(memory.rss)}\n")
        if memory is not None:
            for role, size in memory.model_bytes.items():
                mem.append(f"{role} weights {_mb(size)}\n")
        self._set(self.box_memory, mem)

        ctx = Text("context\n", style="dim")
        if t.n_ctx:
            ctx.append(f"{t.context_used} / {t.n_ctx} ")
            ctx.append(_bar(t.context_used / t.n_ctx), style="#5fafff")
            if t.trimmed:
                ctx.append(f"\n{t.trimmed} old messages dropped", style="dim")
        else:
            ctx.append("–")
        self._set(self.box_context, ctx)
