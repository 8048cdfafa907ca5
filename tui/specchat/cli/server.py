"""``specchat server build``: llama.cpp's server, built from the same sources as the in-process engine."""

from __future__ import annotations

import argparse
import os


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("server", help="llama.cpp's server for profiles with [backend] kind = \"llama-server\"")
    verbs = parser.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser("build", help="build llama-server from the pinned llama-cpp-python's llama.cpp (~6 min)")
    build.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="compile jobs (default: one per core)")
    verbs.add_parser("which", help="the llama-server binary specchat would run")


def run(args: argparse.Namespace) -> int:
    from ..backends.server_build import build, find_server

    if args.verb == "build":
        folder = build(jobs=args.jobs)
        print(f"built llama-server, llama-bench and llama-speculative-simple into {folder}")
    else:
        print(find_server())
    return 0
