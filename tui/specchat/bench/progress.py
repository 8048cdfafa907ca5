"""Progress of a benchmark that takes minutes: which task and runner, how many runs are left and about how long.

On a terminal one line is redrawn as a bar; elsewhere (a pipe, a CI log) each run is a plain line. The time left is
the mean time of the runs so far times the runs still to go: a rough figure, said as one ("about").
"""

from __future__ import annotations

import time
from typing import TextIO

BAR = 24


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Progress:
    def __init__(self, stream: TextIO, *, bar: bool) -> None:
        self.stream, self.bar = stream, bar
        self.total = self.done_runs = self.timed_runs = 0
        self.started = time.monotonic()
        self._drawn = False

    @classmethod
    def for_stream(cls, stream: TextIO) -> Progress:
        return cls(stream, bar=stream.isatty())

    def start(self, total: int) -> None:
        self.total, self.done_runs, self.timed_runs, self.started = total, 0, 0, time.monotonic()

    def left(self) -> str:
        """Runs done of all, and an estimate of the time left once one run has been timed."""
        text = f"{self.done_runs}/{self.total} runs"
        if self.timed_runs:  # runs skipped took no time: the mean is over those that ran
            per_run = (time.monotonic() - self.started) / self.timed_runs
            text += f", about {_duration(per_run * (self.total - self.done_runs))} left"
        return text

    def line(self, message: str) -> None:
        """A line that stays: a task starting, a failure."""
        self._clear()
        print(message, file=self.stream, flush=True)

    def step(self, message: str) -> None:
        """A run starting (the one before it has ended)."""
        if self.bar:
            filled = BAR * self.done_runs // max(self.total, 1)
            self._clear()
            self.stream.write(f"[{'#' * filled}{'.' * (BAR - filled)}] {self.left()} — {message}")
            self.stream.flush()
            self._drawn = True
        else:
            print(f"  {message} ({self.left()})", file=self.stream, flush=True)
        self.done_runs += 1
        self.timed_runs += 1

    def skip(self) -> None:
        """A run that will not happen (its runner failed this task)."""
        self.done_runs += 1

    def done(self) -> None:
        self._clear()
        print(f"{self.total} runs in {_duration(time.monotonic() - self.started)}", file=self.stream, flush=True)

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self._drawn = False
