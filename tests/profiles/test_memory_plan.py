"""The memory plan against llama.cpp itself (issue #48): the KV cache and model buffers llama.cpp logs as it loads
both bundled models — SmolLM2-135M and Gemma 3 270M, whose sliding-window layers cache differently in-process and in
llama-server — at three context sizes and every cache type a profile may name, against what ``profiles.fit`` plans
from the GGUF header alone."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from specchat.backends.offload import in_process_build
from specchat.profiles import load_profile
from specchat.engine.machine import system_info
from specchat.profiles.plan import keeps_repacked_copy
from specchat.engine.gguf_header import read_metadata
from specchat.profiles.fit import KV_BYTES_PER_ELEMENT, kv_cache_bytes

MIB = 1024 * 1024
CONTEXTS = (512, 1000, 4096)  # 1000: llama.cpp rounds the cells up to 1024
TOLERANCE = 0.05
# Where llama.cpp keeps an AMX-repacked copy beside the mapped file, the plan counts the file's size again: a bound
# that may overshoot by what AMX leaves unpacked (Gemma 3's Q5_0 tensors: 7.5 %), never undershoot by more than 5 %.
REPACKED_OVERSHOOT = 0.10

LOADS = """
import sys
from pathlib import Path
from specchat.engine import llama
from specchat.engine.llama import Context, Model, log_lines_to
if sys.argv[4] == "repacked":  # the extra buffer types on, where the probe turned them off: a load runs no AMX
    llama.extra_buffers_work = lambda: True
with log_lines_to(lambda line: print(line, end="", file=sys.stderr)):
    for n_ctx in map(int, sys.argv[2].split(",")):
        for kv in sys.argv[3].split(","):
            print(f"=== {n_ctx} {kv}", file=sys.stderr, flush=True)
            model = Model(Path(sys.argv[1]))
            Context(model, n_ctx=n_ctx, threads=1, kv_cache=kv).close()
            model.close()
