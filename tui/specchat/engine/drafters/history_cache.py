"""The tokens of every stored reply, kept between starts (``drafters.history``): tokenizing ten thousand messages took
24 s of the 37 s an index over them took to build on this 2-core machine (benchmarks/history_index.py), and the
replies rarely change.

One file per target (token ids are a target's own) in the user cache, readable by its owner only, as the chats
database is: it holds the chats' text as token ids. A document is found by a digest of what it is made of — its
question, its reply and the ids it was given, if any. Each build writes the file again with only the documents it
used, so a deleted chat's tokens leave the cache at the next start.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

FILE_MODE = 0o600


def digest(question: str, reply: str, tokens: Sequence[int] | None) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in (question, reply):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    if tokens is not None:
        h.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return int.from_bytes(h.digest(), "little") >> 1  # fits an int64


class TokenCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._found: dict[int, np.ndarray] = {}
        self._used: dict[int, np.ndarray] = {}
        self.hits = 0
        try:
            with np.load(path) as data:
                keys, offsets, tokens = data["keys"], data["offsets"], data["tokens"]
        except (OSError, ValueError, KeyError):
            return  # none yet, or damaged: everything is tokenized again and the file written anew
        for i, key in enumerate(keys.tolist()):
            self._found[key] = tokens[offsets[i]: offsets[i + 1]]

    def get(self, key: int) -> list[int] | None:
        tokens = self._found.get(key)
        if tokens is None:
            return None
        self.hits += 1
        self._used[key] = tokens
        return tokens.tolist()

    def put(self, key: int, tokens: list[int]) -> None:
        self._used[key] = np.asarray(tokens, dtype=np.int32)

    def save(self) -> None:
        """Keep what this build used (nothing else): written whole, then renamed over the old file."""
        if self._used.keys() == self._found.keys():
            return
        keys = np.fromiter(self._used, dtype=np.int64, count=len(self._used))
        lengths = [len(t) for t in self._used.values()]
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        tokens = np.concatenate(list(self._used.values())) if self._used else np.zeros(0, dtype=np.int32)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self.path.with_name(self.path.name + ".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(descriptor, "wb") as out:
            np.savez(out, keys=keys, offsets=offsets, tokens=tokens)
        os.replace(partial, self.path)
