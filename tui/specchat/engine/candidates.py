"""A model's best candidates at one position, with probabilities: what the token inspector shows.

Probabilities are the softmax of the raw logits (temperature 1, no top-k/top-p/min-p), as llama-server's ``n_probs``
reports them, so the in-process and the server backends show the same numbers for the same position. The acceptance
probability of a sampled draft token is the loop's own, min(1, p/q) through the sampling chain (``sampling``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .sampling import Dist, SamplingParams, distribution

Ranked = tuple[tuple[int, float], ...]  # (token id, probability), most likely first
TINY = 1e-30  # a normaliser this small has lost the row to underflow


def ranked(row: np.ndarray, n: int, also: Sequence[int] = ()) -> tuple[Ranked, list[float]]:
    """The ``n`` most likely ids of a logits row, and the probabilities of the ids in ``also`` (a drafted token).

    This work sits between two decodes, while llama.cpp's threads wait for it, so it makes as few passes over the
    vocabulary as it can: exp into a reused buffer (no shift by the max: float32 spans e^-87 … e^88, far wider than
    logits go, and a row outside it is done again shifted), one sum, and the best found by ``n`` argmax passes (each
    SIMD, and cheaper together than one partial sort of the whole row)."""
    weights = _scratch(row.size)
    with np.errstate(over="ignore", under="ignore"):  # a row outside float32's range is done again below
        np.exp(row, out=weights)
    norm = float(weights.sum())
    if not TINY < norm < math.inf:
        np.exp(np.subtract(row, float(np.max(row)), out=weights), out=weights)
        norm = float(weights.sum())
    picked: list[tuple[int, float]] = []
    for _ in range(min(n, row.size)):
        i = int(weights.argmax())
        picked.append((i, float(weights[i])))
        weights[i] = -1.0  # below every weight: the next argmax finds the next best
    for i, w in picked:
        weights[i] = w
    return tuple((i, w / norm) for i, w in picked), [float(weights[t]) / norm if 0 <= t < row.size else 0.0
                                                     for t in also]


def _scratch(size: int) -> np.ndarray:
    """A float32 buffer of ``size``, reused by this thread: a new one per row would be a fresh 200 KB mmap."""
    buffer = getattr(_buffers, "weights", None)
    if buffer is None or buffer.size != size:
        buffer = _buffers.weights = np.empty(size, dtype=np.float32)
    return buffer


_buffers = threading.local()


@dataclass(frozen=True, slots=True)
class RowJudgement:
    """What the target's row at one position of a step said."""

    top: Ranked
    p_drafted: float | None = None  # the target's softmax probability of the draft token this row judged
    draft_top: Ranked = ()  # a model draft's best candidates at the same position
    draft_p: float | None = None  # the draft's softmax probability of its token
    # A sampled model draft is judged through the sampling chain: the chain's p and q of the token, and min(1, p/q).
    p_sampled: float | None = None
    q_sampled: float | None = None
    accept: float | None = None


def judge_rows(rows: np.ndarray, drafted: Sequence[int], q: Sequence[Dist] | None, draft_rows: np.ndarray | None,
               n_rows: int, n: int, sampling: SamplingParams) -> list[RowJudgement]:
    """Rows 0..n_rows-1 of a verify batch: row i judged ``drafted[i]`` (when there is one) and chose the token shown
    there; ``draft_rows`` are a model draft's logits at the same positions. Only asked for by the inspector: it costs
    one ``ranked`` per row (and per draft row)."""
    out = []
    for i in range(n_rows):
        token = drafted[i] if i < len(drafted) else None
        if token is None:
            out.append(RowJudgement(ranked(rows[i], n)[0]))
            continue
        top, (p,) = ranked(rows[i], n, [token])
        draft_top, draft_p = ((), None)
        if draft_rows is not None:
            draft_top, (draft_p,) = ranked(draft_rows[i], n, [token])
        p_sampled = q_sampled = accept = None
        if q is not None:
            p_sampled, q_sampled = distribution(rows[i], sampling).prob(token), q[i].prob(token)
            accept = min(1.0, p_sampled / q_sampled) if q_sampled > 0 else 0.0
        out.append(RowJudgement(top, p, draft_top, draft_p, p_sampled, q_sampled, accept))
    return out
