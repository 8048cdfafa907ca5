"""What the target's verify batches cost, and up to which size they are exact, measured once per model, threads and
backend, and kept in the user cache.

A sweep decodes dummy batches of growing size at the end of the cache and removes them again (about a second on the
bundled model). It also decodes the same tokens one at a time: a batch whose logits differ from those in any bit can
flip a greedy choice, and llama.cpp's CPU backend can compute larger batches with other kernels (on SmolLM2-135M
Q4_1, 2 threads, f16 KV cache: identical up to 63 rows, logits up to 1.3 apart at 64, where its attention switches to
tiles; with the q8_0 cache the engine uses by default, identical up to 65, the largest size tried). The engine
verifies no more than the largest exact batch. A batch is never priced above its tokens decoded one at a time, which
the sweep times beside it: one measured slower was disturbed (a first start beside a compile saw an 8-row batch stall
3.5 s, and the curve, kept non-decreasing, priced every larger one so too), and is measured again. The cache is a JSON
file; an entry that is unreadable, impossible (a batch dearer than ``ONE_BY_ONE`` times its rows in plain steps) or
older than ``MAX_AGE_S`` is measured again, never trusted.

A timing is kept only from a quiet window (issue #47): one during which other processes kept the cores busy
(``engine/cpu.py``'s /proc/stat against this process's own CPU time) serves this process only and is measured again by
the next. A kept curve is checked when it is read, by a cheap probe (1 and 8 rows): a quiet probe that disagrees with it
beyond the noise means it was taken in a busy minute the sampling missed (or the machine changed), and it is measured
again. A probe in a busy window cannot judge a curve, and leaves it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import TypeVar

import numpy as np

from ..cpu import cpu_sample, others_cores
from ..llama import Context
from ..phases import announce
from .policies import VerifyCost

T = TypeVar("T")

SIZES = (1, 2, 4, 8, 16, 32, 48, 63, 64)
REPEATS_SMALL = 3  # batches up to this size are cheap: take the fastest of a few, the machine is noisy
SMALL = 4
RETRIES = 3  # a batch slower than its tokens one at a time is measured up to this many times more
ONE_BY_ONE = 2.0  # a kept batch dearer than this many plain steps a row was disturbed: measured again
MAX_AGE_S = 7 * 24 * 3600
# Cores other processes may keep busy while a timing runs for it to be kept: an idle desktop keeps 0.05-0.2 busy here,
# one busy loop 1.0 (and a verify batch then ran 2-30× slower: two threads meet at a barrier after every operation).
QUIET_OTHERS = 0.5
PROBE_ROWS = 8  # the probe times one row and this many
MIN_WINDOW_S = 0.2
# A probe agrees with a kept curve when 8 rows cost as many plain steps as the curve says within PROBE_NOISE (two sweeps
# differ by ±25 % here), and a plain step is within PROBE_DRIFT of the curve's: what "auto" decides by is that ratio,
# while the machine's speed as a whole drifts more (a warm CPU, a laptop on battery) and changes no decision.
PROBE_NOISE = 1.5
PROBE_DRIFT = 2.5

# Timings from a busy window, by cost file and key: they serve this process, never the next (``CostCache``).
_busy: dict[tuple[Path, str], tuple[object, float]] = {}
_probed: set[tuple[Path, str]] = set()  # kept curves this process has probed already


def watched(measure: Callable[[], T], ours: tuple[int, ...] = ()) -> tuple[T, float | None]:
    """``measure()`` and how many cores other processes kept busy meanwhile (None where that cannot be known); the
    pids in ``ours`` (a server that decodes for us) are not others. The kernel counts CPU time in ticks (10 ms): a
    window shorter than ``MIN_WINDOW_S`` is waited out to that length, so that a probe of a few tens of milliseconds
    is judged on more than a tick or two."""
    before = cpu_sample(ours)
    result = measure()
    if before is not None:
        time.sleep(max(0.0, before.when + MIN_WINDOW_S - time.monotonic()))
    after = cpu_sample(ours)
    return result, others_cores(before, after) if before is not None and after is not None else None


def quiet(others: float | None) -> bool:
    """A window is quiet when others kept less than ``QUIET_OTHERS`` cores busy (unknown counts as quiet: a system
    without /proc/stat keeps its timings as before)."""
    return others is None or others < QUIET_OTHERS


def busy_timings() -> dict[str, float]:
    """The keys this process measured in a busy window, with the cores others kept busy then."""
    return {key: others for (_, key), (_, others) in _busy.items()}


def drop_busy(key: str) -> None:
    """Forget a busy window's timing of ``key``: the next lookup measures it again."""
    for where in [where for where in _busy if where[1] == key]:
        del _busy[where]


