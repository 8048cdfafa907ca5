"""``specchat bench``: alternate runs with and without speculation on a mixed task suite, then peers on the same tasks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..bench import report as reporting
from ..bench.runners import LLAMA_SERVER_TYPES, LlamaCppPythonRunner, LlamaServerRunner, PeerError, RunResult, SpecchatRunner
from ..bench.tasks import Task, load_tasks
from ..errors import ConfigError, SpecchatError
from ..profiles import engine_config, load_profile
from .options import add_profile_option

PEERS = ("llama-cpp-python", "lookup", "llama-server")
LOOKUP_TOKENS = 10  # LlamaPromptLookupDecoding's own default


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="A/B benchmark: the same tasks with and without speculation, and peers")
    add_profile_option(parser)
    parser.add_argument("--tasks", type=Path, help="a TOML file of [[task]] tables (default: the bundled suite)")
    parser.add_argument("--repeat", type=int, default=3, help="measured repetitions per task and runner (default 3)")
    parser.add_argument("--json", type=Path, dest="json_out", help="write every raw figure to this JSON file")
    parser.add_argument("--plot", type=Path, help="write a plot of tok/s and acceptance (.png or .svg)")
    parser.add_argument(
        "--memory", choices=("cold", "warm"), default="cold",
        help="cold (default): every run is a first answer — specchat's n-gram drafter knows only the task's "
        "conversation and llama-server restarts before each run; warm: both remember earlier runs, the same task's "
        "included (llama-server's ngram-mod keeps its map across requests), as when asking again or regenerating",
    )
    parser.add_argument(
        "--peers", default="",
        help="comma-separated: llama-cpp-python, lookup (llama-cpp-python prompt lookup), llama-server[=PATH] "
        f"(runs --spec-type {', '.join(LLAMA_SERVER_TYPES)}), or all",
    )


def _parse_peers(text: str) -> list[tuple[str, str | None]]:
    chosen: list[tuple[str, str | None]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name == "all":
            chosen += [(peer, None) for peer in PEERS]
        elif name in PEERS:
            chosen.append((name, value or None))
        else:
            raise ConfigError(f"unknown peer {name!r} — choose from {', '.join(PEERS)} or all")
    # A peer named twice (e.g. "all,llama-server=PATH") runs once, with the path it was given.
    merged: dict[str, str | None] = {}
    for name, value in chosen:
        merged[name] = value or merged.get(name)
    return list(merged.items())


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def _opened(factory: Callable[[], Any], errors: list[str]) -> Iterator[Any]:
    """Open a peer; a failure becomes one reported line and the peer is skipped."""
    try:
        runner = factory()
    except PeerError as exc:
        errors.append(str(exc))
        _progress(f"peer skipped: {exc}")
        yield None
        return
    try:
        yield runner
    finally:
        runner.close()


def _repeat(label: str, task: Task, repeat: int, one_run: Callable[[int], RunResult], errors: list[str]) -> list[RunResult]:
    results = []
    try:
        for rep in range(-1, repeat):  # rep -1 is the warm-up, kept in the raw data but excluded from summaries
            _progress(f"  {task.name}: {label} {'warm-up' if rep < 0 else f'run {rep + 1}/{repeat}'}")
            results.append(one_run(rep))
    except PeerError as exc:
        errors.append(str(exc))
        _progress(f"peer failed: {exc}")
    return results


def run(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise ConfigError(f"--repeat must be ≥ 1, got {args.repeat}")
    if args.plot and args.plot.suffix.lower() not in (".png", ".svg"):
        raise ConfigError(f"--plot must end in .png or .svg, got {args.plot.name}")
    peers = _parse_peers(args.peers)
    profile = load_profile(args.profile)
    config = engine_config(profile)
    tasks, problems = load_tasks(args.tasks)
    errors = list(problems)
    for problem in problems:
        _progress(problem)
    if not tasks:
        raise ConfigError("no valid task to run — fix the task file")

    runs: list[RunResult] = []
    warm = args.memory == "warm"
    specchat = SpecchatRunner(config, warm=warm)
    try:
        for i, task in enumerate(tasks, start=1):
            _progress(f"[{i}/{len(tasks)}] {task.name} — {task.kind or 'task'}")
            for rep in range(-1, args.repeat):
                # Alternate which mode goes first, so slow drifts of a shared machine hit both equally.
                for mode in ("spec", "none") if rep % 2 else ("none", "spec"):
                    _progress(f"  {task.name}: {specchat.name(mode)} {'warm-up' if rep < 0 else f'run {rep + 1}/{args.repeat}'}")
                    runs.append(specchat.run(task, mode, rep))
        prompts = {task.name: specchat.prompt_text(task) for task in tasks}
        histories = {task.name: specchat.messages_for(task) for task in tasks}
    finally:
        specchat.close()

    draft_path = config.draft.path if config.draft is not None else None
    n_max = config.spec.n_max if isinstance(config.spec.n_max, int) else 4
    for peer, value in peers:
        if peer == "llama-server":
            binary = value or "llama-server"
            for spec_type in LLAMA_SERVER_TYPES:
                if spec_type == "draft-simple" and draft_path is None:
                    errors.append("llama-server draft-simple skipped: the profile has no draft model")
                    continue
                def factory(spec_type: str = spec_type, binary: str = binary) -> LlamaServerRunner:
                    return LlamaServerRunner(binary, spec_type, config, draft_path, n_max, warm=warm)

                with _opened(factory, errors) as server:
                    if server is None:
                        break  # a binary that is missing or cannot start fails every type alike: one line is enough
                    for task in tasks:
                        runs += _repeat(server.name(), task, args.repeat, lambda rep, t=task: server.run(t, rep, prompts[t.name]), errors)
        else:
            lookup = LOOKUP_TOKENS if peer == "lookup" else None
            with _opened(lambda n=lookup: LlamaCppPythonRunner(config, lookup_tokens=n), errors) as runner:
                if runner is not None:
                    for task in tasks:
                        runs += _repeat(runner.name(), task, args.repeat, lambda rep, t=task: runner.run(t, rep, histories[t.name]), errors)

    report = reporting.build_report(
        runs,
        profile={"name": profile.name, "method": config.spec.method, "n_max": config.spec.n_max,
                 "p_min": config.spec.p_min, "n_ctx": config.n_ctx, "threads": config.target.threads,
                 "target": str(config.target.path), "draft": str(draft_path) if draft_path else None,
                 "temperature": config.sampling.temperature},
        settings={"repeat": args.repeat, "tasks": str(args.tasks) if args.tasks else "bundled",
                  "peers": [p for p, _ in peers], "memory": args.memory},
        errors=errors, greedy=config.sampling.greedy,
    )
    print(reporting.table(report))
    for line in errors:
        print(f"note: {line}")
    if report["output_changed"]:
        print(f"OUTPUT CHANGED with speculation on: {', '.join(report['output_changed'])}")
    try:
        if args.json_out:
            reporting.write_json(report, args.json_out)
        if args.plot:
            reporting.plot(report, args.plot)
    except OSError as exc:
        raise SpecchatError(f"cannot write the report: {exc}") from None
    return 1 if report["output_changed"] else 0
