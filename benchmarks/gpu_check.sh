#!/usr/bin/env bash
# The GPU check of issue #48, for a lent machine with an NVIDIA GPU: under 10 minutes, nothing fetched.
#
# What such a machine offers: nvcc, CMake, ninja and Python 3.12 — no network, and at most 64 MiB carried with each
# command. So neither llama-cpp-python's sdist (73 MiB) nor the bundled GGUF (98 MB) travels: llama.cpp's sources travel
# trimmed (LLAMA_SRC: the vendored tree without its models/, docs/, examples' media and tests), libllama and the tools
# are built there for that GPU, llama-cpp-python's Python part is pointed at the library (LLAMA_CPP_LIB_PATH), and the
# model is made there (random weights: timings and exactness need no trained weights, and a draft identical to its
# target shows the mechanism's ceiling). The Python packages specchat needs travel as wheels (WHEELS), or are there.
#
#   LLAMA_SRC=shared/llama.cpp WHEELS=shared/wheels benchmarks/gpu_check.sh [OUT]
#
# It prints, and writes to OUT/gpu_check.txt: the build's backends and llama_supports_gpu_offload(); the tests that
# touch GPU layers and NVML; the sidebar's VRAM (NVML through specchat) beside nvidia-smi's; the verify curve on the GPU
# (llama-bench pp1…pp32 against tg); and a target with its draft and with ngram beside plain decoding (llama-server).
# Status: written, not yet run — no GPU machine has been lent to this project (docs/benchmarks.md says when it runs).
set -euo pipefail

OUT=${1:-${OUT:-/tmp/gpu_check}}
LLAMA_SRC=${LLAMA_SRC:?set LLAMA_SRC to llama.cpp\'s sources (the vendored tree of the pinned llama-cpp-python)}
BUILD="$OUT/build"
REPORT="$OUT/gpu_check.txt"
mkdir -p "$OUT"
exec > >(tee "$REPORT") 2>&1
say() { printf '\n== %s\n' "$*"; }
started=$(date +%s)

say "the GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader

say "building libllama, llama-server, llama-bench and llama-speculative-simple for CUDA (this GPU's architecture only)"
cmake -S "$LLAMA_SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target llama llama-server llama-bench llama-speculative-simple >/dev/null
LIB=$(dirname "$(find "$BUILD" -name 'libllama.so' | head -1)")
export LLAMA_CPP_LIB_PATH="$LIB" LD_LIBRARY_PATH="$LIB:${LD_LIBRARY_PATH:-}"
export SPECCHAT_LLAMA_SERVER="$BUILD/bin/llama-server"
echo "built in $(( $(date +%s) - started )) s: $LIB"

say "specchat and its Python packages"
python3 -m venv "$OUT/venv"
# shellcheck disable=SC1091
. "$OUT/venv/bin/activate"
if [ -n "${WHEELS:-}" ]; then
    pip install --quiet --no-index --find-links "$WHEELS" -e ".[test]"
else
    pip install --quiet --no-index --no-build-isolation -e ".[test]"
fi
python - <<'PY'
import llama_cpp
from specchat.backends.offload import in_process_build
build = in_process_build()
print(build.described)
assert build.gpu_offload, "llama-cpp-python does not offload with this library: check LLAMA_CPP_LIB_PATH"
PY
specchat doctor
specchat server which

say "a model made here: a 0.5B-shaped Llama with random weights (target) and the same file as its draft"
python - "$OUT" <<'PY'
import sys
from pathlib import Path
import numpy as np
import gguf
out = Path(sys.argv[1]) / "random-0.5b.gguf"
layers, embd, ff, vocab, heads, kv_heads = 24, 1024, 2816, 32000, 16, 8
w = gguf.GGUFWriter(str(out), "llama")
w.add_block_count(layers); w.add_context_length(4096); w.add_embedding_length(embd); w.add_feed_forward_length(ff)
w.add_head_count(heads); w.add_head_count_kv(kv_heads); w.add_layer_norm_rms_eps(1e-5); w.add_rope_dimension_count(embd // heads)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
# SentencePiece's layout: unknown, BOS, EOS, one token a byte (its fallback for any text), then made-up words.
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
tokens += [f"▁w{i}" for i in range(vocab - len(tokens))]
types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
w.add_tokenizer_model("llama")
w.add_token_list(tokens); w.add_token_scores([0.0] * vocab)
w.add_token_types(types + [gguf.TokenType.NORMAL] * (vocab - len(types))); w.add_bos_token_id(1); w.add_eos_token_id(2)
rng = np.random.default_rng(0)
def t(name, *shape): w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))
t("token_embd.weight", vocab, embd); t("output.weight", vocab, embd)
w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
kv = embd // heads * kv_heads
for i in range(layers):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
    t(f"blk.{i}.attn_q.weight", embd, embd); t(f"blk.{i}.attn_k.weight", kv, embd); t(f"blk.{i}.attn_v.weight", kv, embd)
    t(f"blk.{i}.attn_output.weight", embd, embd)
    t(f"blk.{i}.ffn_gate.weight", ff, embd); t(f"blk.{i}.ffn_up.weight", ff, embd); t(f"blk.{i}.ffn_down.weight", embd, ff)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print(out, out.stat().st_size // 2**20, "MiB")
PY
MODEL="$OUT/random-0.5b.gguf"

say "the tests that touch GPU layers and NVML (the real NVML here, not the fake)"
python -m pytest -q tests/front_ends/test_gpu_path.py tests/chats/test_telemetry_and_store.py -k "gpu or nvml or doctor" \
    tests/profiles/test_memory_plan.py || echo "(tests failed: see above)"

say "the sidebar's VRAM (NVML through specchat) beside nvidia-smi, with the model loaded on the GPU"
python - "$MODEL" <<'PY'
import subprocess, sys
from specchat.engine.llama import Context, Model
from specchat.telemetry.memory import gpu_memory
model = Model(__import__("pathlib").Path(sys.argv[1]), role="target", n_gpu_layers=-1)
ctx = Context(model, n_ctx=4096, threads=4)
ours = gpu_memory()
smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True).stdout.split(",")
print(f"specchat (NVML): used {ours.used / 2**20:.0f} MiB of {ours.total / 2**20:.0f}; this process {ours.process}")
print(f"nvidia-smi:      used {smi[0].strip()} MiB of {smi[1].strip()}")
PY