def probe_verify_cost(ctx: Context, token: int, slope: float = 0.0) -> Callable[[VerifyCost], bool]:
    """Whether a kept curve still prices 8 rows in plain steps as this machine decodes them now, and a plain step near
    where it did (the fastest of three each, a few hundredths of a second on the bundled model). The curve is of an
    empty cache: at the cache's depth each row costs ``slope`` a token of context more. A full cache cannot judge."""
    def timed(b: int) -> float:
        keep, best = len(ctx.cached), math.inf
        for _ in range(REPEATS_SMALL):
            start = perf_counter()
            ctx.decode([token] * b, all_logits=True)
            ctx.logits()
            best = min(best, perf_counter() - start)
            ctx.truncate(keep)
        return best

    def agrees(kept: VerifyCost) -> bool:
        depth = len(ctx.cached)
        if depth + 1 > ctx.n_ctx:
            return True

        def priced(b: int) -> float:
            return kept(b) + slope * b * depth

        one = timed(1)
        if not 1 / PROBE_DRIFT <= one / priced(1) <= PROBE_DRIFT:
            return False
        b = min(PROBE_ROWS, kept.sizes[-1], ctx.n_batch, ctx.n_ctx - depth)
        if b < 2:
            return True
        return 1 / PROBE_NOISE <= (timed(b) / one) / (priced(b) / priced(1)) <= PROBE_NOISE
    return agrees


def sizes_up_to(largest: int) -> tuple[int, ...]:
    """The sweep's batch sizes up to ``largest``, which is always included."""
    return tuple(sorted({b for b in SIZES if b < largest} | {largest}))


def measure_verify_cost(ctx: Context, token: int, sizes: tuple[int, ...] = SIZES) -> VerifyCost:
    """Seconds of a verify batch of each size (logits on every row), measured at the end of the cache and undone,
    and the largest size up to which every measured batch reproduces one-at-a-time decoding exactly."""
    keep = len(ctx.cached)
    sizes = tuple(b for b in sizes if keep + b <= ctx.n_ctx and b <= ctx.n_batch) or (1,)
    reference, singles = [], []
    for _ in range(max(sizes)):  # one token at a time: what every batch must reproduce, and what it must not exceed
        start = perf_counter()
        ctx.decode([token])
        reference.append(ctx.logits()[-1].copy())
        singles.append(perf_counter() - start)
    ctx.truncate(keep)
    one_by_one = np.cumsum(singles)
    seconds, exact, still_exact = [], 1, True
    for b in sizes:
        best, repeat = math.inf, 0
        while repeat < (REPEATS_SMALL if b <= SMALL else 1) or (best > one_by_one[b - 1] and repeat < RETRIES + 1):
            start = perf_counter()
            ctx.decode([token] * b, all_logits=True)
            rows = ctx.logits()
            best = min(best, perf_counter() - start)
            if repeat == 0:
                still_exact = still_exact and np.array_equal(rows, np.stack(reference[:b]))
            ctx.truncate(keep)
            repeat += 1
        seconds.append(min(best, float(one_by_one[b - 1])))
        if still_exact:
            exact = b
    # A larger batch never costs less than a smaller one; timer noise can say otherwise at the smallest sizes.
    for i in range(1, len(seconds)):
        seconds[i] = max(seconds[i], seconds[i - 1])
    return VerifyCost(sizes, tuple(seconds), exact)


SLOPE_DEPTH = 512  # the context depth a plain step is timed at, against an empty cache
SLOPE_STEPS = 16


