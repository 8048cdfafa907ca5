"""Will a target/draft pair fit? The seeds' rule of thumb, from GGUF headers alone.

needed = weights of both models + KV cache of each for n_ctx + a runtime margin (CUDA context, compute buffers).
Weights are the file sizes; the KV cache is 2 (K and V) × layers × KV heads × head size × cells × bytes per element,
from the architecture metadata, as llama.cpp allocates it: cells are n_ctx rounded up to 256, and a sliding-window
layer (Gemma's) caches only its window where llama-server runs it (``swa_full`` off), every cell in-process
(llama-cpp-python's default). Layers kept on the CPU (n_gpu_layers) are counted against RAM instead of VRAM. Checked
against llama.cpp's own logged buffer sizes for both bundled models (tests/profiles/test_memory_plan.py). With a
CPU-only build on a CPU whose llama.cpp multiplies with AMX tiles (where they run: engine/cpu_probe.py), the weights
are counted twice (``repacked``, set by profiles/plan.py): llama.cpp keeps a repacked copy of every weight it
multiplies beside the mapped file, planned as the file's size again (measured: 1.02× the file's size for SmolLM2's
Q4_1, 0.89× for Gemma 3's Q4_K_M, whose Q5_0 tensors AMX leaves alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GB = 1e9
# Bytes per cached element: q8_0 stores 32 values in 34 bytes. The target's cache type is the profile's [target]
# kv_cache; a draft's is llama.cpp's default, f16.
KV_BYTES_PER_ELEMENT = {"q8_0": 34 / 32, "bf16": 2.0, "f16": 2.0}
# The seeds put 2–4 GB beside the weights for context, KV cache, runtime buffers and headroom. The KV cache is counted
# here on its own, so the margin is the rest: the CUDA context (0.3–0.6 GB), compute buffers (0.3–1 GB for an 8B
# target at 512-token batches) and what a desktop keeps on the card — the seeds' low end.
DEFAULT_MARGIN_GB = 2.0
RAM_RESERVED_GB = 6.0  # what the OS and a desktop keep for themselves
KV_CELL_PAD = 256  # llama.cpp rounds a context's cells up to a multiple of this
UBATCH = 512  # the physical batch both backends run with (engine/llama.py, llama-server -ub)
# llama.cpp's sliding-window layout for architectures whose files do not carry one (``set_swa_pattern``): of every n
# layers, the first n-1 slide and the last attends to everything.
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6}


def _padded(cells: int) -> int:
    return -(-cells // KV_CELL_PAD) * KV_CELL_PAD


def sliding_layers(meta: dict[str, Any]) -> list[bool]:
    """Which layers attend through a sliding window, as llama.cpp reads them: the file's
    ``attention.sliding_window_pattern`` (a flag a layer, or a period), else the architecture's own pattern."""
    arch = meta["general.architecture"]
    n_layer = int(meta[f"{arch}.block_count"])
    if not meta.get(f"{arch}.attention.sliding_window"):
        return [False] * n_layer
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", SWA_PATTERNS.get(arch, 0))
    if isinstance(pattern, list):
        return [bool(flag) for flag in pattern[:n_layer]] + [False] * (n_layer - len(pattern))
    period = int(pattern)
    return [period == 0 or layer % period < period - 1 for layer in range(n_layer)]


