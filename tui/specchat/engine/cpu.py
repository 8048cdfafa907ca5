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
    busy_s: float  # CPU time all processes used on ``cores``
    ours_s: float  # CPU time this process used
    cores: frozenset[int] | None = None  # the cores counted: this process's (None: the machine's total)


def usable_cores() -> frozenset[int] | None:
    """The cores this process may run on (``taskset``, a container's cpuset); None where that is unknown."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_sample(ours: tuple[int, ...] = ()) -> CpuSample | None:
    """None where ``/proc/stat`` is not available (not Linux). ``ours``: pids whose CPU time counts as this process's
    (a llama-server specchat started decodes for it: its time is not another process's load). Only the cores this
    process may run on are counted: a process busy on the others takes no time from its threads. Where /proc/stat
    does not list each of them by number (LXCFS renumbers them, a sandbox lists the total only), the machine's
    total is counted."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            rows = {row[0]: row[1:9] for row in (line.split() for line in stat) if row and row[0].startswith("cpu")}
        counted = usable_cores()
        if counted and all(f"cpu{n}" in rows for n in counted):
            picked = [rows[f"cpu{n}"] for n in counted]
        else:
            picked, counted = [rows["cpu"]], None
        user, nice, system, idle, iowait, irq, softirq, steal = (sum(int(row[i]) for row in picked) for i in range(8))
    except (OSError, ValueError, KeyError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    own = os.times()
    children = sum(_process_ticks(pid) for pid in ours) / ticks
    return CpuSample(time.monotonic(), (user + nice + system + irq + softirq + steal) / ticks,
                     own.user + own.system + children, counted)


def _process_ticks(pid: int) -> int:
    """User and system ticks of one process (0 once it is gone: a server that exited uses no CPU)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    except (OSError, IndexError):
        return 0
    return int(after_name[11]) + int(after_name[12])  # fields 14 and 15 of proc(5): utime, stime


def cores() -> int:
    """How many cores this process may run on; all of the machine's where that is unknown."""
    return len(usable_cores() or ()) or os.cpu_count() or 1


def others_cores(before: CpuSample, after: CpuSample) -> float | None:
    """How many cores other processes kept busy between two samples; None where the two counted different cores
    (the process was moved meanwhile: the difference would hold a core's ticks since boot)."""
    if before.cores != after.cores:
        return None
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
        others, self._last = others_cores(self._last, current), current
        if others is None:  # measured again from this sample on
            return False
        self.others = others
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
