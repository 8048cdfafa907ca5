"""Threads from the cores other processes leave free, adapted while a reply runs.

llama.cpp's threads meet at a barrier after every operation: when the cores are oversubscribed (a compile, a browser,
another model beside it) one descheduled thread stalls the others, and decoding with two threads on two busy cores
ran 6.6 tok/s where one thread ran 68 (the issue's measurement; ours in benchmarks/busy_cpu.py). So the engine checks
about once a second how much CPU time other processes took (``/proc/stat`` minus this process's own) and uses as many
threads as cores are left, at least one and at most what the profile allows. Logits do not depend on the thread
count on the CPU backend (checked in the tests), so adapting never changes a reply.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

CHECK_EVERY_S = 1.0
HEADROOM = 0.5  # a thread needs this much of a free core before it is worth adding back


@dataclass(frozen=True)
class CpuSample:
    when: float
    busy_s: float  # CPU time all processes used, all cores together
    ours_s: float  # CPU time this process used


def cpu_sample(ours: tuple[int, ...] = ()) -> CpuSample | None:
    """None where ``/proc/stat`` is not available (not Linux). ``ours``: pids whose CPU time counts as this process's
    (a llama-server specchat started decodes for it: its time is not another process's load)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    ticks = os.sysconf("SC_CLK_TCK")
    own = os.times()
    children = sum(_process_ticks(pid) for pid in ours) / ticks
    return CpuSample(time.monotonic(), (user + nice + system + irq + softirq + steal) / ticks,
                     own.user + own.system + children)


def _process_ticks(pid: int) -> int:
    """User and system ticks of one process (0 once it is gone: a server that exited uses no CPU)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    except (OSError, IndexError):
        return 0
    return int(after_name[11]) + int(after_name[12])  # fields 14 and 15 of proc(5): utime, stime


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def others_cores(before: CpuSample, after: CpuSample) -> float:
    """How many cores other processes kept busy between two samples."""
    wall = after.when - before.when
    if wall <= 0:
        return 0.0
    return max(0.0, (after.busy_s - before.busy_s) - (after.ours_s - before.ours_s)) / wall


class ThreadGovernor:
    """Chooses the thread count; ``check()`` is cheap between checks (one clock read)."""

    def __init__(self, allowed: int, apply: Callable[[int], None], *, n_cores: int | None = None,
                 sample: Callable[[], CpuSample | None] = cpu_sample) -> None:
        self.allowed, self.threads, self.apply = allowed, allowed, apply
        self.n_cores = n_cores or cores()
        self.others = 0.0
        self.busiest = 0.0  # the most cores others kept busy in a check since ``busiest`` was last set to 0
        self._sample = sample
        self._last = sample()
        self._due = time.monotonic() + CHECK_EVERY_S

    @property
    def oversubscribed(self) -> bool:
        return self.others + self.allowed > self.n_cores + HEADROOM

    def check(self) -> bool:
        """Re-measure when due; True when the thread count changed (and was applied)."""
        now = time.monotonic()
        if now < self._due or self._last is None:
            return False
        self._due = now + CHECK_EVERY_S
        current = self._sample()
        if current is None:
            return False
        self.others, self._last = others_cores(self._last, current), current
        self.busiest = max(self.busiest, self.others)
        free = self.n_cores - self.others
        wanted = self.threads
        if free < self.threads - HEADROOM:
            wanted = max(1, int(free + HEADROOM))
        elif free >= self.threads + 1 - HEADROOM:
            wanted = min(self.allowed, int(free + HEADROOM))
        wanted = max(1, min(self.allowed, wanted))
        if wanted == self.threads:
            return False
        self.threads = wanted
        self.apply(wanted)
        return True
