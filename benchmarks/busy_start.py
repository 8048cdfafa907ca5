"""A busy start, then a quiet machine: does the default draft again (issue #47)?

Each *trial* runs in fresh user folders (cache, chats): the derived demo draft is copied in, nothing else.

- **busy**: two busy loops run beside the first `specchat repl` process from its start (its verify sweep, its plain
  reference) through its first reply, a story asked in a new chat; the loops stop; in the same process the story is
  asked again in a new chat (``/new``), then once more in a new process;
- **fresh**: the same, no loops at all — the speed a fresh cache gives on a quiet machine.

Every reply is the default profile's (``suffix-draft``, "auto"), greedy, through the REPL as a user pipes it; the
figures are read back from the chats it stored (decode tok/s, drafted and accepted tokens). Busy and fresh trials
alternate; medians are reported, and the goal's ratio: each re-asked reply's tok/s after a busy start over the same
reply's after a fresh one (the same machine, the same minute, so the plain rate cancels).

    python benchmarks/busy_start.py [--trials 3] [--loops 2] [--tokens 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROMPT = "Write a 150-word story about a lighthouse keeper who finds a message in a bottle."


def repl(env: dict[str, str], lines: list[str], tokens: int) -> None:
    subprocess.run([sys.executable, "-m", "specchat", "repl", "--max-tokens", str(tokens)], input="\n".join(lines) + "\n",
                   text=True, capture_output=True, env=env, check=True, timeout=900)


def replies(data: Path) -> list[dict]:
    """Every stored reply's figures, oldest chat first."""
    from specchat.chats.store import Store

    store = Store(data / "specchat" / "chats.sqlite3")
    try:
        out = []
        for chat in reversed(store.conversations()):
            for message in store.messages(chat.id):
                if message.role == "assistant":
                    t = message.telemetry or {}
                    out.append({"tps": t.get("decode_tps"), "drafted": t.get("drafted"), "accepted": t.get("accepted"),
                                "generated": t.get("generated"), "text": message.content})
        return out
    finally:
        store.close()


def trial(busy: bool, loops: int, tokens: int, draft: list[Path]) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="busy-start-"))
    try:
        cache, data = root / "cache" / "specchat", root / "data"
        cache.mkdir(parents=True)
        for f in draft:
            shutil.copy(f, cache / f.name)
        env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache"), "XDG_DATA_HOME": str(data),
               "XDG_CONFIG_HOME": str(root / "config")}
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops if busy else 0)]
        try:
            # The first reply runs beside the loops; they stop while the process lives on (a compile that ends).
            first = subprocess.Popen([sys.executable, "-m", "specchat", "repl", "--max-tokens", str(tokens)],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
            assert first.stdin is not None
            first.stdin.write(PROMPT + "\n")
            first.stdin.flush()
            wait_for_replies(data, 1)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        first.stdin.write(f"/new\n{PROMPT}\n")
        first.stdin.close()
        first.wait(timeout=900)
        repl(env, [PROMPT], tokens)  # the next process, on a quiet machine
        found = replies(data)
        if len({r["text"] for r in found}) != 1:
            raise SystemExit("the replies differ: greedy output must not depend on what was drafted")
        return found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_for_replies(data: Path, count: int, timeout: float = 900) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(replies(data)) >= count:
                return
        except Exception:  # the store is being created
            pass
        time.sleep(0.2)
    raise SystemExit("no reply stored in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--loops", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    from specchat import paths
    from specchat.profiles.embedded import DRAFT_FILE

    draft = sorted(paths.cache_dir().glob(DRAFT_FILE + "*"))
    if not draft:
        raise SystemExit("derive the demo draft first: specchat ask 'Hi'")
    names = ("first reply", "asked again, same process", "asked again, next process")
    runs: dict[str, list[list[dict]]] = {"busy": [], "fresh": []}
    for i in range(args.trials):
        for kind in (("busy", "fresh") if i % 2 == 0 else ("fresh", "busy")):
            found = trial(kind == "busy", args.loops, args.tokens, draft)
            runs[kind].append(found)
            print(kind, " · ".join(f"{n}: {r['tps']:.1f} tok/s, {r['accepted']}/{r['drafted']} accepted"
                                   for n, r in zip(names, found)), flush=True)
    print()
    for i, name in enumerate(names):
        busy = statistics.median(t[i]["tps"] for t in runs["busy"])
        fresh = statistics.median(t[i]["tps"] for t in runs["fresh"])
        ratios = [b[i]["tps"] / f[i]["tps"] for b, f in zip(runs["busy"], runs["fresh"])]
        print(f"{name}: busy start {busy:.1f} tok/s, fresh quiet start {fresh:.1f} tok/s; busy/fresh median"
              f" {statistics.median(ratios):.2f} (trials {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
