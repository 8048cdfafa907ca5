"""From `pip install` to a GPU pair (issue #48): the build is read from llama.cpp itself, a profile asking for GPU
layers on a CPU-only build is told so with the fix in every front end, `profiles check`, the F2 picker and `doctor`
plan against the GPU that is there, and `server build` builds for it. NVML is faked only at its boundary (a pynvml
module on PYTHONPATH, tests/fake_nvml): this machine has a CUDA compiler but no NVIDIA driver or GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import llama_cpp
import pytest

from helpers import assert_one_clear_line, cli, noticed, on_cores, ready, run_repl, wait_until, SIZE
from gguf_fixtures import write_variant
from specchat.app.chat_app import make_app
from specchat.app.screens.modals import ProfileScreen
from specchat.backends import server_build
from specchat.backends.offload import backends_of, in_process_build
from specchat.profiles.plan import cpu_repacks_weights
from specchat.repl.shell import ReplSettings

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")

FAKE_NVML = str(Path(__file__).parents[1] / "fake_nvml")
RTX_12GB_3_USED = {"FAKE_NVML": "NVIDIA GeForce RTX 4070;12000000000;3000000000;560.35.03",
                   "PYTHONPATH": os.pathsep.join(filter(None, (FAKE_NVML, os.environ.get("PYTHONPATH"))))}
CPU_ONLY = "is built for the CPU only: every layer runs on the CPU"
needs_cpu_build = pytest.mark.skipif(llama_cpp.llama_supports_gpu_offload(),
                                     reason="this llama-cpp-python offloads: nothing to warn about")


@pytest.fixture
def gpu_profile(tmp_path) -> Path:
    """The embedded pair with every layer asked for the GPU, as the seeds' profiles ask."""
    text = (Path(__file__).parents[2] / "profiles" / "tiny.toml").read_text(encoding="utf-8")
    path = tmp_path / "gpu-tiny.toml"
    path.write_text(text.replace("n_gpu_layers = 0", "n_gpu_layers = -1"), encoding="utf-8")
    return path


def test_the_build_is_read_from_llama_cpp_itself():
    build = in_process_build()
    assert build.gpu_offload == llama_cpp.llama_supports_gpu_offload() and "CPU" in build.backends
    worked = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | AVX2 = 1 | "
    assert backends_of(worked) == ("CUDA", "CPU")  # llama_print_system_info of a CUDA build


@needs_cpu_build
def test_ask_and_profiles_check_name_the_cpu_only_build_and_its_fix(gpu_profile):
    asked = cli("ask", "--profile", str(gpu_profile), "--max-tokens", "4", "Hi")
    assert asked.returncode == 0 and CPU_ONLY in asked.stderr and "n_gpu_layers = 0" in asked.stderr
    checked = cli("profiles", "check", str(gpu_profile))
    assert CPU_ONLY in checked.stdout and "100%" not in checked.stdout  # never "on GPU" for layers on a CPU
    assert "GPU asked; CPU-only build" in checked.stdout and "needed in RAM" in checked.stdout
    with_gpu = cli("ask", "--profile", str(gpu_profile), "--max-tokens", "4", "Hi", env=RTX_12GB_3_USED)
    assert 'for the NVIDIA GeForce RTX 4070: CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall' in \
        with_gpu.stderr and f"llama-cpp-python=={llama_cpp.__version__}" in with_gpu.stderr


@needs_cpu_build
def test_the_repl_says_it_at_its_start(gpu_profile):
    _repl, _screen, text = run_repl(ReplSettings(profile=str(gpu_profile), color=False), "/quit\n")
    assert CPU_ONLY in text


@needs_cpu_build
async def test_the_app_says_it_in_a_notice_the_sidebar_and_the_picker(settings, gpu_profile):
    settings.profile = str(gpu_profile)
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await noticed(pilot, CPU_ONLY)
        await wait_until(pilot, lambda: "this llama.cpp is a CPU-only build" in " ".join(app.chat_view.sidebar.plain.split()))
        screen = ProfileScreen(None, "tiny")
        app.push_screen(screen)
        await wait_until(pilot, lambda: screen.plans)
        # 5.03 + 1.28 GB of weights, their KV caches and the 2 GB margin; an AMX CPU's repacked copy of the weights too
        in_ram = 8.3 + (5.03 + 1.28 if cpu_repacks_weights() else 0)
        assert screen.plans["qwen3-8b-1.7b"] == (f"CPU-only build: all in RAM, {in_ram:.1f} GB", True)
        assert screen.plans["tiny"][0].startswith("CPU: ") and not screen.plans["tiny"][1]


def qwen3_header(source: Path, folder: Path, name: str, size: int, **keys: int) -> Path:
    """A GGUF header with Qwen3's shape on SmolLM2's vocabulary, as big as the real file (sparse): the plan and the
    compatibility check read headers only."""
    path = write_variant(source, folder / name, header_only=True,
                         set_keys={f"llama.{key.replace('__', '.')}": value for key, value in keys.items()})
    os.truncate(path, size)
    return path


