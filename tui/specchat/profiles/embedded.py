"""The model pair that ships with specchat: SmolLM2-135M-Instruct and a self-draft derived from it.

The draft is the same model re-quantized to Q2_K by llama.cpp's own quantizer. It disagrees with the target often
enough to show every token kind, and it is no faster than the target — it demonstrates the mechanism, not a speed-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path

import llama_cpp as lc

from .. import paths
from ..engine.bundled_model import bundled_model
from ..engine.engine_config import default_threads
from ..engine.file_version import FileVersion, file_version
from ..engine.llama import last_llama_error, log_lines_to
from ..engine.phases import announce
from ..errors import ModelError

DRAFT_FILE = "SmolLM2-135M-Instruct.Q2_K.gguf"
DRAFT_FTYPE = lc.LLAMA_FTYPE_MOSTLY_Q2_K
# What a first start says while it derives the draft: about a second on this project's 2-core machine, longer on a
# slow disk or a busy one, so the quantizer's progress follows rather than a guess of the time.
DERIVING = "deriving the draft model from the target (once, on a first start)"
TENSOR_LINE = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")  # llama.cpp's quantizer logs "[  12/ 273] name …" per tensor

_deriving = threading.Lock()  # the picker's thread and a load may both ask for the draft on a first start


def target_path() -> Path:
    return bundled_model()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_id(source: Path) -> dict[str, object]:
    st = source.stat()
    return {"source": str(source), "source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns, "ftype": DRAFT_FTYPE}


# Drafts this process hashed and found whole, by file version and the hash their manifest records: every profile
# load and every plan of the F2 picker names the draft, and hashing its 88 MB took 0.2-0.4 s each time. A file
# changed since, or a manifest that records another hash, is hashed again.
_whole: set[tuple[FileVersion, str]] = set()


def _is_valid(draft: Path, manifest: Path, source: Path) -> bool:
    try:
        recorded = json.loads(manifest.read_text())
        if not all(recorded.get(k) == v for k, v in _source_id(source).items()):
            return False
        if draft.stat().st_size != recorded["size"]:
            return False
        version = file_version(draft)
        if version is not None and (version, recorded["sha256"]) in _whole:
            return True
        if _sha256(draft) != recorded["sha256"]:
            return False
        if version is not None:
            _whole.add((version, recorded["sha256"]))
        return True
    except (OSError, ValueError, KeyError):
        return False


def draft_path(directory: Path | None = None) -> Path:
    """The Q2_K self-draft, derived on first use and verified against its manifest before every use (hashed once per
    process and version of the file)."""
    source = target_path()
    directory = directory or paths.cache_dir()
    draft = directory / DRAFT_FILE
    manifest = directory / (DRAFT_FILE + ".json")
    if _is_valid(draft, manifest, source):
        return draft
    with _deriving:
        if not _is_valid(draft, manifest, source):  # another thread may have derived it meanwhile
            _derive(source, directory, draft, manifest)
    return draft


def _derive(source: Path, directory: Path, draft: Path, manifest: Path) -> None:
    announce(DERIVING)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the cache dir {directory}: {exc.strerror} — set XDG_CACHE_HOME to a writable place") from None
    tmp = directory / f".{DRAFT_FILE}.{os.getpid()}.tmp"
    params = lc.llama_model_quantize_default_params()
    params.ftype = DRAFT_FTYPE
    params.allow_requantize = True
    params.nthread = default_threads()
    shown = -1

    def progress(line: str) -> None:
        nonlocal shown
        found = TENSOR_LINE.match(line)
        if found and int(found[2]) > 0:
            percent = 100 * int(found[1]) // int(found[2])
            if percent // 10 > shown // 10:  # a line per tenth: the app's status, a line on stderr
                shown = percent
                announce(f"{DERIVING} — {percent} %")

    try:
        with log_lines_to(progress):
            rc = lc.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
        if rc != 0 or not tmp.is_file():
            raise ModelError(f"could not derive the demo draft into {directory}: {last_llama_error() or f'quantizer code {rc}'}")
        record = _source_id(source) | {"size": tmp.stat().st_size, "sha256": _sha256(tmp)}
        manifest_tmp = manifest.with_name(manifest.name + f".{os.getpid()}.tmp")
        manifest_tmp.write_text(json.dumps(record, indent=1))
        # The model goes in first: a crash between the two renames leaves a manifest that no longer matches.
        os.replace(tmp, draft)
        os.replace(manifest_tmp, manifest)
    except OSError as exc:
        raise ModelError(f"could not write the demo draft into {directory}: {exc.strerror} — free some disk space") from None
    finally:
        tmp.unlink(missing_ok=True)
