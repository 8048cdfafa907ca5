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

import numpy as np

from .auto import VerifyCost

LEARN_STEPS = 6  # a size's correction follows about its last 6 timed verifies: a shift shows within a few steps
CLIP = 0.7  # one timed verify counts as at most e^0.7 ≈ 2× off the estimate
LINE_PRIOR = 0.5  # how firmly the line through the timed sizes keeps to no size-dependence (timed verifies' worth)
OWN_WEIGHT = 2.0  # timed verifies of a size before its own correction counts as much as the line's
REPRICE_ABOVE = 0.03  # a policy is re-priced when some size's estimate moved by more than this since the last time


class LearnedVerifyCost:
    def __init__(self, sweep: VerifyCost, depth_slope: float = 0.0) -> None:
        self.sweep, self.depth_slope = sweep, depth_slope
        self._sizes = np.array(sweep.sizes, dtype=float)
        self._swept = per_row_capped(self._sizes, np.array(sweep.seconds, dtype=float))
        self.correction = np.zeros(len(sweep.sizes))  # per swept size: log(timed / swept), a running mean
        self.weight = np.zeros(len(sweep.sizes))  # timed verifies behind each correction, at most LEARN_STEPS
        self.timed = 0  # verifies learned from

    def corrections(self) -> np.ndarray:
        """The log-correction at every swept size: its own where it was timed, the line's elsewhere."""
        w, c = self.weight, self.correction
        total = w.sum()
        if total == 0:
            return np.zeros_like(c)
        x = np.log(self._sizes)
        x_mean, c_mean = (w * x).sum() / total, (w * c).sum() / total
        slope = (w * (x - x_mean) * (c - c_mean)).sum() / ((w * (x - x_mean) ** 2).sum() + LINE_PRIOR)
        line = c_mean + slope * (x - x_mean)
        return line + w / (w + OWN_WEIGHT) * (c - line)

    def base(self) -> np.ndarray:
        """Seconds of a verify of each swept size with no context to attend to, as learned so far."""
        return self._swept * np.exp(self.corrections())

    def at(self, depth: int) -> VerifyCost:
        """The cost curve at a context depth of ``depth`` tokens, for the draft-length policies."""
        seconds = np.maximum.accumulate(self.base() + self.depth_slope * self._sizes * max(depth, 0))
        return VerifyCost(self.sweep.sizes, tuple(float(s) for s in seconds), self.sweep.exact)

    def observe(self, rows: int, depth: int, seconds: float) -> None:
        """Learn from a verify of ``rows`` rows at a context depth of ``depth`` that took ``seconds``."""
        if rows < 1 or not (math.isfinite(seconds) and seconds > 0):
            return
        base = max(seconds - self.depth_slope * rows * max(depth, 0), 0.1 * seconds)
        sizes = self.sweep.sizes
        # The timed batch lies between two swept sizes: each learns in proportion to how near it is.
        hi = min(int(np.searchsorted(self._sizes, rows)), len(sizes) - 1)
        lo = max(hi - 1, 0) if sizes[hi] != rows else hi
        if lo == hi or rows >= sizes[-1]:
            shares = {hi: 1.0}
        else:
            f = (rows - sizes[lo]) / (sizes[hi] - sizes[lo])
            shares = {lo: 1 - f, hi: f}
        swept = float(np.interp(rows, self._sizes, self._swept))
        believed = self.corrections()
        estimate = float(np.interp(rows, self._sizes, believed))
        error = min(max(math.log(base / swept) - estimate, -CLIP), CLIP)
        # Each of the two sizes moves in proportion to its share, so the estimate at ``rows`` itself moves by about
        # error / weight: about a running mean over the last LEARN_STEPS verifies, wherever between sizes they fall.
        norm = sum(share * share for share in shares.values())
        for i, share in shares.items():
            weight = min(self.weight[i] + share, LEARN_STEPS)
            self.correction[i] = believed[i] + share * error / (weight * norm)
            self.weight[i] = weight
        self.timed += 1

    def state(self) -> dict:
        """What was learned, for ``memory``."""
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
        self.correction, self.weight = correction, weight
        return True


def per_row_capped(sizes: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """A sweep whose larger batches cost no more per row than its smaller ones. A batch is never dearer per row than
    a smaller one in llama.cpp's kernels beyond noise: a point above that was a busy moment (a sweep taken while
    llama.cpp compiled beside it measured 8 rows at 5.7 plain steps, 16 at 22, 64 at 163). Only the seed is capped: a
    size whose timed verifies say otherwise (a kernel switch) is learned as it is."""
    return np.minimum(seconds, np.minimum.accumulate(seconds / sizes) * sizes)


def moved(before: VerifyCost, after: VerifyCost) -> bool:
    """Whether some size's cost moved by more than ``REPRICE_ABOVE`` relative to the plain step, or the plain step
    itself by more than 10 % (what a model draft's cost is weighed against)."""
    a = np.array(before.seconds) / before.seconds[0]
    b = np.array(after.seconds) / after.seconds[0]
    return bool(np.max(np.abs(b / a - 1)) > REPRICE_ABOVE) or abs(after.seconds[0] / before.seconds[0] - 1) > 0.1


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