@needs_cpu_build
def test_with_a_12_gb_gpu_3_gb_used_the_plan_is_against_9_gb_free(target_path, tmp_path):
    models = tmp_path / "home" / ".lmstudio" / "models" / "Qwen"
    models.mkdir(parents=True)
    qwen3_header(target_path, models, "Qwen3-8B-Q4_K_M.gguf", 5_030_000_000, block_count=36,
                 embedding_length=4096, attention__head_count=32, attention__head_count_kv=8)
    qwen3_header(target_path, models, "Qwen3-1.7B-Q4_K_M.gguf", 1_280_000_000, block_count=28,
                 embedding_length=2048, attention__head_count=16, attention__head_count_kv=8)
    checked = cli("profiles", "check", "qwen3-8b-1.7b", env=RTX_12GB_3_USED)
    out = checked.stdout
    assert "9.0 GB free of the NVIDIA GeForce RTX 4070's 12.0 GB (NVML)" in out, out
    assert "✓ compatible" in out and CPU_ONLY in out and "-DGGML_CUDA=on" in out
    # 5.03 + 1.28 GB of weights, 0.32 + 0.47 GB of KV cache at 4096 (q8_0, f16), 2 GB margin: 9.1 GB of 9.0
    assert "with a GPU build: does not fit in 9 GB VRAM: 0.1 GB over" in out
    assert "n_ctx 4096 → 2048 saves 0.4 GB" in out and "a smaller draft" in out
    without_gpu = cli("profiles", "check", "qwen3-8b-1.7b").stdout
    assert "no GPU seen" in without_gpu and "the seeds' 12 GB VRAM" in without_gpu


def test_doctor_runs_here_and_on_a_gpu_it_only_pretends_to_have():
    here = cli("doctor")
    assert here.returncode == 0 and "Traceback" not in here.stderr
    out = here.stdout
    assert f"llama-cpp-python {llama_cpp.__version__} (in-process)" in out and "GPUs (NVML): none" in out
    assert "tiny: in-process" in out and "server-tiny: llama-server" in out and "models: " in out
    faked = cli("doctor", env=RTX_12GB_3_USED).stdout
    assert "GPU 0 (NVML): NVIDIA GeForce RTX 4070, driver 560.35.03, VRAM 12.0 GB, 9.0 GB free" in faked
    if not llama_cpp.llama_supports_gpu_offload():
        assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in faked


def test_server_build_chooses_the_gpu_that_is_there(monkeypatch, tmp_path):
    source, out = tmp_path / "llama.cpp", tmp_path / "build"
    assert server_build.cmake_configure(source, out, "cpu")[-1] == "-DBUILD_SHARED_LIBS=OFF"
    for backend, option in (("cuda", "-DGGML_CUDA=ON"), ("vulkan", "-DGGML_VULKAN=ON"), ("metal", "-DGGML_METAL=ON")):
        assert server_build.cmake_configure(source, out, backend)[-1] == option
    if server_build.nvcc():  # this machine: CUDA's compiler, no driver — a CUDA server could not start here
        backend, why = server_build.detected_backend()
        assert backend == "cpu" and "could not run here" in why
        monkeypatch.setenv("FAKE_NVML", RTX_12GB_3_USED["FAKE_NVML"])
        monkeypatch.syspath_prepend(FAKE_NVML)
        monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # the real one, if imported: the fake answers now
        assert server_build.detected_backend()[0] == "cuda"


def test_server_build_compiles_one_job_per_core_it_may_run_on():
    """In a container's cpuset or under taskset the build ran one job per core of the machine: two jobs on one core
    took as long as one, each holding its compiler's memory. The default is the cores this process may use."""
    everything = os.sched_getaffinity(0)
    with on_cores({min(everything)}):
        assert server_build.compile_jobs(None) == 1
    assert server_build.compile_jobs(None) == len(everything) and server_build.compile_jobs(3) == 3


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_server_build_refuses_an_impossible_job_count_in_one_line(jobs):
    """``--jobs 0`` built with every core as if unasked; a negative count reached cmake after the download."""
    refused = cli("server", "build", "--force", "--jobs", jobs, env={"PIP_NO_INDEX": "1"})
    assert refused.returncode == 2
    assert_one_clear_line(refused, f"--jobs must be ≥ 1, got {jobs}")


def test_server_which_says_what_the_binary_offloads_to(llama_server):
    shown = cli("server", "which", env={server_build.ENV: str(llama_server)})
    assert shown.returncode == 0 and str(llama_server) in shown.stdout
    assert "CPU only (no GPU offload)" in shown.stdout or "devices:" in shown.stdout
