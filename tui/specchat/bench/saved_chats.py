"""``specchat bench --save-chats``: each question's replies kept in the chats store, as a chat the app can open, so
that a later run (``--stored-chats``), the app, the REPL and ``ask`` draft from them as from any chat the user had."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..chats.store import DamagedDatabase, StoreError

from ..chats.store_rows import StoredMessage

from ..chats.store_opening import open_waiting
from .runners import BASELINE, RunResult
from .tasks import Task


def save_as_chats(db: Path, tasks: list[Task], runs: list[RunResult], *, profile: str, system_prompt: str | None,
                  target_id: str, on_wait: Callable[[str], None] = lambda _line: None) -> int:
    """Every task's plain-decoding replies (of its last repetition; a speculating runner's greedy replies are the
    same) saved as one chat — the task's own earlier turns, then each turn's question and reply with the target's
    token ids; returns how many chats. A damaged database is left as it is (the app sets it aside at its next
    start), and said in one line."""
    last: dict[str, RunResult] = {}
    for run in runs:
        if run.runner == BASELINE and run.rep >= last.get(run.task, run).rep:
            last[run.task] = run
    try:
        store = open_waiting(db, on_wait)
    except DamagedDatabase as exc:
        raise StoreError(f"the chat database {db} is damaged ({exc}) — start specchat once to set it aside (or"
                              " move it away), then run again") from None
    except StoreError as exc:  # (its own words are the app's: "chatting in memory")
        raise StoreError(f"the chat database {db} cannot be opened ({exc.reason}) — move it away or fix its"
                         " permissions, then run again") from None
    saved = 0
    try:
        for task in tasks:
            run = last.get(task.name)
            if run is None or run.tokens is None:
                continue  # the task failed: nothing to keep
            messages = [StoredMessage(m.role, m.content) for m in task.earlier]
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
