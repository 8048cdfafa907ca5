"""A status line on the terminal's last row while a reply streams into the scrollback above it.

The reply is ordinary output (it stays in the scrollback, a tmux log or a screen reader's buffer); the status line lives
outside the scrolling region (``DECSTBM``), is redrawn in place with the cursor saved and restored, and is cleared when
the reply ends. Only for a terminal: piped output gets no status line.
"""

from __future__ import annotations

from prompt_toolkit.output import Output


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
