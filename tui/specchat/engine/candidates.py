"""A model's best candidates at one position, with probabilities: what the token inspector shows.

Probabilities are the softmax of the raw logits (temperature 1, no top-k/top-p/min-p), as llama-server's ``n_probs``
reports them, so the in-process and the server backends show the same numbers for the same position. The acceptance
probability of a sampled draft token is the loop's own, min(1, p/q) through the sampling chain (``sampling``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .sampling import Dist, SamplingParams, distribution

Ranked = tuple[tuple[int, float], ...]  # (token id, probability), most likely first


def ranked(row: np.ndarray, n: int, also: Sequence[int] = ()) -> tuple[Ranked, list[float]]:
    """The ``n`` most likely ids of a logits row, and the probabilities of the ids in ``also`` (a drafted token).
    One pass over the vocabulary for the normaliser and one partial sort: about 0.1 ms for 49k ids."""
    row = np.asarray(row)
    top = row.max()
    norm = float(np.exp(row - top, dtype=np.float64).sum())
    n = min(n, row.size)
    ids = np.argpartition(row, row.size - n)[row.size - n:]
    ids = ids[np.argsort(-row[ids], kind="stable")]
    best = tuple((int(i), float(np.exp(float(row[i]) - top) / norm)) for i in ids)
    return best, [float(np.exp(float(row[t]) - top) / norm) if 0 <= t < row.size else 0.0 for t in also]


@dataclass(frozen=True, slots=True)
class RowJudgement:
    """What the target's row at one position of a step said."""

    top: Ranked
    p_drafted: float | None = None  # the target's probability of the draft token this row judged
    accept: float | None = None  # min(1, p/q) through the sampling chain, for a sampled draft token


def judge_rows(rows: np.ndarray, drafted: Sequence[int], q: Sequence[Dist] | None, n_rows: int, n: int,
               sampling: SamplingParams) -> list[RowJudgement]:
    """Rows 0..n_rows-1 of a verify batch: row i judged ``drafted[i]`` (when there is one) and chose the token shown
    there. Only asked for by the inspector: it costs one pass over the vocabulary per row."""
    out = []
    for i in range(n_rows):
        token = drafted[i] if i < len(drafted) else None
        top, (p,) = ranked(rows[i], n, [token if token is not None else -1])
        accept = None
        if token is not None and q is not None:
            qx = q[i].prob(token)
            accept = min(1.0, distribution(rows[i], sampling).prob(token) / qx) if qx > 0 else 0.0
        out.append(RowJudgement(top, p if token is not None else None, accept))
    return out
