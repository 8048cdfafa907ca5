"""The live telemetry sidebar: a view of ``LiveTelemetry`` plus memory, refreshed with every frame of a reply."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...engine.events import DraftSource
from ...telemetry.live import LiveTelemetry
from ...telemetry.memory import GpuMemory, GpuUnavailable
from ...figures import DASH, ESTIMATE, mb, num, pct
from ..text_lines import TextLines

BAR = "█"
SPARK_LEVELS = " ▁▂▃▄▅▆▇█"
LABEL_WIDTH = 12
CONTENT_WIDTH = 34  # the sidebar's 38 columns less border and padding, until it is laid out
MIN_HANGING_WIDTH = 12  # narrower than this under an indent, a wrapped line starts again at the edge


@dataclass(frozen=True)
class MemorySnapshot:
    gpu: GpuMemory | GpuUnavailable
    rss: int | None
    model_bytes: dict[str, int]  # role → weights size
    whose: str = "this process"  # or the model server's
    cpu_only: bool = False  # GPU layers were asked for, and the build runs them on the CPU (the notice says the fix)


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    method: str
    status: str = ""  # e.g. "loading models…" or a load error
    where: str = ""  # where the model runs: in this process, or a server's pid and URL
    advice: str = ""  # speculation slower than plain: why, and the key that switches to what pays here


def _grid(rows: list[tuple[str, str | Text]]) -> Text:
    """A label/value grid as plain text: a Rich table costs a full measure-and-render on every refresh."""
    text = Text()
    for i, (label, value) in enumerate(rows):
        text.append(f"{label:<{LABEL_WIDTH}}", style="dim")
        text.append(value)
        if i < len(rows) - 1:
            text.append("\n")
    return text


def _spark(values: list[float]) -> Text:
    """Per-step acceptance, oldest first, on a fixed 0–100 % scale so heights compare across replies."""
    line = "".join(SPARK_LEVELS[round(v * (len(SPARK_LEVELS) - 1))] for v in values)
    return Text(line, style="green")


def _bar(fraction: float, width: int = 10) -> str:
    full = max(0, min(width, round(fraction * width)))
    return BAR * full + "░" * (width - full)


def _head(t: LiveTelemetry, profile: ProfileInfo) -> Text:
    """The profile, its method and draft length, where it runs, and whether speculation is active (and why not)."""
    speculation = t.speculation
    head = Text()
    head.append(f"{profile.name}\n", style="bold")
    length = (" · draft length auto" + (f" ({t.draft_length} now)" if t.draft_length else "")) if t.adaptive else \
        (f" · draft length {t.draft_length}" if t.draft_length else "")
    head.append(f"method {profile.method}{length}\n")
    if profile.where:
        head.append(profile.where + "\n", style="dim")
    if profile.status:
        head.append(profile.status + "\n", style="italic")
    if speculation is None:
        head.append(" IDLE ", style="reverse dim")
    elif speculation.active:
        head.append(" ACTIVE ", style="bold black on green")
    else:
        head.append(" INACTIVE ", style="bold black on #ffaf00")
        head.append(f"\n{speculation.reason}", style="dim")
    if t.stored_chats:
        head.append(f"\n{t.stored_chats}", style="dim")
    return head


def _acceptance(t: LiveTelemetry) -> Text:
    acceptance = _grid([
        ("acceptance", f"reply {pct(t.reply.acceptance_rate)} · chat {pct(t.chat.acceptance_rate)}"),
        ("mean length", f"reply {num(t.reply.mean_acceptance_length, '.2f')}"
                        f" · chat {num(t.chat.mean_acceptance_length, '.2f')}"),
    ])
    spark = list(t.spark)[-CONTENT_WIDTH:]
    if not spark:  # a heading over nothing says nothing: one line instead
        acceptance.append("\nper drafting step –", style="dim")
        return acceptance
    acceptance.append("\nacceptance by step, latest right\n", style="dim")
    acceptance.append_text(_spark(spark))
    return acceptance


def _positions(t: LiveTelemetry) -> Text:
    rates = t.reply.position_rates
    positions = Text("per position, this reply" + ("\n" if rates else " –"), style="dim")
    for i, rate in enumerate(rates[:8]):
        positions.append(f" {i + 1} ")
        positions.append(_bar(rate or 0.0), style="green")
        positions.append(f" {pct(rate)}\n")
    return positions


def _speed(t: LiveTelemetry, profile: ProfileInfo) -> Text:
    """tok/s, TTFT and the speed-up against plain decoding, with what it was measured against."""
    speculation = t.speculation
    now, reply = t.tps_now(), t.reply_rate()
    approx = ESTIMATE if t.estimated else ""
    speed: list[tuple[str, str | Text]] = [
        ("tok/s", f"now {approx}{num(now, '.0f')} · reply {approx}{num(reply, '.0f')}"),
        ("TTFT", num(t.ttft, ".0f", 1000, " ms")),
    ]
    speedup = t.speedup()
    plain_tps = t.plain_tps
    if speedup is None:
        speed.append(("vs plain", DASH if plain_tps is None else f"{DASH} (plain {plain_tps:.0f} tok/s)"))
    else:
        value = Text(f"{speedup:.2f}×", style="bold green" if speedup >= 1 else "bold #ffaf00")
        value.append(" — nothing drafted" if t.nothing_drafted else f" of {plain_tps:.0f} tok/s", style="dim")
        speed.append(("vs plain", value))
        if speedup < 1 and speculation is not None and speculation.active:
            speed.append(("", Text("⚠ slower than plain", style="#ffaf00")))
            if profile.advice:
                speed.append(("", Text(profile.advice, style="#ffaf00")))
    if t.busy_machine:
        speed.append(("", Text(f"⚠ {t.busy_machine}", style="#ffaf00")))
    speed_text = _grid(speed)
    if t.plain_source:  # under the grid, so a long source wraps at the sidebar's edge, not into a column
        speed_text.append(f"\nplain: {t.plain_source}", style="dim")
    return speed_text


def _counts(t: LiveTelemetry) -> Text:
    r = t.reply
    columns = {"drafted": r.drafted, "accepted": r.accepted, "rejected": r.rejected}
    # One line of numbers under one of names: while streaming, one line changes per frame instead of three.
    counts = Text(" ".join(columns), style="dim")
    counts.append("\n" + " ".join(f"{value:>{len(name)}}" for name, value in columns.items()))
    counts.append(f"\nwithheld: n_min {r.ignored} · p_min {r.withheld}", style="dim")
    sources = t.drafted_from
    if len(sources) > 1 or DraftSource.STORED_CHAT in sources:  # one source is the method's own: nothing to tell apart
        counts.append("\ndrafted from: " + " · ".join(f"{SOURCE_NAMES[s]} {n}" for s, n in sources.items()))
    return counts


SOURCE_NAMES = {DraftSource.CONVERSATION: "this chat", DraftSource.REMEMBERED: "this session",
                DraftSource.STORED_CHAT: "stored chats", DraftSource.MODEL: "draft model"}


def _memory(memory: MemorySnapshot | None) -> Text:
    mem = Text("memory\n", style="dim")
    if memory is None:
        mem.append(DASH)
    elif isinstance(memory.gpu, GpuMemory):
        g = memory.gpu
        mem.append(f"{g.name}\nVRAM {mb(g.used)} / {mb(g.total)}\n{memory.whose} {mb(g.process)}\n")
    else:
        mem.append(f"no GPU: {memory.gpu.reason}\n")
        mem.append(f"RAM (RSS) {mb(memory.rss)}" + ("" if memory.whose == "this process" else
                                                       f" ({memory.whose})") + "\n")
    if memory is not None:
        for role, size in memory.model_bytes.items():
            mem.append(f"{role} weights {mb(size)}\n")
        if memory.cpu_only:
            mem.append("⚠ GPU layers asked for run on the CPU: this llama.cpp is a CPU-only build"
                       " (`specchat doctor` names the fix)\n", style="#ffaf00")
    return mem


def _context(t: LiveTelemetry) -> Text:
    approx = ESTIMATE if t.estimated else ""
    ctx = Text("context\n", style="dim")
    if t.n_ctx:
        ctx.append(f"{approx}{t.context_used} / {t.n_ctx} ")
        ctx.append(_bar(t.context_used / t.n_ctx), style="#5fafff")
        if t.trimmed:
            ctx.append(f"\n{t.trimmed} old messages dropped", style="dim")
    else:
        ctx.append(DASH)
    return ctx


class Sidebar(TextLines, ScrollView):
    """Sections of text drawn line by line: a refresh re-renders only the lines whose text changed.

    While a reply streams the sidebar changes every frame; as widgets, each changed section would be rendered whole
    (and laid out again when it grows), and on a CPU every millisecond of that is taken from decoding.
    """

    def __init__(self) -> None:
        super().__init__(id="sidebar")
        self._sections: list[Text] = []
        self._wrapped: list[tuple[Text, list[Text]]] = []  # each section as last laid out, and its lines
        self._wrapped_width = 0

    @property
    def plain(self) -> str:
        return "\n".join(line.plain for line in self._lines)

    def show(self, t: LiveTelemetry, profile: ProfileInfo, memory: MemorySnapshot | None) -> None:
        self._sections = [_head(t, profile), _acceptance(t), _positions(t), _speed(t, profile), _counts(t),
                          _memory(memory), _context(t)]
        self._lay_out()

    def on_resize(self) -> None:
        self._lay_out(force=True)

    def _lay_out(self, *, force: bool = False) -> None:
        width = self.scrollable_content_region.width or CONTENT_WIDTH
        if force or width != self._wrapped_width:
            self._wrapped, self._wrapped_width = [], width
        wrapped = []
        for i, section in enumerate(self._sections):
            if i < len(self._wrapped) and self._wrapped[i][0] == section:
                wrapped.append(self._wrapped[i])  # most sections are unchanged from one frame to the next
                continue
            section_lines = []
            for line in section.split("\n"):
                # Rich's wrap is the costly step of a refresh: only lines that do not fit go through it.
                section_lines.extend(self._wrap(line, width) if line.cell_len > width else [line])
            wrapped.append((section, section_lines))
        self._wrapped = wrapped
        lines: list[Text] = []
        for _, section_lines in wrapped:
            lines.extend(section_lines)
            lines.append(Text())
        if lines:  # (none when a resize comes before the first figures)
            lines.pop()  # the blank line after the last section
        if force or len(lines) != len(self._lines):
            self._lines = lines
            self._forget()
            self.virtual_size = Size(width, len(lines))
            self.refresh()
        else:
            self._replace_lines(lines)

    def _wrap(self, line: Text, width: int) -> list[Text]:
        """``line`` wrapped at ``width``, its continuation lines hanging under its first word: a warning that starts
        under the value column goes on there, not at the sidebar's edge."""
        indent = len(line.plain) - len(line.plain.lstrip(" "))
        if not indent or width - indent < MIN_HANGING_WIDTH:
            return list(line.wrap(self.app.console, width))
        return [Text(" " * indent) + part for part in line[indent:].wrap(self.app.console, width - indent)]

    def render_line(self, y: int) -> Strip:
        return self._line_strip(self.scroll_offset.y + y, self.scrollable_content_region.width)