def measure_depth_slope(ctx: Context, token: int, depth: int = SLOPE_DEPTH) -> float | None:
    """Seconds a plain decode step gains per token of context: one-token decodes timed at the end of the cache and
    ``depth`` tokens further on (attention costs the same whatever the tokens say), the median of each. The cache is
    left as it was (a conversation measured mid-chat is not decoded again); None when it has no room for the run."""
    keep = len(ctx.cached)
    depth = min(depth, ctx.n_ctx // 2, ctx.n_ctx - keep - 2 * SLOPE_STEPS - 1)
    if depth < 1:
        return None

    def step_time() -> float:
        times = []
        for _ in range(SLOPE_STEPS):
            start = perf_counter()
            ctx.decode([token])
            ctx.logits()
            times.append(perf_counter() - start)
        ctx.truncate(len(ctx.cached) - SLOPE_STEPS)
        return float(np.median(times))

    shallow = step_time()
    ctx.decode([token] * depth)
    deep = step_time()
    ctx.truncate(keep)
    return max(deep - shallow, 0.0) / depth


class CostCache:
    def __init__(self, path: Path, max_age_s: float = MAX_AGE_S) -> None:
        self.path, self.max_age_s = path, max_age_s

    def get(self, key: str, measure: Callable[[], VerifyCost], probe: Callable[[VerifyCost], bool] | None = None,
            what: str = "verify batches") -> VerifyCost:
        """The kept curve for ``key`` where it is valid and a quiet ``probe`` does not contradict it, else measured
        (``what`` names it while it is): kept when measured in a quiet window, served to this process alone
        otherwise."""
        entries = self._read()
        cost = self._valid(entries.get(key))
        if cost is not None and (probe is None or self._agrees(key, cost, probe)):
            return cost
        busy = _busy.get((self.path, key))
        if busy is not None and isinstance(busy[0], VerifyCost):
            return busy[0]
        return self.measure_again(key, measure, what)

    def measure_again(self, key: str, measure: Callable[[], VerifyCost], what: str) -> VerifyCost:
        """``measure()``, kept when the window was quiet, this process's alone otherwise."""
        announce(f"timing {what} (once a week per model and machine, when the machine is quiet)")
        cost, others = watched(measure)
        if not quiet(others):
            _busy[self.path, key] = (cost, others)
            return cost
        self.vouch(key, cost)
        return cost

    def vouch(self, key: str, cost: VerifyCost) -> None:
        """Keep ``cost`` for ``key``: measured, or confirmed by a probe, in a quiet window."""
        _busy.pop((self.path, key), None)
        _probed.add((self.path, key))
        entries = self._read()  # another process may have written since
        entries[key] = {"sizes": list(cost.sizes), "seconds": list(cost.seconds), "exact": cost.exact,
                        "measured": time.time()}
        self._write(entries)

    def _agrees(self, key: str, cost: VerifyCost, probe: Callable[[VerifyCost], bool]) -> bool:
        """Once a process: a quiet probe's verdict on a kept curve (a busy probe cannot judge one, and leaves it)."""
        if (self.path, key) in _probed:
            return True
        agrees, others = watched(lambda: probe(cost))
        if quiet(others):
            _probed.add((self.path, key))
        return agrees or not quiet(others)

    def get_slope(self, key: str, measure: Callable[[], float | None]) -> float:
        """Seconds per token of context (``measure_depth_slope``), cached like the sweep, and like it kept only from a
        quiet window; 0 (not cached) when it could not be measured."""
        entries = self._read()
        entry = entries.get(key)
        try:
            fresh = 0 <= time.time() - float(entry["measured"]) <= self.max_age_s
            slope = float(entry["slope"])
            if fresh and math.isfinite(slope) and 0 <= slope < 0.01:
                return slope
        except (TypeError, ValueError, KeyError):
            pass
        busy = _busy.get((self.path, key))
        if busy is not None and isinstance(busy[0], float):
            return busy[0]
        announce("timing how a step slows as the context grows (once a week per model and machine)")
        slope, others = watched(measure)
        if slope is None:
            return 0.0
        if not quiet(others):
            _busy[self.path, key] = (slope, others)
            return slope
        entries = self._read()
        entries[key] = {"slope": slope, "measured": time.time()}
        self._write(entries)
        return slope

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _valid(self, entry: object) -> VerifyCost | None:
        if not isinstance(entry, dict):
            return None
        sizes, seconds, exact, measured = (entry.get(k) for k in ("sizes", "seconds", "exact", "measured"))
        try:
            fresh = 0 <= time.time() - float(measured) <= self.max_age_s
            sane = (len(sizes) == len(seconds) > 0 and all(isinstance(b, int) and b > 0 for b in sizes)
                    and list(sizes) == sorted(set(sizes))
                    and all(isinstance(s, float) and 0 < s < 60 and math.isfinite(s) for s in seconds)
                    and isinstance(exact, int) and 1 <= exact <= sizes[-1]
                    and all(s <= ONE_BY_ONE * b * seconds[0] for b, s in zip(sizes, seconds)))
        except (TypeError, ValueError):
            return None
        return VerifyCost(tuple(sizes), tuple(seconds), exact) if fresh and sane else None

    def _write(self, entries: dict) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries, indent=1))
            os.replace(tmp, self.path)
        except OSError:
            pass  # an unwritable cache only means measuring again next time
