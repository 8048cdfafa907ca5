"""``specchat bench --save-chats``: each question's replies kept in the chats store, as a chat the app can open, so
that a later run (``--history``), the app, the REPL and ``ask`` draft from them as from any chat the user had."""

from __future__ import annotations

from pathlib import Path

from ..chats.store import Store, StoredMessage
from .runners import BASELINE, RunResult
from .tasks import Task


def save_as_chats(db: Path, tasks: list[Task], runs: list[RunResult], *, profile: str, system_prompt: str | None,
                  target_id: str) -> int:
    """Every task's plain-decoding replies (of its last repetition; a speculating runner's greedy replies are the
    same) saved as one chat — the task's own earlier turns, then each turn's question and reply with the target's
    token ids; returns how many chats."""
    last: dict[str, RunResult] = {}
    for run in runs:
        if run.runner == BASELINE and run.rep >= last.get(run.task, run).rep:
            last[run.task] = run
    store = Store(db)
    saved = 0
    try:
        for task in tasks:
            run = last.get(task.name)
            if run is None or run.tokens is None:
                continue  # the task failed: nothing to keep
            messages = [StoredMessage(m.role, m.content) for m in task.history]
            at = 0
            for prompt, text, count, finish in zip(task.turns(), run.extra["text_turns"], run.extra["generated_turns"],
                                                   run.extra["finish_turns"]):
                messages += [StoredMessage("user", prompt),
                             StoredMessage("assistant", text, run.tokens[at: at + count], finish_reason=finish,
                                           target_id=target_id)]
                at += count
            chat = store.create(f"bench: {task.name}", profile, system_prompt)
            store.replace_tail(chat, 0, messages)
            saved += 1
    finally:
        store.close()
    return saved