say "the verify curve on the GPU: prompt batches of 1…32 tokens against plain decoding (llama-bench, ms per token)"
"$BUILD/bin/llama-bench" -m "$MODEL" -ngl 99 -p 1,2,4,8,16,32 -n 64 -r 3 -o md

say "a target with its draft (itself: the ceiling) and with ngram, beside plain decoding (llama-server)"
for spec in none draft ngram-simple; do
    extra=()
    [ "$spec" = draft ] && extra=(-md "$MODEL" -ngld 99 --spec-type draft-simple --spec-draft-n-max 8)
    [ "$spec" = ngram-simple ] && extra=(--spec-type ngram-simple)
    "$BUILD/bin/llama-server" -m "$MODEL" -ngl 99 -c 4096 --port 8181 --no-webui "${extra[@]}" >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 60); do curl -sf localhost:8181/health >/dev/null 2>&1 && break; sleep 1; done
    python - "$spec" <<'PY'
import json, sys, urllib.request
prompt = "the cat sat on the mat. " * 40  # a repeating prompt: ngram has copies to find
body = json.dumps({"prompt": prompt, "n_predict": 256, "temperature": 0, "cache_prompt": False}).encode()
reply = json.load(urllib.request.urlopen(urllib.request.Request("http://localhost:8181/completion", body,
                                                               {"Content-Type": "application/json"})))
t = reply["timings"]
print(f"{sys.argv[1]:>13}: {t['predicted_per_second']:.1f} tok/s decode, "
      f"drafted {t.get('draft_n', 0)}, accepted {t.get('draft_n_accepted', 0)}")
PY
    kill "$server"; wait "$server" 2>/dev/null || true
done

echo
echo "done in $(( $(date +%s) - started )) s; report: $REPORT"
