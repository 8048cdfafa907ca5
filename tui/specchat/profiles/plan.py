"""A profile's memory plan against the machine that is there: the GPU NVML sees (its free VRAM, not a card's total),
the llama.cpp build that would run the profile (in-process, or the llama-server specchat would start), and what to
change when it does not fit. ``profiles check``, the F2 picker and ``specchat doctor`` show it; nothing here loads
weights (GGUF headers only) — but on a CPU that reports AMX, the engine's one-time probe of whether it runs
(engine/cpu_probe.py, a two-token decode of the bundled model in a child process, kept per machine)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace


from ..backends.offload import LlamaBuild, cpu_only_warning, in_process_build
from ..backends.server_build import find_server, server_build_info
from ..engine.cpu_probe import extra_buffers_work
from ..engine.gguf_header import read_metadata
from ..engine.machine import system_info
from ..errors import SpecchatError
from ..telemetry.memory import GpuMemory, GpuUnavailable, gpu_memory
from ..engine.drafters import METHODS
from . import models
from .assistant import find_assistant
from .fit import DEFAULT_MARGIN_GB, GB, KV_BYTES_PER_ELEMENT, FitReport, Footprint, gpu_share, kv_cache_bytes
from .resolve import model_base
from .schema import Profile

SEEDS_VRAM_GB = 12.0  # the seeds' card, planned against only where no GPU is seen (and said so)


@dataclass(frozen=True)
class PlannedModel:
    role: str
    located: models.Located
    meta: dict | None


@dataclass(frozen=True)
class MemoryPlan:
    models: list[PlannedModel]  # what was planned: the target and draft as found, with their headers
    report: FitReport
    vram_source: str  # where the VRAM figure comes from, said with it
    build: LlamaBuild | None  # None: a remote server's, or one not found
    build_note: str  # "" or the line saying that GPU layers asked for will run on the CPU, with the fix
    changes: list[str]  # what to change when it does not fit, each with what it saves
    # With a CPU-only build: the plan once the build offloads (the fix applied), for the GPU that is there
    offloaded: FitReport | None = None

    @property
    def warns(self) -> bool:
        """GPU layers would run on a CPU-only build, or the GPU plan does not fit."""
        return bool(self.build_note) or self.report.uses_gpu and self.report.vram_left < 0

    def summary(self) -> str:
        """One line for a list of profiles (the F2 picker)."""
        r = self.report
        if self.build_note:
            return f"CPU-only build: all in RAM, {(r.on_cpu + r.on_gpu + r.margin) / GB:.1f} GB"
        if not r.uses_gpu:
            return f"CPU: {(r.on_cpu + r.margin) / GB:.1f} GB in RAM"
        needed = (r.on_gpu + r.margin) / GB
        verdict = "fits" if r.vram_left >= 0 else "does not fit"
        bound = "≥ " if not r.complete else ""
        return f"{verdict}: {bound}{needed:.1f} GB of {r.vram / GB:.1f} GB VRAM"


def ram_bytes() -> float:
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 16 * GB


def planned_models(profile: Profile) -> list[PlannedModel]:
    """The profile's target and draft (or MTP assistant, named or found beside the target) as found on disk, each with
    its GGUF header where the file is there."""
    method = METHODS[profile.method]
    pair: list[PlannedModel] = []
    for role in ("target", "draft"):
        if role == "draft" and not (method.draft_model or method.assistant):
            continue
        reference = profile.model(role)
        if reference is None and role == "draft" and method.assistant and pair and pair[0].located.path:
            found = find_assistant(pair[0].located.path)
            if found is not None:
                pair.append(PlannedModel(role, models.Located(found.name, found), read_metadata(found)))
            continue
        if reference is None:
            continue
        located = models.locate(reference, model_base(profile))
        pair.append(PlannedModel(role, located, read_metadata(located.path) if located.path else None))
    return pair


@functools.cache
def cpu_repacks_weights() -> bool:
    """This CPU's llama.cpp multiplies with AMX tiles, so a CPU-only build keeps a repacked copy of the weights it
    multiplies ("AMX model buffer") beside the mapped file — unless this machine's AMX does not run
    (``extra_buffers_work``), when every model loads without it (a llama-server specchat starts: ``--no-repack``)."""
    try:
        return "AMX_INT8 = 1" in system_info() and extra_buffers_work()
    except SpecchatError:  # the probe's model is not there: the engine could not load without it either
        return False


def keeps_repacked_copy(build: LlamaBuild | None) -> bool:
    """Whether ``build`` (``build_of`` a profile) keeps that copy of the layers on the CPU: a CPU-only build here,
    in-process or a llama-server that ``specchat server build`` compiled here for the CPU. A GPU build puts the CPU's
    layers in its host buffers, which are not repacked; a server binary from elsewhere, or a remote one, is not known
    and not counted."""
    if build is None or build.gpu_offload or (build.server and build.compiled_for != "cpu"):
        return False
    return cpu_repacks_weights()


def build_of(profile: Profile) -> LlamaBuild | None:
    """The llama.cpp build that would run ``profile``: this process's, or the llama-server specchat would start
    (None for a remote server, or a llama-server not found)."""
    kind = profile.backend_kind
    if kind.runs_engine:
        return in_process_build()
    if not kind.starts_process:
        return None
    try:
        return server_build_info(find_server(profile.values["backend"].get("binary")))
    except SpecchatError:
        return None


def footprint(m: PlannedModel, profile: Profile, offloads: bool, repacks: bool) -> Footprint:
    """``repacks``: the build keeps a repacked copy (AMX) of the CPU's share of the weights (``keeps_repacked_copy``)."""
    layers = profile.n_gpu_layers(m.role) if offloads else 0
    notes = ["GPU asked; CPU-only build"] if not offloads and profile.n_gpu_layers(m.role) else []
    if m.meta is None:
        expected = profile.expected_size_gb(m.role)
        notes.insert(0, "file absent" + (", size from expected_size_gb" if expected else ""))
        name, size, kv, share = m.located.reference, expected * GB if expected else None, None, gpu_share(layers, None)
    else:
        arch = m.meta.get("general.architecture")
        # A llama-server keeps a sliding-window layer's window only; llama-cpp-python every cell (fit.kv_cache_bytes).
        kv = float(kv_cache_bytes(m.meta, profile.n_ctx, profile.kv_cache if m.role == "target" else "f16",
                                  swa_full=profile.backend_kind.runs_engine))
        name, size = m.located.path.name, float(m.meta["gguf.file_size"])
        share = gpu_share(layers, m.meta.get(f"{arch}.block_count"))
    repacked = size if size and repacks and share < 1 else 0.0
    if repacked:
        notes.append("+ its AMX repacked copy in RAM")
    return Footprint(m.role, name, size, kv, share, ", ".join(notes), repacked)


