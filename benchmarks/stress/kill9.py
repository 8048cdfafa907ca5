"""kill -9 at random moments, N times, and check that nothing saved before was lost.

Each round starts specchat on one chat database — the REPL reading a long prompt from a pipe, or the app in a tmux
pane — and kills it with SIGKILL after a random delay that spans loading, prefill, decoding and the saves in between.
After every kill the database is checked with sqlite3 itself, not with specchat's code: ``PRAGMA integrity_check`` is
ok, every message saved before the round is unchanged, and the round's own messages (a new chat for the REPL, the
resumed last chat for the app), if it got that far, are the user's message and the reply up to its last save, its text
equal to its segments. Finally specchat opens the database and
shows the last partial reply as interrupted.

With ``--edits`` each round pipes a REPL a question, then /retry, an /edit of it, /branch back, /fork and /delete,
and kills it anywhere among them. Then every version of every message (shown, or in a branch: its compressed rows
read with zlib and json, not specchat's code) keeps its text equal to its segments, and everything the REPL had
printed before the kill is in the file: each reply it finished, the version it said it showed, the fork it made and
the message it deleted.

    python benchmarks/stress/kill9.py [--rounds 50] [--front repl|app] [--max-delay 8] [--edits]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sqlite3
import zlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a very long story about a lighthouse keeper who finds a message in a bottle."
EDITED = "Write a very long story about a baker who finds a map in a loaf."
EDIT_SCRIPT = [PROMPT, "/retry", "/edit 1", EDITED, "/branch 1 prev", "/fork 2", "/delete 2"]


def snapshot(db: Path) -> dict[int, list[tuple]]:
    """Every chat's messages as stored, read with sqlite3."""
    if not db.exists():
        return {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT conversation_id, position, role, content, segments, finish_reason FROM messages"
                            " ORDER BY conversation_id, position").fetchall()
    chats: dict[int, list[tuple]] = collections.defaultdict(list)
    for chat, *message in rows:
        chats[chat].append(tuple(message))
    return dict(chats)


def check(db: Path, before: dict[int, list[tuple]]) -> str:
    """What this round left: raises AssertionError when anything saved before is lost or the file is damaged."""
    if not db.exists():
        return "killed before the database was created"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    after = snapshot(db)
    for chat, messages in before.items():  # the app goes on with the last chat: earlier messages stay as they were
        assert after.get(chat, [])[:len(messages)] == messages, f"chat {chat} changed"
    new = [messages[len(before.get(chat, [])):] for chat, messages in after.items()
           if len(messages) > len(before.get(chat, []))]
    if not new:
        return "killed before the message was saved"
    (messages,) = new
    assert messages[0][1] == "user" and messages[0][2] == PROMPT
    if len(messages) == 1:
        return "killed before the first save of the reply"
    _, role, content, segments, finish = messages[1]
    assert role == "assistant" and content == "".join(text for text, _ in json.loads(segments or "[]"))
    return "partial reply saved" if finish is None else f"reply saved ({finish})"


def versions(conn: sqlite3.Connection, chat: int) -> list[list[dict]]:
    """Every version of a chat's tail: the messages shown, then each branch's (nested ones too), as stored."""
    shown = [dict(zip(("role", "content", "segments", "finish_reason"), row)) for row in conn.execute(
        "SELECT role, content, segments, finish_reason FROM messages WHERE conversation_id = ? ORDER BY position",
        (chat,))]
    for message in shown:
        message["segments"] = json.loads(message["segments"] or "null")
    tails = [shown]
    stack = [json.loads(zlib.decompress(blob)) for (blob,) in
             conn.execute("SELECT tail FROM branches WHERE conversation_id = ?", (chat,))]
    while stack:
        tail = stack.pop()
        tails.append(tail["turns"])
        stack += [alternative for fork in tail["forks"] for alternative in fork["alternatives"] if alternative]
    return tails


def check_edits(db: Path, before: dict[int, list[tuple]], printed: str) -> str:
    """An edit round: integrity, earlier chats intact, every version whole, and what was printed is stored."""
    if not db.exists():
        return "killed before the database was created"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        after = snapshot(db)
        for chat, messages in before.items():
            assert after.get(chat) == messages, f"chat {chat} changed"
        new = sorted(chat for chat in after if chat not in before)
        if not new:
            return "killed before the message was saved"
        chat_versions = {chat: versions(conn, chat) for chat in new}
    for tails in chat_versions.values():
        for tail in tails:
            for message in tail:
                if message["role"] == "assistant" and message["segments"] is not None:
                    assert message["content"] == "".join(text for text, _ in message["segments"]), "a version torn"
    main = chat_versions[new[0]]
    finished = sum(1 for tail in main for m in tail if m["role"] == "assistant" and m["finish_reason"] is not None)
    summaries = printed.count(" tokens · ")
    assert finished >= min(summaries, 3), f"{summaries} replies printed, {finished} stored"
    stage = f"{min(summaries, 3)} replies finished"
    if "message 1: version 1 of 2" in printed:
        assert main[0][0]["content"] == PROMPT, "the version shown was not saved"
        assert any(tail and tail[0]["content"] == EDITED for tail in main[1:]), "the edit was lost"
        stage = "edited and back"
    if "new chat" in printed:
        assert len(new) == 2, "the fork was not saved"
        (forked,) = [tails[0] for chat, tails in chat_versions.items() if chat != new[0]]
        assert [m["content"] for m in forked][:1] == [PROMPT] and len(forked) == (1 if "deleted" in printed else 2)
        stage = "forked, deleted" if "deleted" in printed else "forked"
    return stage


