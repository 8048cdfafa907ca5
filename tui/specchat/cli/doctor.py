"""``specchat doctor``: one screen a user can paste into an issue — versions and builds, the GPUs, the llama-server
specchat would run, the user folders, and where each profile would run and whether it fits. Each line is a fact, and
where the fact is a problem, what to do about it."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Iterator
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("doctor", help="what this machine offers specchat: builds, GPUs, folders, and each profile's plan")


def run(_args: argparse.Namespace) -> int:
    for line in report():
        print(line)
    return 0


def report() -> Iterator[str]:
    from .. import __version__

    yield f"specchat {__version__} · Python {platform.python_version()} ({sys.executable}) · {platform.platform()}"
    yield from _builds()
    yield from _gpus()
    yield from _folders()
    yield from _profiles()


def _builds() -> Iterator[str]:
    from ..backends.offload import in_process_build, reinstall_fix
    from ..backends.server_build import detected_backend, find_server, server_build_info
    from ..errors import SpecchatError

    build = in_process_build()
    yield f"llama.cpp in-process: {build.described}"
    if not build.gpu_offload:
        yield f"  to offload to a GPU — {reinstall_fix()}"
    try:
        server = server_build_info(find_server())
        yield f"llama.cpp server: {server.described}"
        if not server.gpu_offload:
            backend, why = detected_backend()
            yield (f"  to offload to a GPU — `specchat server build --backend {backend} --force` ({why})"
                   if backend != "cpu" else f"  to offload to a GPU — on a machine with one, `specchat server build"
                   f" --backend cuda|vulkan|metal --force` (here: {why}; docs/gpu.md)")
    except SpecchatError as exc:
        yield f"llama.cpp server: {exc}"


def _gpus() -> Iterator[str]:
    from ..telemetry.memory import GpuUnavailable, nvidia_gpus

    found = nvidia_gpus()
    if isinstance(found, GpuUnavailable):
        yield (f"GPUs (NVML): none — {found.reason}; an NVIDIA GPU needs its driver (nvidia-smi works when it is"
               " there), others are not read by NVML (docs/gpu.md)")
        return
    if not found.gpus:
        yield f"GPUs (NVML): driver {found.driver}, but no GPU listed — check `nvidia-smi`"
    for index, gpu in enumerate(found.gpus):
        free = gpu.total - gpu.used
        yield (f"GPU {index} (NVML): {gpu.name}, driver {found.driver}, VRAM {gpu.total / 1e9:.1f} GB,"
               f" {free / 1e9:.1f} GB free")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _folders() -> Iterator[str]:
    from .. import paths
    from ..profiles import models, user_dir

    for what, folder in (("profiles", user_dir()), ("chats", paths.chats_db()), ("cache", paths.cache_dir())):
        where = f"{folder} ({_size(folder) / 1e6:,.1f} MB)" if folder.exists() else f"{folder} (not there yet)"
        yield f"{what}: {where}"
    found = models.discover()
    searched = ", ".join(map(str, models.model_dirs()))
    yield f"models: {len(found)} GGUF files in {searched}" + (
        "" if found else " — put GGUFs there (LM Studio's folders are searched) or name a file's path in a profile")


def _profiles() -> Iterator[str]:
    from ..errors import SpecchatError
    from ..profiles import available_profiles, load_profile
    from ..profiles.plan import plan

    yield "profiles (where each would run; its memory plan):"
    for name in available_profiles():
        try:
            profile = load_profile(name)
            kind = profile.backend_kind
            memory = plan(profile)
        except SpecchatError as exc:
            yield f"  {name}: cannot be read — {exc}"
            continue
        missing = [m for m in memory.models if m.located.path is None]
        absent = f" · {len(missing)} model file(s) absent: `specchat profiles check {name}`" if missing else ""
        yield f"  {name}: {kind.label} · {memory.summary()}{absent}"
        if memory.build_note:
            yield "    ! GPU layers asked for, but the build is CPU-only (the fix is above)"
