"""kill -9 at random moments, N times, and check that nothing saved before was lost.

Each round starts specchat on one chat database — the REPL reading a long prompt from a pipe, or the app in a tmux
pane — and kills it with SIGKILL after a random delay that spans loading, prefill, decoding and the saves in between.
After every kill the database is checked with sqlite3 itself, not with specchat's code: ``PRAGMA integrity_check`` is
ok, every message saved before the round is unchanged, and the round's own messages (a new chat for the REPL, the
resumed last chat for the app), if it got that far, are the user's message and the reply up to its last save, its text
equal to its segments. Finally specchat opens the database and
shows the last partial reply as interrupted.

    python benchmarks/stress/kill9.py [--rounds 50] [--front repl|app] [--max-delay 8]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a very long story about a lighthouse keeper who finds a message in a bottle."


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


def start(front: str, env: dict[str, str], tmp: Path) -> subprocess.Popen | str:
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
    args = parser.parse_args()
    rng = random.Random(args.seed)
    outcomes: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "XDG_DATA_HOME": str(tmp / "data")}
        db = tmp / "data" / "specchat" / "chats.sqlite3"
        for round_ in range(1, args.rounds + 1):
            before = snapshot(db)
            handle = start(args.front, env, tmp)
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
            outcome = check(db, before)
            outcomes[outcome] += 1
            print(f"round {round_}: killed after {delay:.2f} s — {outcome}", flush=True)
        reopened = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from specchat.chats.store import Store; "
             "from specchat.chats.session import ChatSession; s = ChatSession(Store(Path(sys.argv[1])), 'tiny', None,"
             " print); chats = s.store.conversations(); [s.open(c.id) for c in chats];"
             " print(len(chats), 'chats open; finishes of the last:', [getattr(t, 'finish_reason', None)"
             " for t in s.turns])", str(db)], capture_output=True, text=True, env=env)
        print(reopened.stdout.strip() or reopened.stderr.strip())
    print(f"{args.rounds} kills ({args.front}): " + ", ".join(f"{n} {what}" for what, n in outcomes.most_common())
          + "; integrity_check ok and every earlier chat intact after each")


if __name__ == "__main__":
    main()
