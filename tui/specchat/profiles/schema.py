"""TOML speculation profiles: the keys a profile may hold, what each accepts, and ``Profile``, a validated one.

Reading one is ``parse`` (every error names the file, the key and its line), finding one is ``catalogue``, turning one
into an engine configuration is ``resolve``. Unknown keys are errors, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tomlkit.toml_document import TOMLDocument

from .. import paths
from ..backends.run_config import APIS, BackendKind, SPEC_TYPES, backend_kinds, kind_named, known_spec_type
from ..engine.engine_config import DEFAULT_N_MAX, KV_CACHES
from ..engine.drafters import METHODS
from ..engine.repetition import LoopRule


@dataclass(frozen=True)
class Key:
    kind: type | tuple[type, ...]
    default: Any
    expected: str
    check: Callable[[Any], bool] = lambda _v: True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def fits(rule: Key, value: Any) -> bool:
    """Whether ``value`` is of the key's type and passes its check (a bool is no int here)."""
    if rule.kind is bool:
        return isinstance(value, bool)
    ok_type = _is_int(value) if rule.kind is int else isinstance(value, rule.kind) and not isinstance(value, bool)
    return ok_type and rule.check(value)


# Upper bounds: llama.cpp's C fields are 32-bit and ctypes truncates a larger int without a word (2**32 + 64 context
# tokens would become 64), and nothing sensible lies beyond these.
INT32, UINT32 = 2**31 - 1, 2**32 - 1
MAX_CTX = 2**24
MAX_LAYERS = 10_000
MAX_THREADS = 1024
MAX_DRAFT = 256
LAYERS = f"an integer from -1 (all) to {MAX_LAYERS:,}"
THREADS = f"an integer from 0 (one per core) to {MAX_THREADS}"