def kv_cache_bytes(meta: dict[str, Any], n_ctx: int, kv_cache: str = "f16", *, swa_full: bool = True) -> int:
    """The KV cache llama.cpp allocates for ``n_ctx`` tokens; ``swa_full`` False: sliding-window layers hold their
    window and one batch (llama-server's default), True: every cell (llama-cpp-python's)."""
    arch = meta["general.architecture"]
    n_layer = int(meta[f"{arch}.block_count"])
    n_head = meta[f"{arch}.attention.head_count"]
    n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    n_embd = int(meta[f"{arch}.embedding_length"])
    heads = n_head if isinstance(n_head, int) else max(n_head)
    k_len = int(meta.get(f"{arch}.attention.key_length", n_embd // heads))
    v_len = int(meta.get(f"{arch}.attention.value_length", k_len))
    # Some architectures give KV heads per layer; a layer with 0 KV heads shares another layer's cache.
    per_layer = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    cells = _padded(n_ctx)
    window = int(meta.get(f"{arch}.attention.sliding_window") or 0)
    window_cells = cells if swa_full else min(cells, _padded(window + UBATCH))
    elements = sum(int(h) * (k_len + v_len) * (window_cells if sliding else cells)
                   for h, sliding in zip(per_layer, sliding_layers(meta)))
    return round(elements * KV_BYTES_PER_ELEMENT[kv_cache])


def gpu_share(n_gpu_layers: int, n_layer: int | None) -> float:
    """Fraction of a model on the GPU: -1 means all; the output layer counts as one more layer."""
    if n_gpu_layers < 0:
        return 1.0
    if n_layer is None:
        return 1.0 if n_gpu_layers > 0 else 0.0
    return min(n_gpu_layers / (n_layer + 1), 1.0)


@dataclass(frozen=True)
class Footprint:
    role: str
    name: str
    weights: float | None  # bytes; None when neither the file nor expected_size_gb is known
    kv: float | None  # bytes at the profile's n_ctx; None without the file's header
    share: float  # fraction on the GPU
    note: str = ""
    repacked: float = 0.0  # bytes: a repacked copy of the weights the CPU backend keeps (AMX), for the CPU's share

    @property
    def in_ram(self) -> float:
        """What the CPU's share of this model holds in RAM."""
        return (self.total + self.repacked) * (1 - self.share)

    @property
    def total(self) -> float:
        return (self.weights or 0.0) + (self.kv or 0.0)


@dataclass(frozen=True)
class FitReport:
    models: list[Footprint]
    vram: float
    ram: float
    margin: float

    @property
    def on_gpu(self) -> float:
        return sum(m.total * m.share for m in self.models)

    @property
    def on_cpu(self) -> float:
        return sum(m.in_ram for m in self.models)

    @property
    def uses_gpu(self) -> bool:
        return any(m.share > 0 for m in self.models)

    @property
    def vram_left(self) -> float:
        return self.vram - self.on_gpu - self.margin if self.uses_gpu else self.vram

    @property
    def complete(self) -> bool:
        return all(m.weights is not None and m.kv is not None for m in self.models)

    def verdicts(self) -> list[str]:
        lines = []
        if self.uses_gpu:
            left = self.vram_left
            if left >= 1 * GB:
                lines.append(f"fits in {self.vram / GB:.0f} GB VRAM with {left / GB:.1f} GB to spare")
            elif left >= 0:
                lines.append(f"fits in {self.vram / GB:.0f} GB VRAM, but tight ({left / GB:.1f} GB to spare)")
            else:
                lines.append(
                    f"does not fit in {self.vram / GB:.0f} GB VRAM: {-left / GB:.1f} GB over — lower n_gpu_layers or"
                    " n_ctx, or pick a smaller quantization"
                )
        spill = self.on_cpu + max(-self.vram_left, 0.0) if self.uses_gpu else self.on_cpu + self.margin
        if spill > 0:
            usable = self.ram - RAM_RESERVED_GB * GB
            where = "offloaded to RAM" if self.uses_gpu else "in RAM (CPU only)"
            if spill > usable:
                lines.append(
                    f"RISK: {spill / GB:.1f} GB {where} exceeds the ~{usable / GB:.0f} GB free of {self.ram / GB:.0f} GB RAM"
                )
            elif self.uses_gpu:
                lines.append(f"risk: {spill / GB:.1f} GB {where} slows every step (fits in {self.ram / GB:.0f} GB RAM)")
            else:
                lines.append(f"{spill / GB:.1f} GB {where}: fits in {self.ram / GB:.0f} GB RAM")
        if not self.complete:
            lines.append("incomplete: a model file is absent, so these figures are a lower bound")
        return lines
