"""Spec-Bench's question file (hemingkx/Spec-Bench, ``data/spec_bench/question.jsonl``) as benchmark tasks.

Each line is a JSON object with ``question_id``, ``category`` and ``turns`` (one or two user turns; MT-bench's
questions have two). A malformed line is one line in the report and the rest is read; choosing questions that do not
exist (an unknown category, ``--per`` larger than a category, an unknown id) is a ``ConfigError`` naming the option.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .tasks import Task

# Spec-Bench's own order: MT-bench's eight categories, then its five of 80 questions each.
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
              "translation", "summarization", "qa", "math_reasoning", "rag")
# Where the reply repeats given text: Spec-Bench's prompt lookup gains most there (2.46× on summarization).
COPY_HEAVY = frozenset({"summarization", "rag", "extraction"})
MAX_TOKENS = 1024  # Spec-Bench's max_new_tokens
SHOWN_REASONS = 5  # lines named when none could be read


def is_jsonl(path: Path) -> bool:
    return path.suffix.lower() == ".jsonl"


def _question(number: int, line: str, label: str, max_tokens: int) -> Task:
    where = f"{label}:{number}"
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not a JSON object ({exc.msg}) — each line is one question") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: not a JSON object — each line is one question")
    turns = raw.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ConfigError(f"{where}: 'turns' is {_shown(turns)} — it must be a list of one or more questions")
    for i, turn in enumerate(turns, start=1):
        if not isinstance(turn, str) or not turn.strip():
            raise ConfigError(f"{where}: turn {i} is {_shown(turn)} — each turn is a question's text")
    category = raw.get("category")
    if not isinstance(category, str) or not category.strip():
        raise ConfigError(f"{where}: 'category' is {_shown(category)} — it must be a category's name")
    qid = raw.get("question_id", number)
    if isinstance(qid, bool) or not isinstance(qid, int | str) or isinstance(qid, str) and not qid.strip():
        raise ConfigError(f"{where}: 'question_id' is {_shown(qid)} — it must be a whole number or a string")
    return Task(name=f"{category}-{qid}", prompt=turns[0], kind=category, max_tokens=max_tokens,
                copy_heavy=category in COPY_HEAVY, category=category, follow_ups=tuple(turns[1:]),
                question_id=str(qid))


def _shown(value: object) -> str:
    """A JSON value as a line names it: missing, empty, or itself (cut short)."""
    if value is None:
        return "missing"
    if value in ("", []) or isinstance(value, str) and not value.strip():
        return "empty"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:39] + "…"


def read_questions(path: Path, *, max_tokens: int = MAX_TOKENS) -> tuple[list[Task], list[str]]:
    """Every well-formed question of ``path`` and one line per line that was skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"question file not found: {path} — give Spec-Bench's question.jsonl, or --suite spec-bench") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read question file {path}: {exc}") from None
    tasks, problems = [], []
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            task = _question(number, line, str(path), max_tokens)
        except ConfigError as exc:
            problems.append(f"skipped: {exc}")
            continue
        if task.question_id in first_line:  # two rows of one question would be summarised as one
            problems.append(f"skipped: {path}:{number}: question_id {task.question_id} is already at line"
                            f" {first_line[task.question_id]}")
            continue
        first_line[task.question_id] = number
        tasks.append(task)
    if not tasks:
        reasons = [problem.removeprefix("skipped: ").removeprefix(f"{path}:") for problem in problems]
        listed = "; ".join(f"line {reason}" for reason in reasons[:SHOWN_REASONS])
        more = f"; and {len(reasons) - SHOWN_REASONS} more" if len(reasons) > SHOWN_REASONS else ""
        raise ConfigError(f"{path}: no question could be read ({listed or 'the file is empty'}{more}) — each line is"
                          " a JSON object with 'question_id', 'category' and 'turns'")
    return tasks, problems


@dataclass(frozen=True)
class Selection:
    """Which questions run: ``per`` drawn from each category with ``seed``, or the ids in ``questions``."""

    per: int | None = None
    seed: int = 0
    categories: tuple[str, ...] = ()
    questions: tuple[str, ...] = ()


def select(tasks: list[Task], selection: Selection) -> list[Task]:
    by_category: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_category[task.category].append(task)
    for category in selection.categories:
        if category not in by_category:
            raise ConfigError(f"--categories: unknown category {category!r} — choose from {', '.join(by_category)}")
    chosen = [t for t in tasks if not selection.categories or t.category in selection.categories]
    if selection.questions:
        if selection.per is not None:
            raise ConfigError("give --questions or --per, not both — --questions names the questions, --per draws them")
        by_id = {t.question_id: t for t in chosen}
        missing = [q for q in selection.questions if q not in by_id]
        if missing:
            raise ConfigError(f"--questions: no question with id {missing[0]}"
                              + (" in the chosen categories" if selection.categories else ""))
        return [by_id[q] for q in dict.fromkeys(selection.questions)]  # a question named twice runs once
    if selection.per is None:
        return chosen
    if selection.per < 1:
        raise ConfigError(f"--per must be ≥ 1, got {selection.per}")
    rng = random.Random(selection.seed)
    picked: list[Task] = []
    for category in dict.fromkeys(t.category for t in chosen):
        pool = by_category[category]
        if selection.per > len(pool):
            raise ConfigError(f"--per {selection.per} is larger than category {category!r} ({len(pool)} questions)")
        picked += sorted(rng.sample(pool, selection.per), key=pool.index)
    return picked


QUESTIONS = Path(__file__).parent / "data" / "spec_bench" / "question.jsonl"  # with its licence and source


def suite_path() -> Path:
    return QUESTIONS
