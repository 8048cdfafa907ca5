"""Which tasks a benchmark runs — the bundled suite, a task file, Spec-Bench's questions drawn per category — as
`specchat bench` and the benchmarks/ scripts ask for them, with the same options and the same draw."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError
from .spec_bench import MAX_TOKENS, Selection, is_jsonl, read_questions, select, suite_path
from .tasks import Task, load_tasks


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """Which tasks run: the bundled suite, a task file, or Spec-Bench's questions (`specchat bench` and the benchmarks/
    scripts read the same options)."""
    parser.add_argument("--tasks", type=Path,
                        help="a TOML file of [[task]] tables, or a .jsonl file in Spec-Bench's question format "
                        "(default: the bundled suite)")
    parser.add_argument("--suite", choices=("bundled", "spec-bench"), default=None,
                        help="spec-bench: Spec-Bench's 480 questions in 13 categories (vendored); bundled: specchat's own tasks")
    parser.add_argument("--per", type=int, help="Spec-Bench questions: this many per category, drawn with --seed")
    parser.add_argument("--seed", type=int, default=0, help="the draw of --per (default 0)")
    parser.add_argument("--questions", help="Spec-Bench questions: these question ids, comma-separated")
    parser.add_argument("--categories", help="Spec-Bench questions: only these categories, comma-separated")
    parser.add_argument("--max-tokens", type=int, help=f"tokens per reply (Spec-Bench's own: {MAX_TOKENS}; "
                        "default: each task's own, Spec-Bench questions 1024)")


def chosen_tasks(args: argparse.Namespace, say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                 ) -> tuple[list[Task], list[str]]:
    """The tasks asked for: the bundled suite, a TOML task file, Spec-Bench's questions or a file in their format
    (each problem with the file ``say``-ed as it is met)."""
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be ≥ 1, got {args.max_tokens}")
    if args.suite and args.tasks:
        raise ConfigError("give --suite or --tasks, not both")
    questions = args.suite == "spec-bench" or (args.tasks is not None and is_jsonl(args.tasks))
    choosing = args.per is not None or args.questions is not None or args.categories is not None
    if choosing and not questions:
        raise ConfigError("--per, --questions and --categories choose Spec-Bench questions — add --suite spec-bench "
                          "or --tasks FILE.jsonl")
    if not questions:
        tasks, problems = load_tasks(args.tasks)
        for problem in problems:
            say(problem)
        if args.max_tokens is not None:
            tasks = [dataclasses.replace(t, max_tokens=args.max_tokens) for t in tasks]
        return tasks, problems
    selection = Selection(per=args.per, seed=args.seed, categories=listed(args.categories, "--categories"),
                          questions=listed(args.questions, "--questions"))
    tasks, problems = read_questions(args.tasks or suite_path(), max_tokens=args.max_tokens or MAX_TOKENS)
    for problem in problems:  # before a choice that fails: a question asked for may be among the lines skipped
        say(problem)
    return select(tasks, selection), problems


def listed(text: str | None, flag: str) -> tuple[str, ...]:
    """A comma-separated option's items (none when it was not given); given but empty is one line naming it."""
    if text is None:
        return ()
    items = tuple(filter(None, (part.strip() for part in text.split(","))))
    if not items:
        raise ConfigError(f"{flag} is empty — name one or more, separated by commas, or leave {flag} out for all")
    return items
