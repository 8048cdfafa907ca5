"""The memory plan against llama.cpp itself (issue #48): the KV cache and model buffers llama.cpp logs as it loads
both bundled models — SmolLM2-135M and Gemma 3 270M, whose sliding-window layers cache differently in-process and in
llama-server — at three context sizes and every cache type a profile may name, against what ``profiles.fit`` plans
from the GGUF header alone."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from specchat.engine.gguf_header import read_metadata
from specchat.profiles.fit import KV_BYTES_PER_ELEMENT, kv_cache_bytes

MIB = 1024 * 1024
CONTEXTS = (512, 1000, 4096)  # 1000: llama.cpp rounds the cells up to 1024
TOLERANCE = 0.05

LOADS = """
import sys, llama_cpp
types = {"f16": 1, "q8_0": 8, "bf16": 30}
for n_ctx in map(int, sys.argv[2].split(",")):
    for kv in sys.argv[3].split(","):
        print(f"=== {n_ctx} {kv}", file=sys.stderr, flush=True)
        llm = llama_cpp.Llama(sys.argv[1], n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=1, verbose=True,
                              type_k=types[kv], type_v=types[kv], flash_attn=True)
        llm.close()
"""


def logged(text: str) -> tuple[float, float]:
    """The model buffers and the KV cache one load logged, in MiB (a sliding-window model logs two caches)."""
    model = sum(float(m) for m in re.findall(r"model buffer size =\s+([\d.]+) MiB", text))
    kv = sum(float(m) for m in re.findall(r"KV buffer size =\s+([\d.]+) MiB", text))
    return model, kv


def in_process_loads(path) -> dict[tuple[int, str], tuple[float, float]]:
    result = subprocess.run([sys.executable, "-c", LOADS, str(path), ",".join(map(str, CONTEXTS)),
                             ",".join(KV_BYTES_PER_ELEMENT)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    loads = {}
    for block in result.stderr.split("=== ")[1:]:
        n_ctx, kv = block.split(None, 2)[:2]
        loads[int(n_ctx), kv] = logged(block)
    return loads


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_the_plan_is_within_five_percent_of_what_llama_cpp_allocates(model, target_path, gemma_path):
    path = target_path if model == "smollm2" else gemma_path
    meta = read_metadata(path)
    loads = in_process_loads(path)
    assert len(loads) == len(CONTEXTS) * len(KV_BYTES_PER_ELEMENT)
    for (n_ctx, kv), (model_mib, kv_mib) in loads.items():
        planned_kv = kv_cache_bytes(meta, n_ctx, kv) / MIB  # in-process: every cell of a sliding layer too
        assert kv_mib > 0 and abs(planned_kv / kv_mib - 1) <= TOLERANCE, (n_ctx, kv, planned_kv, kv_mib)
        planned_weights = meta["gguf.file_size"] / MIB
        assert abs(planned_weights / model_mib - 1) <= TOLERANCE, (planned_weights, model_mib)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_kv(binary, path, n_ctx: int) -> float:
    """The KV cache a llama-server logs for ``n_ctx`` (its sliding-window layers hold their window and a batch)."""
    process = subprocess.Popen([str(binary), "-m", str(path), "-c", str(n_ctx), "-ub", "512", "-b", "512", "-np", "1",
                                "-t", "1", "--port", str(free_port()), "--host", "127.0.0.1", "--no-webui", "-lv", "4"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        for line in process.stderr:  # (-lv 4: the buffer sizes are logged at a verbosity the server hides by default)
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        process.kill()
        process.wait()
    return logged("".join(lines))[1]


def test_llama_server_caches_a_sliding_window_only_and_the_plan_knows(llama_server, gemma_path):
    meta = read_metadata(gemma_path)
    for n_ctx in CONTEXTS:
        seen = server_kv(llama_server, gemma_path, n_ctx)
        planned = kv_cache_bytes(meta, n_ctx, "f16", swa_full=False) / MIB
        assert seen > 0 and abs(planned / seen - 1) <= TOLERANCE, (n_ctx, planned, seen)
    assert kv_cache_bytes(meta, 4096, swa_full=False) < 0.4 * kv_cache_bytes(meta, 4096)  # 27 MiB against 72