def start(front: str, env: dict[str, str], tmp: Path, edits: bool = False) -> subprocess.Popen | str:
    if front == "repl" and edits:
        out = open(tmp / "printed.txt", "w")
        process = subprocess.Popen([sys.executable, "-m", "specchat", "repl", "--max-tokens", "40"],
                                   stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env)
        process.stdin.write(("\n".join(EDIT_SCRIPT) + "\n").encode())
        process.stdin.close()
        return process
    if front == "repl":
        process = subprocess.Popen([sys.executable, "-m", "specchat", "repl", "--max-tokens", "600"],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        process.stdin.write((PROMPT + "\n").encode())
        process.stdin.close()
        return process
    session = f"specchat-kill9-{time.time_ns()}"
    variables = " ".join(f"{k}={v}" for k, v in env.items() if k.startswith(("HOME", "XDG_")))
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                    f"env -u COLUMNS -u LINES {variables} {sys.executable} -m specchat chat; sleep 600"], check=True)
    return session


def pid_of(handle: subprocess.Popen | str) -> int | None:
    if isinstance(handle, subprocess.Popen):
        return handle.pid
    out = subprocess.run(["tmux", "list-panes", "-t", handle, "-F", "#{pane_pid}"], capture_output=True, text=True)
    shell = out.stdout.strip()
    if not shell:
        return None
    children = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True).stdout.split()
    return int(children[0]) if children else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--front", choices=("repl", "app"), default="repl")
    parser.add_argument("--max-delay", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--edits", action="store_true", help="kill the REPL among edits, versions, a fork, a delete")
    args = parser.parse_args()
    if args.edits and args.front != "repl":
        parser.error("--edits runs the REPL")
    rng = random.Random(args.seed)
    outcomes: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "XDG_DATA_HOME": str(tmp / "data")}
        db = tmp / "data" / "specchat" / "chats.sqlite3"
        for round_ in range(1, args.rounds + 1):
            before = snapshot(db)
            handle = start(args.front, env, tmp, args.edits)
            delay = rng.uniform(0.2, args.max_delay)
            deadline = time.monotonic() + delay
            typed = args.front == "repl"
            while time.monotonic() < deadline:
                if not typed and db.parent.exists() and pid_of(handle):  # the app: type once it is up
                    screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", handle], capture_output=True,
                                            text=True).stdout
                    if "ACTIVE" in screen:
                        subprocess.run(["tmux", "send-keys", "-t", handle, "-l", PROMPT], check=True)
                        subprocess.run(["tmux", "send-keys", "-t", handle, "Enter"], check=True)
                        typed = True
                time.sleep(0.05)
            pid = pid_of(handle)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if isinstance(handle, subprocess.Popen):
                handle.wait()
            else:
                time.sleep(0.3)
                subprocess.run(["tmux", "kill-session", "-t", handle], capture_output=True)
            outcome = check_edits(db, before, (tmp / "printed.txt").read_text()) if args.edits else check(db, before)
            outcomes[outcome] += 1
            print(f"round {round_}: killed after {delay:.2f} s — {outcome}", flush=True)
        reopened = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from specchat.chats.store import Store; "
             "from specchat.chats.session import ChatSession; s = ChatSession(Store(Path(sys.argv[1])), 'tiny', None,"
             " print); chats = s.store.conversations(); [s.open(c.id) for c in chats];"
             " print(len(chats), 'chats open; finishes of the last:', [getattr(t, 'finish_reason', None)"
             " for t in s.turns])", str(db)], capture_output=True, text=True, env=env)
        print(reopened.stdout.strip() or reopened.stderr.strip())
    print(f"{args.rounds} kills ({args.front}{', edits' if args.edits else ''}): " + ", ".join(f"{n} {what}" for what, n in outcomes.most_common())
          + "; integrity_check ok and every earlier chat intact after each")


if __name__ == "__main__":
    main()
