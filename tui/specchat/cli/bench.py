"""``specchat bench``: alternate runs with and without speculation on a mixed task suite, then peers on the same tasks."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from .. import paths
from ..bench import categories as by_category
from ..bench import report as reporting
from ..bench.progress import Progress
from ..bench.saved_chats import save_as_chats
from ..bench.peers import BenchRunner, Peer, PeerContext, parse_peers, peers
from ..bench.runners import PeerError, RunResult, specchat_runners
from ..bench.tasks import Task
from ..chats.recall import learn_stored_chats
from ..errors import ConfigError, SpecchatError
from ..profiles import load_profile, run_config
from ..bench.selection import add_task_options, chosen_tasks
from .options import add_profile_option

def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="A/B benchmark: the same tasks with and without speculation, and peers")
    add_profile_option(parser)
    add_task_options(parser)
    parser.add_argument("--repeat", type=int, default=3, help="measured repetitions per task and runner (default 3)")
    parser.add_argument("--json", type=Path, dest="json_out", help="write every raw figure to this JSON file")
    parser.add_argument("--plot", type=Path, help="write a plot of tok/s and acceptance (.png or .svg)")
    parser.add_argument(
        "--warm", action="store_true",
        help="runs remember earlier runs, the same task's included (specchat's n-gram drafter, llama-server's ngram-mod "
        "map across requests), as when asking again or regenerating; by default every run is a first answer — "
        "specchat's n-gram drafter knows only the task's conversation and llama-server restarts before each run",
    )
    # ("--memory cold|warm" before "memory" meant only memory: still read)
    parser.add_argument("--memory", choices=("cold", "warm"), default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--save-chats", action="store_true",
        help="keep each question's replies in your chats store, as a chat of its own ('bench: NAME'), for --stored-chats "
        "runs, the app, the REPL and ask to draft from",
    )
    parser.add_argument(
        "--stored-chats", "--history", dest="stored_chats", action="store_true",
        help="draft from your stored chats (earlier --save-chats runs among them) as the app does; llama-server is "
        "given the same: its ngram-cache type (added) lookup caches written from them, and every type keeps what it "
        "learns across requests, so a question's warm-up run is its earlier run",
    )
    parser.add_argument("--peers", default="",
                        help=f"comma-separated: {', '.join(peer.help for peer in peers().values())}, or all")
    for peer in peers().values():
        if peer.add_arguments is not None:
            peer.add_arguments(parser)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _checked_peers(args: argparse.Namespace) -> list[tuple[Peer, str | None]]:
    """The peers asked for, once the options are known to make sense together (each peer checks its own)."""
    if args.repeat < 1:
        raise ConfigError(f"--repeat must be ≥ 1, got {args.repeat}")
    if args.plot and args.plot.suffix.lower() not in (".png", ".svg"):
        raise ConfigError(f"--plot must end in .png or .svg, got {args.plot.name}")
    chosen = parse_peers(args.peers)
    for peer in peers().values():
        if peer.check is not None:
            peer.check(args, any(p is peer for p, _ in chosen))
    return chosen


def run(args: argparse.Namespace) -> int:
    chosen = _checked_peers(args)
    profile = load_profile(args.profile)
    # Measured at the profile's thread count, as the peers are: a run that adapts to a busy machine compares unequal runs.
    config = dataclasses.replace(run_config(profile), adapt_threads=False)
    tasks, problems = chosen_tasks(args, _progress)  # (its problems already said)
    errors = list(problems)
    if not tasks:
        raise ConfigError("no valid task to run — fix the task file")

    warm = args.warm or args.memory == "warm"
    plain, spec = specchat_runners(config, warm=warm)
    runners: list[BenchRunner] = [plain, spec]
    rivals: list[str] = []
    target_id = plain.backend.target_id
    try:
        if args.stored_chats:
            _learn_stored_chats(plain, errors)
        context = PeerContext(config, warm, args.stored_chats, args, lambda runner: _learn_stored_chats(runner, errors),
                              errors.append)
        _open_peers(chosen, context, runners, rivals)
        runs = _alternate(runners, tasks, args.repeat, errors, Progress.for_stream(sys.stderr))
    finally:
        for runner in runners:
            runner.close()
    report = reporting.build_report(
        runs,
        profile={"name": profile.name, "method": config.spec.method, "n_max": config.spec.n_max,
                 "p_min": config.spec.p_min, "n_ctx": config.n_ctx, "threads": config.target.threads,
                 "target": str(config.target.path), "draft": str(config.draft.path) if config.draft else None,
                 "backend": config.backend.kind, "temperature": config.sampling.temperature},
        settings={"repeat": args.repeat, "tasks": str(args.tasks) if args.tasks else args.suite or "bundled",
                  "peers": [p.name for p, _ in chosen], "warm": warm, "per": args.per, "seed": args.seed,
                  "questions": [t.name for t in tasks], "max_tokens": args.max_tokens, "stored_chats": args.stored_chats,
                  "save_chats": args.save_chats, "llama_server_warm": warm or args.stored_chats},
        errors=errors, greedy=config.sampling.greedy, copy_heavy={t.name for t in tasks if t.copy_heavy},
        spec_runner=spec.name(), categories={t.name: t.category for t in tasks if t.category},
        own=[plain.name(), spec.name()], rivals=rivals,
    )
    _print_and_write(report, errors, args)
    # Last: the report and its files are out whatever happens to the chats store.
    saved = not args.save_chats or _save_chats(tasks, runs, profile.name, config.system_prompt, target_id)
    return 1 if report["output_changed"] or not saved else 0


def _print_and_write(report: dict[str, Any], errors: list[str], args: argparse.Namespace) -> None:
    """The report on stdout, then in the files asked for."""
    print(reporting.table(report))
    for line in errors:
        print(f"note: {line}")
    print(reporting.goals(report))
    if report["categories"]:
        report["by_category"] = by_category.by_category(report)
        print(by_category.table(report["by_category"]))
        print(by_category.verdicts(report, report["spec_runner"]))
    if report["output_changed"]:
        print(f"OUTPUT CHANGED with speculation on: {', '.join(report['output_changed'])}")
    try:
        if args.json_out:
            reporting.write_json(report, args.json_out)
        if args.plot:
            reporting.plot(report, args.plot)
    except OSError as exc:
        raise SpecchatError(f"cannot write the report: {exc}") from None


def _save_chats(tasks: list[Task], runs: list[RunResult], profile: str, system_prompt: str | None,
                target_id: str) -> bool:
    """``--save-chats``: the replies kept as chats; whether they were (a store that cannot take them is one line)."""
    db = paths.chats_db()
    try:
        saved = save_as_chats(db, tasks, runs, profile=profile, system_prompt=system_prompt, target_id=target_id,
                              on_wait=_progress)
    except SpecchatError as exc:
        print(f"specchat: the replies were not saved as chats: {exc}", file=sys.stderr)
        return False
    _progress(f"saved {saved} chats to {db} (titles 'bench: …'; `specchat chats` lists them)")
    return True


def _learn_stored_chats(runner: BenchRunner, errors: list[str]) -> None:
    """The stored chats given to a runner's backend (waiting until they are indexed); why not, as a line."""
    try:
        problem = learn_stored_chats(runner.backend, paths.chats_db(), _progress)
    except SpecchatError as exc:  # a server that would not start again with them, say
        problem = f"earlier chats are not drafted from: {exc}"
    if problem:
        errors.append(f"{runner.name()}: {problem}")
        _progress(problem)