SCHEMA: dict[str, dict[str, Key]] = {
    "target": {
        "model": Key(str, None, "a GGUF path or model name"),
        "n_ctx": Key(int, 4096, f"an integer from 64 to {MAX_CTX:,}", lambda v: 64 <= v <= MAX_CTX),
        "n_gpu_layers": Key(int, 0, LAYERS, lambda v: -1 <= v <= MAX_LAYERS),
        "threads": Key(int, 0, THREADS, lambda v: 0 <= v <= MAX_THREADS),
        "adapt_threads": Key(bool, True, "true (fewer threads while the machine is busy) or false"),
        "kv_cache": Key(str, "q8_0", f"one of {', '.join(KV_CACHES)}", lambda v: v in KV_CACHES),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: 0 < v < 1e6),
    },
    "draft": {
        "method": Key(str, "none", f"one of {', '.join(METHODS)}", lambda v: v in METHODS),
        "model": Key(str, None, "a GGUF path or model name"),
        "n_gpu_layers": Key(int, 0, LAYERS, lambda v: -1 <= v <= MAX_LAYERS),
        "threads": Key(int, 0, THREADS, lambda v: 0 <= v <= MAX_THREADS),
        "n_max": Key((int, str), DEFAULT_N_MAX, f'an integer from 1 to {MAX_DRAFT} or "auto"',
                     lambda v: v == "auto" or (_is_int(v) and 1 <= v <= MAX_DRAFT)),
        "n_min": Key(int, 0, f"an integer from 0 to {MAX_DRAFT}", lambda v: 0 <= v <= MAX_DRAFT),
        "p_min": Key((int, float), 0.0, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        "ngram_min": Key(int, 2, f"an integer from 1 to {MAX_DRAFT}", lambda v: 1 <= v <= MAX_DRAFT),
        "ngram_max": Key(int, 4, f"an integer from 1 to {MAX_DRAFT}", lambda v: 1 <= v <= MAX_DRAFT),
        "expected_size_gb": Key((int, float), None, "a size in GB > 0", lambda v: 0 < v < 1e6),
    },
    "sampling": {
        "temperature": Key((int, float), 0.0, "a number from 0 (greedy) to 100", lambda v: 0 <= v <= 100),
        "top_k": Key(int, 40, f"an integer from 0 (off) to {INT32:,}", lambda v: 0 <= v <= INT32),
        "top_p": Key((int, float), 0.95, "a number in (0, 1]", lambda v: 0 < v <= 1),
        "min_p": Key((int, float), 0.05, "a number in [0, 1)", lambda v: 0 <= v < 1),
        "seed": Key(int, 0, f"an integer from 0 to {UINT32:,}", lambda v: 0 <= v <= UINT32),
    },
    "backend": {
        "kind": Key(str, "local", f"one of {', '.join(backend_kinds())}", lambda v: v in backend_kinds()),
        "spec_type": Key(str, None, f"one of llama.cpp's spec types: {', '.join(SPEC_TYPES)}, or a comma-separated"
                         " list of them without spaces (the first that drafts wins)", known_spec_type),
        "binary": Key(str, None, "the path of a llama-server binary"),
        "url": Key(str, None, 'an http:// or https:// URL, e.g. "http://gpu-box:8080"',
                   lambda v: v.startswith(("http://", "https://"))),
        "api_key_env": Key(str, None, "the NAME of an environment variable holding the API key (never the key)",
                           lambda v: v.isidentifier()),
        "api": Key(str, "auto", f"one of {', '.join(APIS)}", lambda v: v in APIS),
        "args": Key(list, [], "a list of extra llama-server arguments, as strings",
                    lambda v: all(isinstance(a, str) for a in v)),
        "ready_timeout": Key((int, float), 120, "seconds > 0 to wait for the server to load (at most a day)",
                             lambda v: 0 < v <= 86400),
    },
    "chat": {
        "system_prompt": Key(str, "", "a string"),
        "template": Key(str, None, "a Jinja file or one of llama.cpp's chat format names (e.g. \"chatml\")"),
        "stop_on_loop": Key(bool, True, "true (stop a reply that repeats the same span: engine/repetition.py) or false"),
        "loop_repeats": Key(int, LoopRule.repeats, "an integer from 2 to 1,000", lambda v: 2 <= v <= 1000),
        "loop_min_tokens": Key(int, LoopRule.min_tokens, "an integer from 2 to 100,000", lambda v: 2 <= v <= 100_000),
        "loop_window": Key(int, LoopRule.window, "an integer from 2 to 100,000", lambda v: 2 <= v <= 100_000),
    },
}


@dataclass
class Profile:
    name: str
    path: Path | None
    values: dict[str, dict[str, Any]]
    document: TOMLDocument | None = None
    description: str = ""

    @property
    def bundled(self) -> bool:
        return self.path is not None and self.path.parent == paths.bundled_profiles_dir()

    @property
    def system_prompt(self) -> str | None:
        return self.values["chat"]["system_prompt"] or None

    @property
    def method(self) -> str:
        return self.values["draft"]["method"]

    @property
    def uses_draft_model(self) -> bool:
        """Its method loads [draft] model."""
        return METHODS[self.method].draft_model

    @property
    def backend_kind(self) -> BackendKind:
        return kind_named(self.values["backend"]["kind"])

    def model(self, role: str) -> str | None:
        """The GGUF the profile names for ``role`` ("target" or "draft"), as written."""
        return self.values[role]["model"]

    def n_gpu_layers(self, role: str) -> int:
        return self.values[role]["n_gpu_layers"]

    def expected_size_gb(self, role: str) -> float | None:
        """The size the profile expects of ``role``'s GGUF when it is absent (for fit checks)."""
        return self.values[role].get("expected_size_gb")

    @property
    def n_max(self) -> int | str:
        return self.values["draft"]["n_max"]

    @property
    def n_ctx(self) -> int:
        return self.values["target"]["n_ctx"]

    @property
    def kv_cache(self) -> str:
        return self.values["target"]["kv_cache"]
