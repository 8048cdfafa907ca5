"""The thread that runs every engine job, and why the UI thread steps back while it works.

On a CPU, llama.cpp's compute threads and the UI thread share the same cores, and llama.cpp's threads synchronise
hundreds of times per token: each redraw that preempts one of them stalls them all. The engine therefore gets one
long-lived thread, started before the UI thread lowers its own scheduling priority, so that llama.cpp's threads
(spawned from it) keep the normal priority while rendering only takes what decoding leaves. Every call into the engine
runs here, one job at a time; a job that raises is reported as one line and the thread goes on with the next.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable

from ..errors import one_line

NAME = "specchat-engine"
UI_NICENESS = 10
GIL_SWITCH_S = 0.001


class EngineThread(threading.Thread):
    def __init__(self, on_error: Callable[[str], None]) -> None:
        super().__init__(name=NAME, daemon=True)
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._on_error = on_error

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception as exc:  # any failure, not only specchat's own: the app must never wait forever
                self._on_error(one_line(exc))


def lower_ui_priority() -> bool:
    """Lower the calling thread's priority (Linux: per thread); False where the platform does not allow it.

    The engine thread also needs the GIL between llama.cpp calls; a shorter switch interval hands it over sooner
    when a redraw holds it.
    """
    sys.setswitchinterval(GIL_SWITCH_S)
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), max(current, UI_NICENESS))
        return True
    except (AttributeError, OSError):
        return False
