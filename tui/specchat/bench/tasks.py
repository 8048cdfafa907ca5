"""Benchmark tasks: the bundled suite or a user's TOML file, validated task by task."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
from tomlkit.exceptions import ParseError

from ..engine.conversation import Message
from ..errors import ConfigError

BUNDLED_TASKS = Path(__file__).with_name("tasks.toml")
ROLES = ("system", "user", "assistant")
KEYS = {"name", "kind", "prompt", "earlier", "max_tokens", "copy_heavy"}
RENAMED = {"history": "earlier"}  # the turns before the prompt: "history" names the stored chats


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    kind: str = ""
    max_tokens: int = 128
    copy_heavy: bool = False
    earlier: tuple[Message, ...] = field(default_factory=tuple)  # the turns before the prompt
    # Spec-Bench's: the category a question is reported under, and the user turns after the first (MT-bench's second
    # turn), each asked after the runner's own reply to the turn before, as Spec-Bench runs them.
    category: str = ""
    follow_ups: tuple[str, ...] = ()
    question_id: str = ""  # Spec-Bench's question_id, what --questions names

    def turns(self) -> tuple[str, ...]:
        return (self.prompt, *self.follow_ups)


def _task(index: int, raw: object, label: str) -> Task:
    where = f"{label}: task {index + 1}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} is not a table — write it as [[task]]")
    where = f"{label}: task {raw.get('name', index + 1)!s}"
    unknown = set(raw) - KEYS
    renamed = sorted(unknown & set(RENAMED))
    if renamed:
        raise ConfigError(f"{where}: {renamed[0]!r} is called {RENAMED[renamed[0]]!r} now (the turns before the prompt)"
                          " — rename the key")
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} — expected {', '.join(sorted(KEYS))}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ConfigError(f"{where}: name is missing or not a string")
    if not isinstance(raw.get("prompt"), str) or not raw["prompt"].strip():
        raise ConfigError(f"{where}: prompt is missing or empty")
    max_tokens = raw.get("max_tokens", 128)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ConfigError(f"{where}: max_tokens must be an integer ≥ 1, got {max_tokens!r}")
    copy_heavy = raw.get("copy_heavy", False)
    if not isinstance(copy_heavy, bool):
        raise ConfigError(f"{where}: copy_heavy must be true or false")
    earlier = []
    for turn in raw.get("earlier", []):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES or not isinstance(turn.get("content"), str):
            raise ConfigError(f"{where}: each earlier turn needs role ({'/'.join(ROLES)}) and content")
        earlier.append(Message(turn["role"], turn["content"]))
    return Task(raw["name"], raw["prompt"], str(raw.get("kind", "")), max_tokens, copy_heavy, tuple(earlier))


def load_tasks(path: Path | None = None) -> tuple[list[Task], list[str]]:
    """The tasks of ``path`` (default: the bundled suite) and one line per malformed task that was skipped."""
    path = path or BUNDLED_TASKS
    label = str(path)
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except FileNotFoundError:
        raise ConfigError(f"task file not found: {path} — give a TOML file with [[task]] tables, or omit --tasks") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read task file {path}: {exc}") from None
    except ParseError as exc:
        raise ConfigError(f"{label}:{exc.line}: malformed TOML ({exc}) — fix the syntax") from None
    raw_tasks = document.get("task")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise ConfigError(f"{label}: no [[task]] tables found")
    tasks, problems = [], []
    for index, raw in enumerate(raw_tasks):
        try:
            tasks.append(_task(index, raw, label))
        except ConfigError as exc:
            problems.append(f"skipped: {exc}")
    return tasks, problems
