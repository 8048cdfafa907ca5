"""What judges a step: the sampling, the random draws of the target and of the draft (apart, so drafting never shifts
what the target draws), the vocabulary, and the draft's thresholds. Apart from ``loop`` so that the drafters, which
``loop`` calls, can name it without importing the loop back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .sampling import SamplingParams


class Vocabulary(Protocol):
    n_vocab: int

    def is_eog(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Rules:
    sampling: SamplingParams
    rng: np.random.Generator  # the target's draws
    draft_rng: np.random.Generator  # the draft's, apart: drafting never shifts what the target draws
    vocab: Vocabulary  # the target's: which ids exist, which end a reply
    n_min: int = 0
    p_min: float = 0.0
    top: int = 0  # best candidates kept per judged position for the token inspector (0: none, and no cost)
