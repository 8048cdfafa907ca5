"""What a cost measured here holds for, beyond the model and its settings: this machine and this llama.cpp build.

A verify sweep (and its ``exact`` cap, which bounds every speculative profile's verify batch) measured on another
processor, another GPU, a CUDA build instead of a CPU one of the same version, or with llama.cpp's extra CPU buffer
types off, says nothing about this one — a synced ``~/.cache`` or a rebuilt wheel would otherwise be trusted.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from pathlib import Path

import llama_cpp as lc

from .cpu_probe import extra_buffers_work


@functools.cache
def processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def gpu_name() -> str:
    """The first NVIDIA GPU's name, or "" where NVML finds none (GPU layers then run on whatever llama.cpp has)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 — no library, no driver: no GPU to name
        return ""
    try:
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if pynvml.nvmlDeviceGetCount() else ""
        return name.decode() if isinstance(name, bytes) else str(name)
    except pynvml.NVMLError:
        return ""
    finally:
        pynvml.nvmlShutdown()


def system_info() -> str:
    """llama.cpp's system-info line for the llama-cpp-python this process loads: its backends and CPU features."""
    info = lc.llama_print_system_info()
    return info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)


@functools.cache
def build() -> str:
    """llama.cpp's own account of its build — the backends compiled in (CUDA and its architectures, Metal, …) and
    the CPU features it uses — as a short hash, with llama-cpp-python's version."""
    return f"llama.cpp {lc.__version__} {hashlib.sha256(system_info().encode()).hexdigest()[:12]}"


def fingerprint(n_gpu_layers: int) -> str:
    gpu = f"|gpu={gpu_name() or 'none'}" if n_gpu_layers else ""
    return f"cpu={processor()}{gpu}|extra_bufts={extra_buffers_work()}|{build()}"
