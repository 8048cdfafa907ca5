"""Read a GGUF file's metadata (its key/value header) without touching the weights.

``gguf.GGUFReader`` also parses every tensor descriptor and wraps each array element in numpy views, which takes
seconds for a large vocabulary; listing a models folder needs only the header, read here in one sequential pass with
the value types of the ``gguf`` package.
"""

from __future__ import annotations

import mmap
import struct
import threading
from pathlib import Path
from typing import Any

from gguf import GGUFValueType

from ..errors import ModelError
from .file_version import FileVersion, file_version

GGUF_MAGIC = b"GGUF"

_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


SUPPORTED_VERSIONS = (2, 3)  # version 1 had 32-bit lengths; llama.cpp reads only these
MAX_NESTING = 4  # arrays of arrays: real files nest at most once


class _Cursor:
    """Reads values in order; every length is checked against the bytes left before anything is read or allocated,
    so a damaged header fails at once instead of allocating gigabytes or looping through the file."""

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def _need(self, n: int, what: str) -> None:
        if n > len(self.data) - self.pos:
            raise ValueError(f"{what} of {n:,} bytes at offset {self.pos:,} runs past the end of the file")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self._need(size, "a value")
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        self._need(n, "a string")
        raw = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", "replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            if depth >= MAX_NESTING:
                raise ValueError(f"arrays nested more than {MAX_NESTING} deep")
            item_type = self.unpack("<I")
            count = self.unpack("<Q")
            if item_type in _SCALARS:
                fmt = _SCALARS[GGUFValueType(item_type)]
                size = struct.calcsize(fmt)
                self._need(count * size, f"an array of {count:,} values")
                values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.data, self.pos))
                self.pos += size * count
                return values
            self._need(count * 8, f"an array of {count:,} strings or arrays")  # each at least a 64-bit length
            return [self.value(item_type, depth + 1) for _ in range(count)]
        return self.unpack(_SCALARS[GGUFValueType(vtype)])



def check_gguf_file(path: Path, role: str) -> None:
    """Fail with a clear line when ``path`` is not a readable GGUF file."""
    if not path.exists():
        raise ModelError(f"{role} model not found: {path} — check the path in the profile")
    if not path.is_file():
        raise ModelError(f"{role} model path is not a file: {path} — point the profile at a .gguf file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read {role} model {path}: {exc.strerror} — check its permissions") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{role} model {path} is not a GGUF file (bad header) — re-download it or pick another file")


# By file version, the READ_KEPT headers read last (their vocabularies with them). The F2 picker's threads and the
# engine's thread read at once: the lock covers the lookups and the evictions, not the parsing.
_read: dict[FileVersion, dict[str, Any]] = {}
_reading = threading.Lock()
READ_KEPT = 8


def read_metadata(path: Path) -> dict[str, Any]:
    """All metadata key/values of a GGUF file, plus ``gguf.file_size``: read once per version of the file (a start
    and the F2 picker ask for the same headers again and again). The dict is shared: read-only to callers."""
    version = file_version(path)
    if version is not None:
        with _reading:
            meta = _read.pop(version, None)
            if meta is not None:
                _read[version] = meta  # the newest again: the least recently read goes first
                return meta
    meta = _parse_metadata(path)
    if version is not None:
        with _reading:
            _read[version] = meta
            while len(_read) > READ_KEPT:
                del _read[next(iter(_read))]
    return meta


def _parse_metadata(path: Path) -> dict[str, Any]:
    try:
        # The view is released before the map closes, however the reading ends (else closing raises BufferError).
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            if mm[:4] != GGUF_MAGIC:
                raise ModelError(f"{path} is not a GGUF file (bad header) — re-download it or pick another file")
            cursor = _Cursor(view)
            cursor.pos = 4
            version = cursor.unpack("<I")
            if version not in SUPPORTED_VERSIONS:
                raise ModelError(f"{path}: GGUF version {version} is not one llama.cpp reads"
                                 f" ({', '.join(map(str, SUPPORTED_VERSIONS))}) — convert the model again")
            n_tensors = cursor.unpack("<Q")
            n_kv = cursor.unpack("<Q")
            cursor._need(n_kv * 12, f"{n_kv:,} key/value pairs")  # a key's length and a value's type at least
            meta: dict[str, Any] = {"gguf.version": version, "gguf.tensor_count": n_tensors, "gguf.file_size": len(mm)}
            for _ in range(n_kv):
                key = cursor.string()
                meta[key] = cursor.value(cursor.unpack("<I"))
            return meta
    except (struct.error, ValueError, IndexError) as exc:
        raise ModelError(f"{path}: the GGUF header is truncated or corrupt ({exc}) — re-download the file") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None


def check_vocabulary(path: Path) -> None:
    """Refuse a vocabulary llama.cpp would abort the whole process on (it asserts that no token text repeats)."""
    tokens = read_metadata(path).get("tokenizer.ggml.tokens") or []
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = next(t for t in tokens if t in seen or seen.add(t))
        raise ModelError(f"{path}: the vocabulary lists the token {twice!r} twice — the file is corrupt; re-download it")
