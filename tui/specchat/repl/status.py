"""A status line on the terminal's last row while a reply streams into the scrollback above it, and the memory it
shows.

The reply is ordinary output (it stays in the scrollback, a tmux log or a screen reader's buffer); the status line lives
outside the scrolling region (``DECSTBM``), is redrawn in place with the cursor saved and restored, and is cleared when
the reply ends. Only for a terminal: piped output gets no status line.
"""

from __future__ import annotations

import time

from prompt_toolkit.output import Output

from ..chats.switcher import BackendFacts
from ..figures import DASH
from ..telemetry.memory import GpuMemory, gpu_memory, rss_bytes

MEMORY_EVERY_S = 1.0


class StatusLine:
    def __init__(self, output: Output) -> None:
        self.output = output
        self.rows = output.get_size().rows

    def __enter__(self) -> StatusLine:
        # Make room for the line, then keep the scrolling region above it.
        self.output.write_raw(f"\n\x1b[1A\x1b7\x1b[1;{self.rows - 1}r\x1b8")
        self.output.flush()
        return self

    @property
    def columns(self) -> int:
        return self.output.get_size().columns

    def show(self, text: str) -> None:
        """``text`` fitted to the width by its maker (``render.figures``); cut only if it still does not fit."""
        self.output.write_raw(f"\x1b7\x1b[{self.rows};1H\x1b[2K\x1b[7m{text[:self.columns]}\x1b[0m\x1b8")
        self.output.flush()

    def __exit__(self, *_exc: object) -> None:
        self.output.write_raw(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")
        self.output.flush()


class MemoryLine:
    """VRAM through NVML where there is a GPU, else resident memory; of the process holding the model (a managed
    llama-server's, or this one). Sampled at most once a second: the toolbar redraws more often."""

    def __init__(self) -> None:
        self._text, self._at = DASH, -MEMORY_EVERY_S

    def text(self, facts: BackendFacts | None) -> str:
        now = time.monotonic()
        if now - self._at >= MEMORY_EVERY_S:
            pid = facts.pid if facts else None
            gpu = gpu_memory(pid=pid)
            if isinstance(gpu, GpuMemory):
                self._text = f"VRAM {gpu.used / 1e6:,.0f} / {gpu.total / 1e6:,.0f} MB"
            else:
                rss = rss_bytes(pid)
                self._text = DASH if rss is None else f"RSS {rss / 1e6:,.0f} MB"
            self._at = now
        return self._text
