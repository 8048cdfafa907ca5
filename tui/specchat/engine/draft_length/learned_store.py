"""What ``n_max = "auto"`` learned, kept from one process to the next, so the first reply of a new `specchat ask` or
app start drafts like the tenth of an old one.

One JSON file in the user cache, an entry per key (a target model with its drafter and sampling for what the policies
learned; a target with its threads and backend for the learned verify costs). It is versioned and bounded: a file of
another version is not read (and is replaced at the next write), an entry older than ``MAX_AGE_S`` or not what its
reader expects is ignored, never trusted, and a file that cannot be read or written only means starting from the
priors, as before. Two processes writing it at once never tear it (each writes whole and renames), but there is no
lock: what one wrote between the other's read and write is lost (it is learned again).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

VERSION = 1
MAX_ENTRIES = 64  # the least recently written go first
MAX_AGE_S = 30 * 24 * 3600
MAX_BYTES = 4 << 20  # a file larger than this is not read: nothing this module writes grows so


class LearnedStore:
    def __init__(self, path: Path, max_age_s: float = MAX_AGE_S) -> None:
        self.path, self.max_age_s = path, max_age_s

    def recall(self, key: str) -> object | None:
        """The state kept under ``key``, or None when there is none to trust."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        saved = entry.get("saved")
        if not isinstance(saved, (int, float)) or not 0 <= time.time() - saved <= self.max_age_s:
            return None
        return entry.get("state")

    def keep(self, states: dict[str, object]) -> None:
        """Write ``states`` under their keys (atomically: a reader sees the old file or the new one)."""
        entries = self._read()
        now = time.time()
        for key, state in states.items():
            entries.pop(key, None)  # re-inserted last: the dict's order is the order of writing
            entries[key] = {"saved": now, "state": state}
        while len(entries) > MAX_ENTRIES:
            del entries[next(iter(entries))]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"version": VERSION, "entries": entries}))
            os.replace(tmp, self.path)
        except OSError:  # an unwritable cache only means starting from the priors next time
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass

    def _read(self) -> dict:
        try:
            if self.path.stat().st_size > MAX_BYTES:
                return {}
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
            return {}
        return data["entries"]
