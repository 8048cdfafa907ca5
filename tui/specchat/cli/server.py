"""``specchat server build`` and ``which``: llama.cpp's server, built from the same sources as the in-process engine,
for the GPU that is there."""

from __future__ import annotations

import argparse

BACKEND_CHOICES = ("auto", "cpu", "cuda", "vulkan", "metal")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("server", help="llama.cpp's server for profiles with [backend] kind = \"llama-server\"")
    verbs = parser.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser("build", help="build llama-server from the pinned llama-cpp-python's llama.cpp (~6 min)")
    build.add_argument("--jobs", type=int, help="compile jobs (default: one per core this process may run on)")
    build.add_argument("--force", action="store_true", help="build again even when the pinned version is built")
    build.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                       help="what to offload to (default auto: CUDA where nvcc and an NVIDIA driver are, Vulkan"
                            " where glslc and its headers are, Metal on macOS, else the CPU)")
    verbs.add_parser("which", help="the llama-server binary specchat would run, and what it offloads to")


def run(args: argparse.Namespace) -> int:
    from ..backends.server_build import TARGETS, build, built_backend, built_dir, compile_jobs, detected_backend, \
        find_server, server_build_info

    if args.verb == "which":
        binary = find_server()
        print(binary)
        print(server_build_info(binary).described)
        return 0
    jobs = compile_jobs(args.jobs)  # an impossible count is refused before anything is downloaded
    backend, why = detected_backend() if args.backend == "auto" else (args.backend, "asked for")
    have = built_backend() or "cpu"  # builds before the record were all for the CPU
    if not args.force and have == backend and all((built_dir() / target).is_file() for target in TARGETS):
        print(f"llama-server, llama-bench and llama-speculative-simple are built for {backend} already in"
              f" {built_dir()} — `specchat server build --force` builds them again")
        return 0
    print(f"building for {backend}: {why}")
    folder = build(jobs=jobs, backend=backend)
    print(f"built llama-server, llama-bench and llama-speculative-simple for {backend} into {folder}")
    return 0
