"""Finding, or building, llama.cpp's ``llama-server`` — from the same llama.cpp sources as the in-process engine.

The binary is the profile's ``[backend] binary``, else ``$SPECCHAT_LLAMA_SERVER``, else ``llama-server`` on PATH, else
the one ``specchat server build`` made in the user cache dir. The build downloads the source distribution of the
pinned llama-cpp-python from PyPI and compiles the llama.cpp vendored in it (about 6 minutes on 2 cores): the server
then computes exactly what the in-process engine computes, so greedy output through it is specchat's own. It builds
for the GPU that is there — CUDA where ``nvcc`` is, Vulkan where ``glslc`` and its headers are, Metal on macOS — or
for the one named (``--backend``), and says which in ``build.json`` beside the binaries.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from .. import paths
from ..engine.cpu import cores
from ..errors import ConfigError
from ..telemetry.memory import GpuMemory, gpu_memory
from .offload import LlamaBuild

ENV = "SPECCHAT_LLAMA_SERVER"
TARGETS = ("llama-server", "llama-bench", "llama-speculative-simple")
# llama.cpp's CMake option for each GPU backend (its docs/build.md); the CPU backend is always built.
BACKENDS: dict[str, tuple[str, ...]] = {"cpu": (), "cuda": ("-DGGML_CUDA=ON",), "vulkan": ("-DGGML_VULKAN=ON",),
                                        "metal": ("-DGGML_METAL=ON",)}
VULKAN_HEADER = Path("/usr/include/vulkan/vulkan.h")
RECORD = "build.json"  # beside the binaries: the backend and CMake options they were built with


def built_dir() -> Path:
    return paths.cache_dir() / f"llama.cpp-{llama_cpp.__version__}" / "bin"


def find_server(configured: str | None = None) -> Path:
    """The llama-server binary to run, or one line saying where it was looked for and how to get one."""
    for candidate, origin in ((configured, "the profile's [backend] binary"), (os.environ.get(ENV), f"${ENV}")):
        if candidate:
            return _usable(Path(candidate).expanduser(), origin)
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    built = built_dir() / "llama-server"
    if built.is_file():
        return built
    raise ConfigError(f"llama-server not found (looked at ${ENV}, PATH and {built}) — build it with `specchat server"
                      " build` (about 6 minutes), or set [backend] binary in the profile")


def _usable(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise ConfigError(f"llama-server not found at {path} ({origin}) — check the path or run `specchat server build`")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{path} ({origin}) is not executable — chmod +x it, or point to the llama-server binary")
    return path


def nvcc() -> str | None:
    """CUDA's compiler, on PATH or where the CUDA toolkit installs it."""
    toolkit = Path("/usr/local/cuda/bin/nvcc")
    return shutil.which("nvcc") or (str(toolkit) if toolkit.is_file() else None)


def detected_backend() -> tuple[str, str]:
    """The GPU backend this machine can build and run, and what showed it. A CUDA toolkit without an NVIDIA driver (a
    build box, this project's CI) would compile for half an hour a server that cannot start here: that is CPU, said
    so, and ``--backend cuda`` builds it anyway."""
    if sys.platform == "darwin":
        return "metal", "macOS (Metal)"
    compiler = nvcc()
    if compiler:
        gpu = gpu_memory()
        if isinstance(gpu, GpuMemory):
            return "cuda", f"the CUDA compiler at {compiler} and the {gpu.name}"
        return "cpu", (f"the CUDA compiler at {compiler}, but {gpu.reason}: a CUDA server could not run here"
                       " (--backend cuda builds one anyway)")
    if shutil.which("glslc") and VULKAN_HEADER.is_file():
        return "vulkan", f"glslc and {VULKAN_HEADER}"
    return "cpu", "no CUDA compiler (nvcc), no glslc with Vulkan headers, not macOS"


