"""NVML at its boundary, for a GPU this machine does not have: put this folder first on PYTHONPATH and set
FAKE_NVML="name;total bytes;used bytes;driver". Every specchat call above it — the memory plan, the fix a CPU-only
build names, ``doctor``, the sidebar — runs as it does on an NVIDIA machine."""

from __future__ import annotations

import os
from types import SimpleNamespace

NAME, TOTAL, USED, DRIVER = os.environ["FAKE_NVML"].split(";")


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 (NVML's own name)
    pass


def nvmlInit() -> None: ...
def nvmlShutdown() -> None: ...
def nvmlDeviceGetCount() -> int: return 1
def nvmlDeviceGetHandleByIndex(index: int) -> str: return f"gpu{index}"
def nvmlDeviceGetName(handle: str) -> bytes: return NAME.encode()
def nvmlSystemGetDriverVersion() -> str: return DRIVER
def nvmlDeviceGetComputeRunningProcesses(handle: str) -> list: return []


def nvmlDeviceGetMemoryInfo(handle: str) -> SimpleNamespace:
    return SimpleNamespace(total=int(TOTAL), used=int(USED), free=int(TOTAL) - int(USED))
