"""Which GGUFs on disk could draft for a target: smaller files, each judged by llama.cpp's compatibility rule."""

from __future__ import annotations

import functools
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
        found.append(DraftCandidate(path, size, _problems(target, path)))
    return sorted(found, key=lambda c: (not c.compatible, c.size, c.path.name))


def _problems(target: Path, draft: Path) -> tuple[str, ...]:
    """``check_pair``, judged once per version of both files: each F2 lists the candidates again (two vocab-only
    loads a pair)."""
    a, b = target.stat(), draft.stat()
    return _judged(target, draft, (a.st_mtime_ns, a.st_size, a.st_ino), (b.st_mtime_ns, b.st_size, b.st_ino))


@functools.lru_cache(maxsize=64)
def _judged(target: Path, draft: Path, _target_version: tuple, _draft_version: tuple) -> tuple[str, ...]:
    try:
        return tuple(check_pair(target, draft))
    except ModelError as exc:
        return (str(exc),)
