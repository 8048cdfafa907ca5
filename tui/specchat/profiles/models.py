"""Finding GGUF files where users already keep them: LM Studio, llama.cpp's cache, the Hugging Face hub cache."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError

EMBEDDED = ("embedded:target", "embedded:draft")


def model_dirs() -> list[Path]:
    """Where model names are looked up, in order. ``SPECCHAT_MODEL_DIRS`` (os.pathsep-separated) comes first."""
    home = Path.home()
    dirs = [Path(p).expanduser() for p in os.environ.get("SPECCHAT_MODEL_DIRS", "").split(os.pathsep) if p]
    dirs += [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    dirs.append(Path(os.environ.get("LLAMA_CACHE", home / ".cache" / "llama.cpp")))
    hf_home = Path(os.environ.get("HF_HOME", home / ".cache" / "huggingface"))
    dirs.append(Path(os.environ.get("HF_HUB_CACHE", hf_home / "hub")))
    return dirs


def discover(dirs: list[Path] | None = None) -> list[Path]:
    """Every GGUF under the model folders (the Hugging Face cache keeps them as symlinks into blobs)."""
    found: dict[Path, None] = {}
    for directory in dirs if dirs is not None else model_dirs():
        if not directory.is_dir():
            continue
        for root, _dirs, files in os.walk(directory, followlinks=True):
            for name in files:
                if name.lower().endswith(".gguf") and not _is_secondary_part(name):
                    found.setdefault(Path(root) / name)
    return sorted(found)


def _is_secondary_part(name: str) -> bool:
    """Split GGUFs are loaded from their first part; the others are not models on their own."""
    match = re.search(r"-(\d{5})-of-\d{5}\.gguf$", name, re.IGNORECASE)
    return bool(match) and match.group(1) != "00001"


def looks_like_path(reference: str) -> bool:
    return "/" in reference or os.sep in reference or reference.startswith("~") or reference.startswith(".")


def search_hint(name: str) -> str:
    """What to type into LM Studio's model search to find a file name like ``Qwen3-8B-Q4_K_M.gguf``."""
    stem = re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    stem = re.sub(r"[-_.](I?Q\d\w*|F16|BF16|F32)$", "", stem, flags=re.IGNORECASE)
    return stem.replace("-", " ").replace("_", " ")


@dataclass(frozen=True)
class Located:
    reference: str
    path: Path | None  # None when not found
    searched: tuple[Path, ...] = ()

    def missing_message(self, role: str) -> str:
        if looks_like_path(self.reference):
            return f"{role} model not found: {Path(self.reference).expanduser()} — check the path in the profile"
        places = ", ".join(str(d) for d in self.searched) or "no model folders"
        return (
            f"{role} model {self.reference!r} not found (looked in {places}) — download it in LM Studio"
            f" (search \"{search_hint(self.reference)}\") or set the model to the file's path"
        )


def locate(reference: str, base: Path | None = None) -> Located:
    """A model reference as a file: an absolute, ``~`` or relative path (relative to ``base`` too), or a file name."""
    if reference in EMBEDDED:
        from . import embedded  # deriving the demo draft loads llama.cpp's quantizer: only when asked for

        return Located(reference, embedded.target_path() if reference == EMBEDDED[0] else embedded.draft_path())
    path = Path(reference).expanduser()
    if path.is_absolute() or looks_like_path(reference):
        candidates = [path] if path.is_absolute() else [path, *([base / path] if base else [])]
        return Located(reference, next((p for p in candidates if p.exists()), None))
    if base is not None and (base / reference).is_file():
        return Located(reference, base / reference)
    dirs = model_dirs()
    wanted = {reference.lower(), reference.lower() + ".gguf"}
    match = next((p for p in discover(dirs) if p.name.lower() in wanted), None)
    return Located(reference, match, tuple(dirs))


def resolve(reference: str, role: str, base: Path | None = None) -> Path:
    located = locate(reference, base)
    if located.path is None:
        raise ModelError(located.missing_message(role))
    return located.path
