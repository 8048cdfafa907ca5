"""Process memory from /proc and GPU memory through NVML (``nvidia-ml-py``, module ``pynvml``).

NVML is the one boundary specchat cannot exercise without an NVIDIA GPU; without one, ``gpu_memory`` says why and
callers show the process RSS and model sizes instead.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_bytes(pid: int | None = None) -> int | None:
    kib = _status_kib(pid or os.getpid(), "VmRSS")
    return kib * 1024 if kib is not None else None


def reset_peak_rss(pid: int | None = None) -> bool:
    """Restart peak-RSS accounting (Linux: writing 5 to clear_refs resets VmHWM); False where unsupported."""
    try:
        Path(f"/proc/{pid or os.getpid()}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes(pid: int | None = None) -> int | None:
    """Peak resident memory since the last ``reset_peak_rss`` (or since start)."""
    kib = _status_kib(pid or os.getpid(), "VmHWM")
    if kib is None and pid is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024 if kib is not None else None


@dataclass(frozen=True)
class GpuMemory:
    name: str
    used: int  # bytes in use on the device, by every process
    total: int
    process: int | None  # bytes used by this process, when the driver reports it


@dataclass(frozen=True)
class GpuUnavailable:
    reason: str


def _nvml(read: Callable[[Any], T]) -> T | GpuUnavailable:
    """``read(pynvml)`` between NVML's init and shutdown, or why NVML cannot answer."""
    try:
        import pynvml
    except ImportError:
        return GpuUnavailable("nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        reason = "no NVIDIA driver (NVML library not found)" if isinstance(exc, pynvml.NVMLError_LibraryNotFound) else str(exc)
        return GpuUnavailable(reason)
    try:
        return read(pynvml)
    except pynvml.NVMLError as exc:
        return GpuUnavailable(f"NVML error: {exc}")
    finally:
        pynvml.nvmlShutdown()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_memory(device: int = 0, pid: int | None = None) -> GpuMemory | GpuUnavailable:
    def read(nvml: Any) -> GpuMemory | GpuUnavailable:
        if nvml.nvmlDeviceGetCount() <= device:
            return GpuUnavailable("no NVIDIA GPU found")
        handle = nvml.nvmlDeviceGetHandleByIndex(device)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        wanted = pid or os.getpid()
        process = None
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == wanted and proc.usedGpuMemory is not None:
                process = int(proc.usedGpuMemory)
        return GpuMemory(_text(nvml.nvmlDeviceGetName(handle)), int(info.used), int(info.total), process)

    return _nvml(read)


@dataclass(frozen=True)
class NvidiaGpus:
    driver: str
    gpus: list[GpuMemory]  # every device NVML sees, in its order


def nvidia_gpus() -> NvidiaGpus | GpuUnavailable:
    """Every NVIDIA GPU and the driver's version (``specchat doctor``)."""
    def read(nvml: Any) -> NvidiaGpus:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(GpuMemory(_text(nvml.nvmlDeviceGetName(handle)), int(info.used), int(info.total), None))
        return NvidiaGpus(_text(nvml.nvmlSystemGetDriverVersion()), found)

    return _nvml(read)
