"""A file's version as this process can tell it from its stat: the key under which what was read from a model file is
kept, so that a start does not parse the same GGUF again (each load read its vocabulary four times: 1.2 s of a 2.7 s
start of the embedded pair) and the F2 picker does not plan from scratch at every open."""

from __future__ import annotations

import os
import time
from pathlib import Path

# A file written this recently is not kept: a write inside the same clock tick as the reading can leave its size and
# mtime as they were (git's "racy" rule), and a file just copied or derived is read again rather than trusted.
RACY_S = 2.0

FileVersion = tuple[int, int, int, int, int]


def file_version(path: Path) -> FileVersion | None:
    """(device, inode, size, mtime, ctime) — one key for every hard link to the same file; ctime, as git's index
    keeps it, for a file rewritten with its old mtime put back (``cp -p``, ``touch -r``) or whose permissions
    changed — or None where the file cannot be read or was written within ``RACY_S``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time() - st.st_mtime_ns / 1e9 <= RACY_S:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