def _open_peers(chosen: list[tuple[Peer, str | None]], context: PeerContext, runners: list[BenchRunner],
                rivals: list[str]) -> None:
    """Every peer asked for, each runner appended to ``runners`` as it opens (the caller closes them, whatever
    happens); one that cannot start is one line of the report, and the rest goes on."""
    for peer, value in chosen:
        for opened in peer.open(context, value):
            if isinstance(opened, PeerError):
                context.note(str(opened))
                _progress(f"peer skipped: {opened}")
                continue
            runners.append(opened)
            if peer.rival:
                rivals.append(opened.name())


def _alternate(runners: list[BenchRunner], tasks: list[Task], repeat: int, errors: list[str],
               progress: Progress) -> list[RunResult]:
    """Every runner on every task, one after the other within each repetition, in an order rotated each time: a slow
    drift of a shared machine then falls on all of them alike (the warm-up, repetition -1, is kept but not summarised).
    A runner that fails a task (a prompt too long for the context, say) is one line and goes on with the next task."""
    runs: list[RunResult] = []
    progress.start(len(tasks) * (repeat + 1) * len(runners))
    for i, task in enumerate(tasks, start=1):
        progress.line(f"[{i}/{len(tasks)}] {task.name} — {task.kind or 'task'}")
        failed: set[str] = set()
        for rep in range(-1, repeat):
            shift = (rep + 1) % len(runners)
            for runner in runners[shift:] + runners[:shift]:
                if runner.name() in failed:
                    progress.skip()
                    continue
                progress.step(f"{task.name}: {runner.name()} {'warm-up' if rep < 0 else f'run {rep + 1}/{repeat}'}")
                try:
                    runs.append(runner.run(task, rep))
                except PeerError as exc:
                    errors.append(str(exc))
                    failed.add(runner.name())
                    progress.line(f"failed: {exc}")
    progress.done()
    return runs
