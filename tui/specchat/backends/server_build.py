"""Finding, or building, llama.cpp's ``llama-server`` — from the same llama.cpp sources as the in-process engine.

The binary is the profile's ``[backend] binary``, else ``$SPECCHAT_LLAMA_SERVER``, else ``llama-server`` on PATH, else
the one ``specchat server build`` made in the user cache dir. The build downloads the source distribution of the
pinned llama-cpp-python from PyPI and compiles the llama.cpp vendored in it (about 6 minutes on 2 cores): the server
then computes exactly what the in-process engine computes, so greedy output through it is specchat's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from .. import paths
from ..errors import ConfigError

ENV = "SPECCHAT_LLAMA_SERVER"
TARGETS = ("llama-server", "llama-bench", "llama-speculative-simple")


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


def build(jobs: int = 2, progress: Callable[[str], None] = print, out: Path | None = None) -> Path:
    """Build llama.cpp's tools from the pinned llama-cpp-python's sources into ``out`` (default: the user cache);
    returns that folder."""
    if not shutil.which("cmake"):
        raise ConfigError("cmake is not installed — install it (e.g. apt install cmake), then run this again")
    out = out or built_dir()
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
        progress("configuring llama.cpp…")
        _run(["cmake", "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
              "-DLLAMA_BUILD_TESTS=OFF", "-DBUILD_SHARED_LIBS=OFF"], "cmake configure")
        progress(f"compiling {', '.join(TARGETS)} with {jobs} jobs (about 6 minutes on 2 cores)…")
        _run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *TARGETS], "cmake build")
        out.mkdir(parents=True, exist_ok=True)
        for target in TARGETS:
            shutil.copy2(build_dir / "bin" / target, out / target)
    return out


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
