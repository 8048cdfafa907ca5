"""The tokens of every stored reply, kept between starts (``drafters.stored_chats``): tokenizing ten thousand messages took
24 s of the 37 s an index over them took to build on this 2-core machine (benchmarks/history_index.py), and the
replies rarely change.

One file per target (token ids are a target's own) in the user cache, readable by its owner only, as the chats
database is: it holds the chats' text as token ids. A document is found by a digest of what it is made of — its
question as the chat template renders it, its reply and the ids it was given, if any. Each build that finishes writes
the file again with only the documents it used, so a deleted chat's tokens leave it at the next "suffix" start on that
target (another target's file keeps its own until that target's next such start). A damaged file is read as empty
and written anew.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

FILE_MODE = 0o600


def digest(rendered_question: str, reply: str, tokens: Sequence[int] | None) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in (rendered_question, reply):
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
            if len(offsets) != len(keys) + 1 or (len(keys) and (offsets[-1] > len(tokens) or offsets[0] != 0)):
                raise ValueError("offsets do not fit")
        except Exception:  # noqa: BLE001 — none yet, or damaged in any way: everything is tokenized again
            self._found = {}
            return
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
        # A name of its own: two processes (the app and an ``ask``) may write at once; the last rename wins whole.
        descriptor, partial = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".partial")
        try:
            os.fchmod(descriptor, FILE_MODE)
            with os.fdopen(descriptor, "wb") as out:
                np.savez(out, keys=keys, offsets=offsets, tokens=tokens)
            os.replace(partial, self.path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