"""


def logged(text: str) -> tuple[float, float]:
    """The model buffers and the KV cache one load logged, in MiB (a sliding-window model logs two caches; an AMX CPU
    an "AMX model buffer" beside the mapped file)."""
    model = sum(float(m) for m in re.findall(r"model buffer size =\s+([\d.]+) MiB", text))
    kv = sum(float(m) for m in re.findall(r"KV buffer size =\s+([\d.]+) MiB", text))
    return model, kv


def in_process_loads(path, contexts=CONTEXTS, kv_types=tuple(KV_BYTES_PER_ELEMENT), weights="as the engine loads"
                     ) -> dict[tuple[int, str], tuple[float, float]]:
    """What the engine's own loader makes llama.cpp allocate for ``path``, each context size with each cache type."""
    result = subprocess.run([sys.executable, "-c", LOADS, str(path), ",".join(map(str, contexts)), ",".join(kv_types),
                             weights], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    loads = {}
    for block in result.stderr.split("=== ")[1:]:
        n_ctx, kv = block.split(None, 2)[:2]
        loads[int(n_ctx), kv] = logged(block)
    return loads


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_the_plan_is_within_five_percent_of_what_llama_cpp_allocates(model, target_path, gemma_path):
    path = target_path if model == "smollm2" else gemma_path
    meta = read_metadata(path)
    loads = in_process_loads(path)
    repacks = keeps_repacked_copy(in_process_build())  # the plan's own gate, in-process
    assert len(loads) == len(CONTEXTS) * len(KV_BYTES_PER_ELEMENT)
    for (n_ctx, kv), (model_mib, kv_mib) in loads.items():
        planned_kv = kv_cache_bytes(meta, n_ctx, kv) / MIB  # in-process: every cell of a sliding layer too
        assert kv_mib > 0 and abs(planned_kv / kv_mib - 1) <= TOLERANCE, (n_ctx, kv, planned_kv, kv_mib)
        planned_weights = meta["gguf.file_size"] / MIB * (2 if repacks else 1)
        over = REPACKED_OVERSHOOT if repacks else TOLERANCE
        assert -TOLERANCE <= planned_weights / model_mib - 1 <= over, (planned_weights, model_mib)


@pytest.mark.skipif("AMX_INT8 = 1" not in system_info() or in_process_build().gpu_offload,
                    reason="no AMX kernels in this llama.cpp, or a GPU build (its host buffers are not repacked)")
def test_an_amx_cpu_s_repacked_copy_is_planned_as_the_file_again(target_path, gemma_path):
    """Where AMX runs, the engine loads with llama.cpp's extra buffer types and the plan counts the file twice
    (profiles/fit.py); checked here even where the probe turned them off, since a load runs no AMX instruction."""
    for path in (target_path, gemma_path):
        size = read_metadata(path)["gguf.file_size"] / MIB
        [(model_mib, _kv)] = in_process_loads(path, CONTEXTS[:1], ("f16",), "repacked").values()
        assert -TOLERANCE <= 2 * size / model_mib - 1 <= REPACKED_OVERSHOOT, (path.name, 2 * size, model_mib)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_kv(binary, path, n_ctx: int) -> float:
    """The KV cache a llama-server logs for ``n_ctx`` (its sliding-window layers hold their window and a batch)."""
    process = subprocess.Popen([str(binary), "-m", str(path), "-c", str(n_ctx), "-ub", "512", "-b", "512", "-np", "1",
                                "-t", "1", "--port", str(free_port()), "--host", "127.0.0.1", "--no-webui", "-lv", "4"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        for line in process.stderr:  # (-lv 4: the buffer sizes are logged at a verbosity the server hides by default)
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        process.kill()
        process.wait()
    return logged("".join(lines))[1]


def test_llama_server_caches_a_sliding_window_only_and_the_plan_knows(llama_server, gemma_path):
    meta = read_metadata(gemma_path)
    for n_ctx in CONTEXTS:
        seen = server_kv(llama_server, gemma_path, n_ctx)
        planned = kv_cache_bytes(meta, n_ctx, "f16", swa_full=False) / MIB
        assert seen > 0 and abs(planned / seen - 1) <= TOLERANCE, (n_ctx, planned, seen)
    assert kv_cache_bytes(meta, 4096, swa_full=False) < 0.4 * kv_cache_bytes(meta, 4096)  # 27 MiB against 72


def test_a_header_is_read_once_per_version_of_the_file(tmp_path, target_path, monkeypatch):
    """A start and the F2 picker ask for the same headers again and again: a header already read is not parsed again
    (one dict for every hard link to the file), and a file written since is — its mtime put back too; one written
    within the racy window is read again each time."""
    import os
    import shutil

    from gguf_fixtures import write_variant
    from specchat.engine import file_version

    path, link = tmp_path / "model.gguf", tmp_path / "link.gguf"
    shutil.copy(target_path, path)
    os.link(path, link)
    monkeypatch.setattr(file_version, "RACY_S", -1.0)  # as if written long before it is read
    first = read_metadata(path)
    assert read_metadata(path) is first and read_metadata(link) is first
    assert first["general.name"] == read_metadata(target_path)["general.name"]
    stat = path.stat()
    with path.open("r+b") as fh:  # rewritten in place with its old mtime put back (cp -p, touch -r): ctime tells
        fh.seek(stat.st_size - 1)
        fh.write(b"\1")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_metadata(path) is not first
    write_variant(target_path, tmp_path / "renamed.gguf", set_keys={"general.name": "another model"})
    (tmp_path / "renamed.gguf").replace(path)
    assert read_metadata(path)["general.name"] == "another model"
    monkeypatch.setattr(file_version, "RACY_S", 3600.0)
    fresh = read_metadata(path)
    assert read_metadata(path) is not fresh and read_metadata(path) == fresh


def test_a_draft_pair_is_judged_once_per_version_of_both_files(tmp_path, target_path, draft_path, monkeypatch):
    """Every load of the pair, and every F2 listing of drafts, asks whether it is compatible: llama.cpp's two
    vocabulary-only loads run once per version of the two files."""
    import shutil

    from specchat.engine import compat, file_version

    loads: list[str] = []
    read_vocab = compat.read_vocab
    monkeypatch.setattr(compat, "read_vocab", lambda path, role: loads.append(role) or read_vocab(path, role))
    monkeypatch.setattr(file_version, "RACY_S", -1.0)
    target = tmp_path / "target.gguf"
    shutil.copy(target_path, target)
    assert compat.check_pair(target, draft_path) == [] and compat.check_pair(target, draft_path) == []
    assert loads == ["target", "draft"]
    with target.open("r+b") as fh:  # written in place: a new version of the target
        fh.seek(0, 2)
        fh.write(b"\0")
    compat.check_pair(target, draft_path)
    assert loads == ["target", "draft"] * 2
