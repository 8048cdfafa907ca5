"""Verify costs that follow the machine as it is now: the sweep's curve, corrected by every verify the engine times.

The sweep (``costs``) is measured once and trusted for a week, but the machine moves: a busy neighbour, a throttled
CPU, a GPU shared with another process, or a sweep that ran during a busy minute. Every step's verify is timed anyway,
so each one is evidence. A verify of b rows at context depth d is modelled as

    t(b, d) = base(b) + slope · b · d        (each of the b rows attends to the d tokens before it)

with ``slope`` the measured depth slope of a plain step, and base(b) = sweep(b) · exp(c(b)). The log-correction c is
learned per swept size: a running mean, over about the last ``LEARN_STEPS`` verifies near that size, of log(timed /
swept), each one clipped to within ``CLIP`` of the current estimate (a step preempted by another process moves it a
little, never a lot); a verify between two swept sizes moves both, so that the estimate where it was timed moves
toward what was timed there. Sizes not timed yet follow a line in log b fitted through the timed ones, so a neighbour that
slows big batches more than small ones shows in the sizes not tried yet too, and an untried size the sweep got wrong
is corrected with its neighbours. The exactness cap stays the sweep's: it is measured, never learned.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from .policies import VerifyCost

LEARN_STEPS = 6  # a size's correction follows about its last 6 timed verifies: a shift shows within a few steps
CLIP = 0.7  # one timed verify counts as at most e^0.7 ≈ 2× off the estimate
LINE_PRIOR = 0.5  # how firmly the line through the timed sizes keeps to no size-dependence (timed verifies' worth)
OWN_WEIGHT = 2.0  # timed verifies of a size before its own correction counts as much as the line's
REPRICE_ABOVE = 0.03  # a policy is re-priced when some size's estimate moved by more than this since the last time


class LearnedVerifyCost:
    """The verify costs as learned. Every step times a verify, right after the target's decode has pushed everything
    else out of the CPU's caches, where numpy calls on these few numbers cost 5–10 µs each (learning took 60–150 µs a
    step as numpy): so the learning is plain Python on lists, and a verify timed is learned from when the costs are
    next read (every few steps, ``auto_length.REPRICE_EVERY``), in a row, with the same result as one at a time."""

    def __init__(self, sweep: VerifyCost, depth_slope: float = 0.0) -> None:
        self.sweep, self.depth_slope = sweep, depth_slope
        sizes = np.array(sweep.sizes, dtype=float)
        self._swept_list = per_row_capped(sizes, np.array(sweep.seconds, dtype=float)).tolist()
        self._log_sizes = [math.log(size) for size in sweep.sizes]
        self._correction = [0.0] * len(sweep.sizes)  # per swept size: log(timed / swept), a running mean
        self._weight = [0.0] * len(sweep.sizes)  # timed verifies behind each correction, at most LEARN_STEPS
        self._timed = 0
        self._pending: list[tuple[int, int, float]] = []  # verifies timed, not learned from yet

    @property
    def correction(self) -> np.ndarray:
        """Per swept size: log(timed / swept), a running mean."""
        self._learn_pending()
        return np.array(self._correction)

    @property
    def weight(self) -> np.ndarray:
        """Timed verifies behind each correction, at most LEARN_STEPS."""
        self._learn_pending()
        return np.array(self._weight)

    @property
    def timed(self) -> int:
        """Verifies learned from."""
        self._learn_pending()
        return self._timed

    def corrections(self) -> np.ndarray:
        """The log-correction at every swept size: its own where it was timed, the line's elsewhere."""
        self._learn_pending()
        return np.array(self._corrections())

    def _corrections(self) -> list[float]:
        w, c, x = self._weight, self._correction, self._log_sizes
        total = sum(w)
        if total == 0:
            return [0.0] * len(c)
        x_mean = sum(wi * xi for wi, xi in zip(w, x)) / total
        c_mean = sum(wi * ci for wi, ci in zip(w, c)) / total
        slope = (sum(wi * (xi - x_mean) * (ci - c_mean) for wi, xi, ci in zip(w, x, c))
                 / (sum(wi * (xi - x_mean) ** 2 for wi, xi in zip(w, x)) + LINE_PRIOR))
        line = [c_mean + slope * (xi - x_mean) for xi in x]
        return [li + wi / (wi + OWN_WEIGHT) * (ci - li) for li, wi, ci in zip(line, w, c)]

    def base(self) -> list[float]:
        """Seconds of a verify of each swept size with no context to attend to, as learned so far."""
        self._learn_pending()
        return [swept * math.exp(c) for swept, c in zip(self._swept_list, self._corrections())]

    def at(self, depth: int) -> VerifyCost:
        """The cost curve at a context depth of ``depth`` tokens, for the draft-length policies (never cheaper for
        more rows)."""
        slope = self.depth_slope * max(depth, 0)
        seconds = accumulate((b + slope * size for b, size in zip(self.base(), self.sweep.sizes)), max)
        return VerifyCost(self.sweep.sizes, tuple(seconds), self.sweep.exact)

    def observe(self, rows: int, depth: int, seconds: float) -> None:
        """Learn from a verify of ``rows`` rows at a context depth of ``depth`` that took ``seconds`` (when the costs
        are next read)."""
        if rows >= 1 and math.isfinite(seconds) and seconds > 0:
            self._pending.append((rows, depth, seconds))

    def _learn_pending(self) -> None:
        pending, self._pending = self._pending, []
        for rows, depth, seconds in pending:
            self._learn(rows, depth, seconds)

    def _learn(self, rows: int, depth: int, seconds: float) -> None:
        base = max(seconds - self.depth_slope * rows * max(depth, 0), 0.1 * seconds)
        sizes = self.sweep.sizes
        # The timed batch lies between two swept sizes: each learns in proportion to how near it is.
        hi = min(bisect_left(sizes, rows), len(sizes) - 1)
        lo = max(hi - 1, 0) if sizes[hi] != rows else hi
        if lo == hi or rows >= sizes[-1]:
            shares = {hi: 1.0}
        else:
            f = (rows - sizes[lo]) / (sizes[hi] - sizes[lo])
            shares = {lo: 1 - f, hi: f}
        believed = self._corrections()
        swept, estimate = interpolate(rows, sizes, self._swept_list), interpolate(rows, sizes, believed)
        error = min(max(math.log(base / swept) - estimate, -CLIP), CLIP)
        # Each of the two sizes moves in proportion to its share, so the estimate at ``rows`` itself moves by about
        # error / weight: about a running mean over the last LEARN_STEPS verifies, wherever between sizes they fall.
        norm = sum(share * share for share in shares.values())
        for i, share in shares.items():
            weight = min(self._weight[i] + share, LEARN_STEPS)
            self._correction[i] = believed[i] + share * error / (weight * norm)
            self._weight[i] = weight
        self._timed += 1

    def state(self) -> dict:
        """What was learned, for ``learned_store``."""
        return {"sizes": list(self.sweep.sizes), "sweep": list(self.sweep.seconds),
                "correction": [float(c) for c in self.correction],
                "weight": [float(w) for w in self.weight]}

    def restore(self, state: object) -> bool:
        """Take up what an earlier process learned, if it is for the same sizes and sane; returns whether it was."""
        try:
            sizes, swept = list(state["sizes"]), list(state["sweep"])  # type: ignore[index]
            correction = np.array(state["correction"], dtype=float)  # type: ignore[index]
            weight = np.array(state["weight"], dtype=float)  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return False
        # Corrections are of one sweep: once it is measured again they would correct the new one wrongly.
        if (sizes != list(self.sweep.sizes) or swept != list(self.sweep.seconds) or correction.shape != self.correction.shape
                or weight.shape != self.weight.shape or not np.all(np.isfinite(correction))
                or not np.all(np.abs(correction) <= 5) or not np.all((weight >= 0) & (weight <= LEARN_STEPS))):
            return False
        self._pending.clear()
        self._correction, self._weight = correction.tolist(), weight.tolist()
        return True


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """``numpy.interp`` for one point: linear between the sizes around ``x``, the end values beyond them."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x)
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + f * (ys[i] - ys[i - 1])


def per_row_capped(sizes: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """A sweep whose larger batches cost no more per row than its smaller ones. A batch is never dearer per row than
    a smaller one in llama.cpp's kernels beyond noise: a point above that was a busy moment (a sweep taken while
    llama.cpp compiled beside it measured 8 rows at 5.7 plain steps, 16 at 22, 64 at 163). Only the seed is capped: a
    size whose timed verifies say otherwise (a kernel switch) is learned as it is."""
    return np.minimum(seconds, np.minimum.accumulate(seconds / sizes) * sizes)


def moved(before: VerifyCost, after: VerifyCost) -> bool:
    """Whether some size's cost moved by more than ``REPRICE_ABOVE`` relative to the plain step, or the plain step
    itself by more than 10 % (what a model draft's cost is weighed against)."""
    plain_before, plain_after = before.seconds[0], after.seconds[0]
    return (any(abs((b / plain_after) / (a / plain_before) - 1) > REPRICE_ABOVE
                for a, b in zip(before.seconds, after.seconds))
            or abs(plain_after / plain_before - 1) > 0.1)


class LearnedDraftCost:
    """Seconds a draft model takes per draft token: its measured one-token decode, corrected like a verify size by the
    drafting steps timed (those that followed a drafting step in the same reply, so the draft had no text to catch up
    on)."""

    def __init__(self, measured: float) -> None:
        self.measured = measured
        self.correction, self.weight = 0.0, 0.0

    @property
    def seconds(self) -> float:
        return self.measured * math.exp(self.correction)

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens < 1 or not (math.isfinite(seconds) and seconds > 0) or self.measured <= 0:
            return
        timed = min(max(math.log(seconds / tokens / self.measured), self.correction - CLIP), self.correction + CLIP)
        self.weight = min(self.weight + 1, LEARN_STEPS)
        self.correction += (timed - self.correction) / self.weight

    def state(self) -> dict:
        return {"measured": self.measured, "correction": self.correction, "weight": self.weight}

    def restore(self, state: object) -> bool:
        try:
            measured = float(state["measured"])  # type: ignore[index]
            correction, weight = float(state["correction"]), float(state["weight"])  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return False
        if measured != self.measured or not (math.isfinite(correction) and abs(correction) <= 5
                                              and 0 <= weight <= LEARN_STEPS):
            return False
        self.correction, self.weight = correction, weight
        return True
