"""The thread that runs every backend job, and how the UI keeps out of decoding's way on a shared CPU.

On a CPU, llama.cpp's compute threads and the UI thread share the same cores, and llama.cpp's threads synchronise
hundreds of times per token: each redraw that preempts one of them stalls them all. The engine therefore gets one
long-lived thread, started before the UI thread lowers its own scheduling priority, so that llama.cpp's threads
(spawned from it) keep the normal priority while rendering only takes what decoding leaves. Every call into the engine
runs here, one job at a time; a job that raises is reported as one line and the thread goes on with the next.
"""

from __future__ import annotations

import gc
import os
import queue
import sys
import threading
from collections.abc import Callable
from enum import Enum

from ..errors import one_line

NAME = "specchat-engine"
UI_NICENESS = 10
GIL_SWITCH_S = 0.001


class Activity(Enum):
    """What the engine thread is doing for the UI (the app's ``busy``; None: nothing)."""

    LOADING = "loading"
    GENERATING = "generating"
    COMPARING = "comparing"


class EngineThread(threading.Thread):
    def __init__(self, on_error: Callable[[str], None]) -> None:
        super().__init__(name=NAME, daemon=True)
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._on_error = on_error

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every job submitted so far has run; False when ``timeout`` passed first."""
        if not self.is_alive():
            return True
        done = threading.Event()
        self.submit(done.set)
        return done.wait(timeout)

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


def settle_garbage() -> None:
    """Collect everything now, between replies, and leave what survives out of later collections.

    A full collection walks every object of the app — Textual's DOM, llama-cpp-python's — and takes 40–130 ms on this
    CPU; one that falls during a reply stalls decoding (in the engine thread) or a frame. Frozen objects are skipped by
    the automatic collections, so during a reply they only look at what was allocated since.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
