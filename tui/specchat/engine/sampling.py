"""Target and draft distributions, and the rules that keep speculative output exactly the target's.

Greedy decoding uses argmax on the raw logits. Sampling applies the same transform chain to target (p) and draft (q)
logits — top-k, top-p, min-p, then temperature, in llama.cpp's default order — so the acceptance rule compares like
with like.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ConfigError(f"temperature must be ≥ 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be ≥ 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ConfigError(f"min_p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, slots=True)
class Dist:
    """A sparse probability distribution: candidate token ids and their probabilities (summing to 1)."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def top_prob(self) -> float:
        return float(self.probs.max())

    def sample(self, rng: np.random.Generator) -> int:
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def greedy_token(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax token, without materialising the softmax."""
    top = logits.max()
    return float(1.0 / np.exp(logits - top, dtype=np.float64).sum())


def distribution(logits: np.ndarray, params: SamplingParams) -> Dist:
    """The sampling distribution after top-k, top-p, min-p and temperature."""
    logits = np.asarray(logits, dtype=np.float64)
    if 0 < params.top_k < logits.size:
        ids = np.argpartition(-logits, params.top_k - 1)[: params.top_k]
    else:
        ids = np.arange(logits.size)
    cand = logits[ids]
    order = np.argsort(-cand, kind="stable")
    ids, cand = ids[order], cand[order]
    probs = np.exp(cand - cand[0])
    probs /= probs.sum()
    if params.top_p < 1:
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
        ids, cand, probs = ids[:keep], cand[:keep], probs[:keep]
    if params.min_p > 0:
        keep = probs >= params.min_p * probs[0]
        ids, cand = ids[keep], cand[keep]
    tempered = np.exp((cand - cand[0]) / params.temperature)
    return Dist(ids, tempered / tempered.sum())


def pick(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """The target's own token from one row of logits: argmax when greedy, else a draw from its distribution."""
    return greedy_token(logits) if params.greedy else distribution(logits, params).sample(rng)


def accept_or_resample(p: Dist, q: Dist | None, token: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Judge one drafted ``token`` against target distribution ``p``.

    With a draft distribution ``q`` this is the rule of Leviathan et al. (2023): accept with probability
    min(1, p/q), else sample from norm(max(0, p − q)). A draft without ``q`` (greedy or n-gram, i.e. one-hot) is
    judged by sampling y ~ p and accepting iff y is the drafted token, which is the same rule for a one-hot q.
    A drafted id the target does not have (vocabularies may differ by up to 128 ids) has p = 0 and is always rejected.
    Returns (accepted, token to emit); the emitted token is the draft itself when accepted.
    """
    if q is None:
        y = p.sample(rng)
        return y == token, y
    px, qx = p.prob(token), q.prob(token)
    if qx > 0 and rng.random() * qx < px:
        return True, token
    size = int(max(p.ids.max(), q.ids.max())) + 1  # either vocabulary may be the larger
    residual = np.maximum(p.dense(size) - q.dense(size), 0.0)
    total = residual.sum()
    if total <= 0:
        # p ≤ q everywhere means p == q: rejection was numerically impossible, so p itself is the residual.
        return False, p.sample(rng)
    ids = np.flatnonzero(residual)
    return False, Dist(ids, residual[ids] / total).sample(rng)
