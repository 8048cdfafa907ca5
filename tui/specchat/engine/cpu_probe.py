"""Whether llama.cpp's extra CPU buffer types run on this machine, tried once in a child process.

llama.cpp repacks weights into extra buffer types for faster CPU kernels — AMX tiles among them, on Intel CPUs that
report AMX. Some virtual machines report AMX in /proc/cpuinfo while the hypervisor does not run its instructions: the
first matrix product then dies with SIGILL (seen on this project's machines: an Intel Xeon VM reporting ``amx_int8``,
every decode of the bundled Q4_1 model killed in ``ggml_backend_amx_mul_mat``). Where the CPU reports AMX, a child
process decodes two tokens with the extra buffer types once; if it dies, every model is loaded without them
(llama.cpp's ``use_extra_bufts = false``, llama-server's ``--no-repack``) — in-process and in a managed server alike,
so that both compute with the same kernels and their output stays identical. The verdict is kept in the user cache
per CPU and llama.cpp version; elsewhere nothing is tried and the extra buffer types are used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp as lc

from .. import paths
from .bundled_model import bundled_model

RISKY_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
PROBE_TIMEOUT_S = 120.0


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


@functools.cache
def extra_buffers_work() -> bool:
    """True where llama.cpp's extra CPU buffer types may be used (the default everywhere they do not crash)."""
    flags = _cpu_flags()
    if not flags & set(RISKY_FLAGS):
        return True
    key = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16] + f"|llama.cpp {lc.__version__}"
    cache = paths.cache_dir() / "cpu-probe.json"
    try:
        known = json.loads(cache.read_text())
        if isinstance(known.get(key), bool):
            return known[key]
    except (OSError, ValueError, AttributeError):
        known = {}
    works = _probe(bundled_model())  # small: loaded in a moment, whatever model is about to load
    known = known if isinstance(known, dict) else {}
    known[key] = works
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, cache)
    except OSError:
        pass  # probed again next time
    return works


def _probe(model: Path) -> bool:
    """Decode ``model`` with the extra buffer types in a child process: a crash there costs nothing here."""
    code = "import sys; from specchat.engine.cpu_probe import decode_two_tokens; decode_two_tokens(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def decode_two_tokens(model_path: str) -> None:
    """The child's work: load with llama.cpp's defaults (extra buffer types on) and decode a two-token batch."""
    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(model_path.encode(), lc.llama_model_default_params())
    params = lc.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 64, 8, 1, 1
    ctx = lc.llama_init_from_model(model, params)
    batch = lc.llama_batch_init(8, 0, 1)
    for i in range(2):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = 1, i, 1, True
        batch.seq_id[i][0] = 0
    batch.n_tokens = 2
    sys.exit(0 if lc.llama_decode(ctx, batch) == 0 else 1)