def plan(profile: Profile, vram_gb: float | None = None, ram_gb: float | None = None,
         margin_gb: float = DEFAULT_MARGIN_GB, gpu: GpuMemory | GpuUnavailable | None = None) -> MemoryPlan:
    """``profile`` against the GPU that is there (``vram_gb`` overrides it), the build that would run it and the
    machine's RAM."""
    gpu = gpu_memory() if gpu is None else gpu
    if vram_gb is not None:
        vram, source = vram_gb * GB, f"{vram_gb:g} GB VRAM, as asked"
    elif isinstance(gpu, GpuMemory):
        vram = float(gpu.total - gpu.used)
        source = f"{vram / GB:.1f} GB free of the {gpu.name}'s {gpu.total / GB:.1f} GB (NVML)"
    else:
        vram, source = SEEDS_VRAM_GB * GB, f"no GPU seen ({gpu.reason}): the seeds' {SEEDS_VRAM_GB:g} GB VRAM"
    build = build_of(profile)
    pair = planned_models(profile)
    note = cpu_only_warning({m.role: profile.n_gpu_layers(m.role) for m in pair}, build, gpu) if build else ""
    ram = (ram_gb * GB) if ram_gb is not None else ram_bytes()
    repacks = keeps_repacked_copy(build)
    report = FitReport([footprint(m, profile, not note, repacks) for m in pair], vram, ram, margin_gb * GB)
    if not note:
        return MemoryPlan(pair, report, source, build, note, changes(report, profile))
    offloaded = FitReport([footprint(m, profile, True, False) for m in pair], vram, ram, margin_gb * GB)
    return MemoryPlan(pair, report, source, build, note, changes(offloaded, profile), offloaded)


def changes(report: FitReport, profile: Profile) -> list[str]:
    """What would make an over-full GPU plan fit, each with what it saves: a shorter context, a smaller cache type,
    a smaller draft (or none)."""
    over = -report.vram_left if report.uses_gpu else 0.0
    if over <= 0:
        return []
    kv = sum(m.kv or 0.0 for m in report.models if m.share > 0)
    out = [f"n_ctx {profile.n_ctx} → {profile.n_ctx // 2} saves {kv / 2 / GB:.1f} GB"]
    target = next((m for m in report.models if m.role == "target"), None)
    smaller = KV_BYTES_PER_ELEMENT["q8_0"] / KV_BYTES_PER_ELEMENT[profile.kv_cache]
    if target is not None and target.kv and smaller < 1:
        out.append(f"kv_cache \"q8_0\" saves {target.kv * (1 - smaller) * target.share / GB:.1f} GB")
    draft = next((m for m in report.models if m.role == "draft"), None)
    if draft is not None:
        out.append(f"a smaller draft, or method \"ngram\" without one, saves up to {draft.total * draft.share / GB:.1f}"
                   " GB")
    without = replace(report, models=[m for m in report.models if m.role != "draft"])
    if draft is not None and without.vram_left < 0:
        out.append(f"the target alone is {-without.vram_left / GB:.1f} GB over: lower n_gpu_layers or pick a smaller"
                   " quantization")
    return out