def cmake_configure(source: Path, build_dir: Path, backend: str) -> list[str]:
    """The CMake configure command for ``backend`` (one of ``BACKENDS``)."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} — choose one of {', '.join(BACKENDS)}")
    return ["cmake", "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DBUILD_SHARED_LIBS=OFF", *BACKENDS[backend]]


def built_backend(folder: Path | None = None) -> str | None:
    """The backend the binaries in ``folder`` (default: the user cache's) were built with, where it was recorded."""
    try:
        return json.loads(((folder or built_dir()) / RECORD).read_text(encoding="utf-8")).get("backend")
    except (OSError, ValueError, AttributeError):
        return None


def compile_jobs(jobs: int | None) -> int:
    """``jobs``, else one compile job per core this process may run on (a cpuset or ``taskset`` holds it to fewer
    than the machine has: a job per machine core would share them, each with its compiler's memory)."""
    if jobs is None:
        return cores()
    if jobs < 1:
        raise ConfigError(f"--jobs must be ≥ 1, got {jobs}")
    return jobs


def build(jobs: int | None = None, progress: Callable[[str], None] = print, out: Path | None = None,
          backend: str = "cpu") -> Path:
    """Build llama.cpp's tools for ``backend`` from the pinned llama-cpp-python's sources into ``out`` (default: the
    user cache), with ``jobs`` compile jobs (default: one per core it may run on); returns that folder."""
    if not shutil.which("cmake"):
        raise ConfigError("cmake is not installed — install it (e.g. apt install cmake), then run this again")
    out = out or built_dir()
    jobs = compile_jobs(jobs)
    version = llama_cpp.__version__
    with tempfile.TemporaryDirectory(prefix="specchat-build-") as tmp:
        work = Path(tmp)
        progress(f"downloading the llama-cpp-python {version} source distribution…")
        # Only llama-cpp-python as source: with ":all:" pip also builds the sdist's build requirements from source
        # to read its metadata (minutes, and compilers for some) where their wheels take seconds.
        _run([sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python", "--no-deps", "--quiet",
              f"llama-cpp-python=={version}", "-d", str(work)], "pip download")
        extract(next(work.glob("llama_cpp_python-*.tar.gz")), work)
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build_dir = work / "build"
        configure = cmake_configure(source, build_dir, backend)
        progress(f"configuring llama.cpp for {backend}…")
        _run(configure, "cmake configure")
        progress(f"compiling {', '.join(TARGETS)} with {jobs} jobs (about 6 minutes on 2 cores for the CPU)…")
        _run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *TARGETS], "cmake build")
        out.mkdir(parents=True, exist_ok=True)
        for target in TARGETS:
            shutil.copy2(build_dir / "bin" / target, out / target)
        (out / RECORD).write_text(json.dumps({"backend": backend, "cmake": configure[7:]}), encoding="utf-8")
    return out


def server_build_info(binary: Path) -> LlamaBuild:
    """What a llama-server binary offloads to: the devices it lists (``--list-devices``: none on a CPU build, or on a
    GPU build without its driver), and the backend ``specchat server build`` recorded beside it. Asked once per
    binary as it is on disk."""
    stat = binary.stat()
    return _build_info(binary, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _build_info(binary: Path, _mtime_ns: int, _size: int) -> LlamaBuild:
    compiled_for = recorded = built_backend(binary.parent)
    try:
        result = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True, timeout=60)
        listed = result.stdout + result.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        listed = ""
        recorded = recorded or f"unknown ({exc})"
    devices = tuple(re.findall(r"^\s+(\w+\d*: .+)$", listed.split("Available devices:", 1)[-1], re.M))
    devices = tuple(d for d in devices if d.strip() != "(none)")
    backends = tuple(dict.fromkeys([re.sub(r"\d+$", "", d.split(":", 1)[0]) for d in devices] + ["CPU"]))
    what = f"llama-server at {binary}" + (f" (built for {recorded})" if recorded else "")
    return LlamaBuild(what, bool(devices), backends, devices, server=True, compiled_for=compiled_for)


def extract(archive: Path, into: Path) -> None:
    """Unpack a source archive, refusing any member that would land outside ``into``."""
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(into, filter="data")
                return
            root = into.resolve()
            for member in tar.getmembers():
                place = (root / member.name).resolve()
                pointed = (place.parent / member.linkname).resolve() if member.issym() else \
                    (root / member.linkname).resolve() if member.islnk() else place
                if not (place.is_relative_to(root) and pointed.is_relative_to(root)):
                    raise ConfigError(f"{archive.name} has a member that leaves its folder ({member.name}) — not"
                                      " unpacking it")
            tar.extractall(into)
    except (tarfile.TarError, OSError) as exc:
        raise ConfigError(f"cannot unpack {archive.name}: {exc}") from None


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"{what} failed (exit {result.returncode}): {last[0]}")
