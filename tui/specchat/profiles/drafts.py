"""Which GGUFs on disk could draft for a target: smaller files, each judged by llama.cpp's compatibility rule."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engine.compat import check_pair
from ..errors import ModelError


@dataclass(frozen=True)
class DraftCandidate:
    path: Path
    size: int
    problems: tuple[str, ...]

    @property
    def compatible(self) -> bool:
        return not self.problems


def draft_candidates(target: Path, candidates: list[Path]) -> list[DraftCandidate]:
    """GGUFs smaller than ``target``, compatible ones first (smallest first), each incompatible one with its rule."""
    target_size = target.stat().st_size
    found = []
    for path in candidates:
        if path.resolve() == target.resolve():
            continue
        size = path.stat().st_size
        if size >= target_size:
            continue
        try:
            problems = tuple(check_pair(target, path))
        except ModelError as exc:
            problems = (str(exc),)
        found.append(DraftCandidate(path, size, problems))
    return sorted(found, key=lambda c: (not c.compatible, c.size, c.path.name))
