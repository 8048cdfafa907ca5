"""Where llama.cpp can put a model's layers: what a build was compiled with, and the line that says so when a profile
asks for GPU layers that the build cannot give.

``pip install`` builds llama-cpp-python for the CPU unless told otherwise (its README: ``CMAKE_ARGS="-DGGML_CUDA=on"``),
and llama.cpp then runs ``n_gpu_layers = -1`` on the CPU without a word — an 8B target at a few tokens a second, which a
user reads as "speculation is slow" (issue #48; abetlen/llama-cpp-python #1629 and #1693 are CUDA builds that fell
back the same way). So the build is read once, from llama.cpp itself, and every front end says the same line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import llama_cpp

from ..engine.engine_config import EngineConfig
from ..engine.machine import system_info
from ..telemetry.memory import GpuMemory, gpu_memory

GPU_GUIDE = "docs/gpu.md"


@dataclass(frozen=True)
class LlamaBuild:
    what: str  # "llama-cpp-python 0.3.36 (in-process)" or "llama-server at /path"
    gpu_offload: bool  # layers can go to a GPU (llama.cpp's llama_supports_gpu_offload, or devices a server lists)
    backends: tuple[str, ...]  # what it was compiled with, as llama.cpp names them ("CUDA", "Vulkan", "Metal", "CPU")
    devices: tuple[str, ...] = ()  # the GPUs it sees, where it says (llama-server --list-devices)
    server: bool = False  # a llama-server binary (rebuilt by ``specchat server build``), not llama-cpp-python
    compiled_for: str | None = None  # a llama-server's backend as ``specchat server build`` recorded it ("cpu", …)

    @property
    def described(self) -> str:
        """One line: the build, its backends and whether it offloads."""
        where = "GPU offload" if self.gpu_offload else "CPU only (no GPU offload)"
        seen = f"; devices: {', '.join(self.devices)}" if self.devices else ""
        return f"{self.what}: {', '.join(self.backends) or 'backends unknown'} — {where}{seen}"


def backends_of(info: str) -> tuple[str, ...]:
    """The backends in llama.cpp's system-info line ("CUDA : ARCHS = 890 | … | CPU : SSE3 = 1 | …"): each backend's
    name is followed by " : ", each feature by " = "."""
    return tuple(dict.fromkeys(re.findall(r"(?:^|\| )([A-Za-z][\w-]*) : ", info)))


@functools.cache
def in_process_build() -> LlamaBuild:
    """The llama-cpp-python this process loads models with."""
    return LlamaBuild(f"llama-cpp-python {llama_cpp.__version__} (in-process)",
                      bool(llama_cpp.llama_supports_gpu_offload()), backends_of(system_info()))


def reinstall_fix(gpu: object | None = None, server: bool = False) -> str:
    """What to do about a CPU-only build, for the GPU that is there: an NVIDIA GPU seen by NVML gets the CUDA reinstall
    of the pinned version (or the CUDA server build); otherwise the choices."""
    gpu = gpu_memory() if gpu is None else gpu
    version = llama_cpp.__version__
    if server:
        if isinstance(gpu, GpuMemory):
            return (f"for the {gpu.name}: specchat server build --backend cuda --force (needs the CUDA toolkit;"
                    f" {GPU_GUIDE})")
        return ("no NVIDIA GPU is seen here: specchat server build --backend vulkan (AMD, Intel) or metal (macOS)"
                f" --force on the machine with the GPU; or set n_gpu_layers = 0 ({GPU_GUIDE})")
    if isinstance(gpu, GpuMemory):
        return (f'for the {gpu.name}: CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir'
                f" llama-cpp-python=={version} (needs the CUDA toolkit; {GPU_GUIDE})")
    return (f"no NVIDIA GPU is seen here: reinstall llama-cpp-python=={version} with"
            ' CMAKE_ARGS="-DGGML_VULKAN=on" (AMD, Intel) or "-DGGML_HIP=on" (ROCm), on a Mac it offloads to Metal as'
            f" built; or set n_gpu_layers = 0 ({GPU_GUIDE})")


def cpu_only_warning(gpu_layers: dict[str, int], build: LlamaBuild, gpu: object | None = None) -> str:
    """One line when a profile asks for GPU layers (role → n_gpu_layers) and ``build`` cannot offload; "" otherwise."""
    asked = {role: n for role, n in gpu_layers.items() if n != 0}
    if not asked or build.gpu_offload:
        return ""
    wanted = ", ".join(f"{role} n_gpu_layers = {n}" for role, n in asked.items())
    ask = "asks" if len(asked) == 1 else "ask"
    return f"{wanted} {ask} for the GPU, but {build.what} is built for the CPU only: every layer runs on the CPU — " + \
        reinstall_fix(gpu, build.server)


def asked_gpu_layers(config: EngineConfig) -> dict[str, int]:
    """The GPU layers a configuration asks for, by model role (a draft, or an MTP assistant, where one is loaded)."""
    asked = {"target": config.target.n_gpu_layers}
    if config.draft is not None and config.spec.method != "none":
        asked["draft"] = config.draft.n_gpu_layers
    return asked
