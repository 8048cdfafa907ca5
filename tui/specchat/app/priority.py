"""How the UI keeps out of decoding's way on a shared CPU.

On a CPU, llama.cpp's compute threads and the UI thread share the same cores, and llama.cpp's threads synchronise
hundreds of times per token: each redraw that preempts one of them stalls them all. The backend's worker thread
(``chats.replies``) is therefore started before the UI thread lowers its own scheduling priority, so that llama.cpp's
threads (spawned from it) keep the normal priority while rendering only takes what decoding leaves.
"""

from __future__ import annotations

import gc
import os
import sys
import threading

UI_NICENESS = 10
GIL_SWITCH_S = 0.001


def lower_ui_priority() -> bool:
    """Lower the calling thread's priority (Linux: per thread); False where the platform does not allow it.

    The worker thread also needs the GIL between llama.cpp calls; a shorter switch interval hands it over sooner
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
    CPU; one that falls during a reply stalls decoding (in the worker thread) or a frame. Frozen objects are skipped by
    the automatic collections, so during a reply they only look at what was allocated since.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
