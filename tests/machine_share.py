"""The run's workers share the machine's cores (pytest-xdist, ``-n auto`` in pyproject.toml).

Each worker is pinned to cores of its own before it loads anything: llama.cpp's threads meet at a barrier after every
operation, and two threads on a core another test keeps busy decode about ten times slower (engine/cpu.py). Pinned,
a worker is a smaller machine of its own — ``default_threads()`` and the busy check see its cores only, as they see a
``taskset`` or a container's cpuset. A test marked ``alone`` (one that makes the machine busy, or needs more than one
core) runs while no other test does, on every core: a reader-writer lock over two lock files, taken around a test's
setup, call and teardown (the fixtures it sets up, of any scope, included), whose writer first closes the gate so
that the other workers' next tests queue behind it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", … in a worker; unset in a run without workers
PINS = WORKER is not None and hasattr(os, "sched_setaffinity")  # (Linux: elsewhere workers share every core)
EVERY_CORE = frozenset(os.sched_getaffinity(0)) if PINS else frozenset()


def own_cores() -> frozenset[int]:
    """This worker's share of the cores: every count-th one from its index."""
    index, count = int(WORKER.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(EVERY_CORE)
    return frozenset(cores[index % len(cores)::count])


def pin(cores: frozenset[int]) -> None:
    """Every thread of this process on ``cores`` (a thread's mask is its own, and threads started later take their
    starter's): the OpenMP team llama.cpp keeps per calling thread among them, made once and reused."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task), cores)


def pin_worker() -> None:
    if PINS:
        pin(own_cores())


class MachineShare:
    def __init__(self) -> None:
        if WORKER is None:  # one process: nothing to share
            return
        folder = Path(tempfile.gettempdir()) / f"specchat-tests-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
        folder.mkdir(exist_ok=True)
        self.gate = open(folder / "gate", "a")
        self.room = open(folder / "room", "a")

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if WORKER is None:
            yield
            return
        fcntl.flock(self.gate, fcntl.LOCK_EX)  # (held for a moment: past a waiting ``alone`` it is not)
        fcntl.flock(self.room, fcntl.LOCK_SH)
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.room, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        if WORKER is None:
            yield
            return
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.room, fcntl.LOCK_EX)
        if PINS:
            pin(EVERY_CORE)
        try:
            yield
        finally:
            if PINS:
                pin(own_cores())
            fcntl.flock(self.room, fcntl.LOCK_UN)
            fcntl.flock(self.gate, fcntl.LOCK_UN)
