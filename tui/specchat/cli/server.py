"""``specchat server build``: llama.cpp's server, built from the same sources as the in-process engine."""

from __future__ import annotations

import argparse
import os


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("server", help="llama.cpp's server for profiles with [backend] kind = \"llama-server\"")
    verbs = parser.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser("build", help="build llama-server from the pinned llama-cpp-python's llama.cpp (~6 min)")
    build.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="compile jobs (default: one per core)")
    build.add_argument("--force", action="store_true", help="build again even when the pinned version is built")
    verbs.add_parser("which", help="the llama-server binary specchat would run")


def run(args: argparse.Namespace) -> int:
    from ..backends.server_build import TARGETS, build, built_dir, find_server

    if args.verb == "build":
        if not args.force and all((built_dir() / target).is_file() for target in TARGETS):
            print(f"llama-server, llama-bench and llama-speculative-simple are built already in {built_dir()}"
                  " — `specchat server build --force` builds them again")
            return 0
        folder = build(jobs=args.jobs)
        print(f"built llama-server, llama-bench and llama-speculative-simple into {folder}")
    else:
        print(find_server())
    return 0
